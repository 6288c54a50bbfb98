"""OASIS (Solus-sano/OASIS, the official code) behind apm's process boundary: its own loop, frame by
frame (``OasisModel.process_stream_input``), asked through ``OasisModel.process_query``. Nothing of
OASIS is copied here: the user's checkout is imported (``upstream``), as its ``src/scripts/eval.py``
imports it. Run by ``python -m apm_child adapters/oasis.py:Oasis`` in a transformers 4.57 side env.

State: the event forest (events with summaries, embeddings and keyframes; QA nodes and the QA summary;
merges) saved after each session into ``oasis_forest.pt`` (``torch.save`` of its nodes as plain dicts, so
the same forest gives the same bytes), rewritten in place; a session starts from it
with empty short-term buffers (as OASIS starts a video). Frames a session ends with before they fill a
segment are dropped, as OASIS drops a video's tail.

Deviations: ``answers_write_state`` — ``process_query`` stores the QA and has the LLM rewrite the QA
summary every later query reads (``isolate_answers=True`` puts the forest and the RNG back after each
answer instead: then nothing is declared). Sampling (``do_sample`` with temperature 0.1 in OASIS's
config) is seeded with the session seed the harness hands over.
"""

from __future__ import annotations

import copy
import os
import sys
import time
from typing import Any, Dict, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _upstream import checkout, pil, query, seed_all, write_atomically  # noqa: E402

from apm_child import Answer, Frame, Harness, Probe, Session, System  # noqa: E402

COMMIT = "dbd342c79a1b9b03327d4ec5daa87488737db988"
STATE = "oasis_forest.pt"
FOREST = ("nodes", "roots", "QA_lst", "QA_summary_all", "merges", "snapshots")
"""The ``EventForest`` attributes that are its memory (what its ``reset`` clears)."""


def _plain(value: Any) -> Any:
    """OASIS's pydantic nodes as plain dicts: a pickled model carries its fields-set as a ``set``, whose
    order changes with each process's hash seed, so the same forest would not give the same bytes."""
    if hasattr(value, "model_fields"):
        return {"__oasis__": type(value).__name__, **{k: _plain(v) for k, v in vars(value).items()}}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return [_plain(v) for v in value] if isinstance(value, list) else value


def _model(value: Any, types: Any) -> Any:
    """:func:`_plain` undone with the classes of ``src/oasis/types.py``."""
    if isinstance(value, dict):
        fields = {k: _model(v, types) for k, v in value.items() if k != "__oasis__"}
        return getattr(types, value["__oasis__"]).model_construct(**fields) if "__oasis__" in value else fields
    return [_model(v, types) for v in value] if isinstance(value, list) else value


class Oasis(System):
    name = "OASIS (official, child process)"
    declaration = {"family": "specialised", "streaming": True, "persistent": True, "representation": "event_tree"}

    def __init__(self, upstream: str, mllm: str, embedding: str, commit: str = COMMIT, config: Dict[str, Any] = None,
                 isolate_answers: bool = False, attn: str = "sdpa", dtype: str = "float32") -> None:
        super().__init__(upstream=upstream, mllm=mllm, embedding=embedding, commit=commit, config=config or {},
                         isolate_answers=isolate_answers, attn=attn, dtype=dtype)
        self.deviations: Tuple[str, ...] = () if isolate_answers else ("answers_write_state",)
        self.found = checkout(upstream, commit)
        self.model = None

    def identity(self) -> Dict[str, Any]:
        import torch
        import transformers

        return {**self.found, "system": "OASIS", "transformers": transformers.__version__, "torch": torch.__version__}

    def _load(self) -> None:
        """``OasisModel`` as ``eval.py`` builds it, from ``src/configs/default.yaml`` and ``config``.
        Shims (OASIS hard-codes CUDA-only settings): the MLLM loads with ``attn``/``dtype`` and no
        ``device_map``; the embedder with sentence-transformers' own attention, on CPU unless CUDA is there."""
        import sentence_transformers
        import torch
        import transformers
        import yaml
        from src.oasis import model as oasis_model
        from src.oasis.config import OasisConfig
        from src.oasis.event import forest as oasis_forest

        opts = self.options
        with open(os.path.join(self.found["upstream"], "src", "configs", "default.yaml")) as f:
            settings = yaml.safe_load(f)
        for group, values in opts["config"].items():
            settings.setdefault(group, {}).update(values)
        settings.setdefault("mllm", {})["model_path"] = opts["mllm"]
        settings.setdefault("embedding_model", {})["model_path"] = opts["embedding"]
        device = "cuda" if torch.cuda.is_available() else "cpu"
        base = transformers.Qwen3VLForConditionalGeneration

        class CpuQwen3VL(base):  # shim: flash_attention_2, bfloat16 and device_map="auto" are hard-coded
            @classmethod
            def from_pretrained(cls, path, *args, **kwargs):
                kwargs.update(attn_implementation=opts["attn"], torch_dtype=getattr(torch, opts["dtype"]))
                kwargs.pop("device_map", None)
                return base.from_pretrained(path, *args, **kwargs).to(device)

        def embedder(path, model_kwargs=None, tokenizer_kwargs=None, **kwargs):  # shim: same, for the embedder
            return sentence_transformers.SentenceTransformer(path, device=device, tokenizer_kwargs=tokenizer_kwargs)

        oasis_model.Qwen3VLForConditionalGeneration = CpuQwen3VL
        oasis_forest.SentenceTransformer = embedder
        self.model = oasis_model.OasisModel(OasisConfig(**settings))

    def begin(self, session: Session, sessions, state_dir: str, seed: int, harness: Harness) -> None:
        import torch
        from src.oasis import types
        from src.oasis.types import FramePacket

        if self.model is None:
            self._load()
        self.FramePacket, self.session = FramePacket, session
        self.model.reset()
        path = os.path.join(state_dir, STATE)
        if os.path.exists(path):
            saved = torch.load(path, weights_only=False)
            for name in FOREST:
                setattr(self.model.event_forest, name, _model(saved[name], types))
        seed_all(seed)
        self.frames = 0

    def observe_frame(self, frame: Frame) -> None:
        import numpy as np
        import torch

        chw = torch.from_numpy(np.asarray(pil(frame.jpeg))).permute(2, 0, 1).contiguous()
        self.model.process_stream_input(self.FramePacket(t=float(frame.wall_clock), idx=frame.wall_clock, frame=chw))
        self.frames += 1

    def answer(self, probe: Probe, harness: Harness) -> Answer:
        import torch
        from src.scripts.eval import build_query, extract_answer

        asked = query(probe.fields, probe.turns)
        bp = {"question": asked["question"]}
        if asked["options"]:
            bp.update(type="multiple_choice", options=asked["options"])
        forest = self.model.event_forest
        kept = ({n: copy.copy(getattr(forest, n)) for n in FOREST}, torch.get_rng_state())
        start = time.perf_counter()
        try:
            response = self.model.process_query(build_query(bp))
        finally:
            if self.options["isolate_answers"]:
                for name, value in kept[0].items():
                    setattr(forest, name, value)
                torch.set_rng_state(kept[1])
        total = time.perf_counter() - start
        # eval.py's reading of a response: the <answer> span, else the whole text. OASIS generates
        # without streaming, so the first token is known only at the end: ttft_s is the full time.
        return Answer(text=extract_answer(response) or response, ttft_s=total, total_s=total)

    def export(self, state_dir: str) -> Dict[str, Any]:
        import torch

        forest = self.model.event_forest
        size = write_atomically(os.path.join(state_dir, STATE),
                                lambda f: torch.save({n: _plain(getattr(forest, n)) for n in FOREST}, f))
        return {"events": len(forest.nodes), "roots": len(forest.roots), "merges": len(forest.merges),
                "qa": len(forest.QA_lst), "frames_seen": self.frames, "state_bytes": size}
