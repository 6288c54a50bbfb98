"""FluxMem (YiwengXie/FluxMem, the official code) behind apm's process boundary. FluxMem's evaluation
is prefix-recompute: for each question it reads the video up to the question (``StreamingBenchEvaluator.
_process_video`` in ``evaluation/streamingbench/streamingbench.py``) and builds its memory (short-term
frames kept, mid-term pruned, long-term clustered: ``FluxMem.process_memory_streaming``) inside that one
prefill. This adapter calls that method itself, on the user's checkout (``upstream``), with the frames
the harness streamed instead of a video file. Run by ``python -m apm_child adapters/fluxmem.py:FluxMem``
in a transformers 4.50 side env.

The prefix of a probe is the stream so far: the visible earlier sessions' frames, then the current
session's, the last ``window_s`` of them (``time_window_size``; None: all, the script's default),
sampled to at most ``max_frames`` as FluxMem's video reader samples a file (``smart_nframes``).
State: each finished session's frames (JPEG), what a later prefix is read from.

Deviation: ``prefix_recompute`` (the memory is rebuilt per question; latency covers it: declared
``streaming: false``). FluxMem exports nothing (its pruned tokens live only inside one prefill); the
frames exported here rebuild exactly what the adapter holds, so a resume needs no replay. Each memory
line reports the tokens the last prefill kept.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _upstream import FirstToken, checkout, load_frames, pil, query, save_frames, seed_all  # noqa: E402

from apm_child import Answer, Frame, Harness, Probe, Session, System  # noqa: E402

COMMIT = "6fdbf65b6f2af1a94ca41d542be5be86a565d338"
SRC = ("models/qwen2-5-vl/src", "models/qwen-vl-utils/src")


class FluxMem(System):
    name = "FluxMem (official, child process)"
    declaration = {"family": "specialised", "streaming": False, "persistent": True,
                   "representation": "visual_features"}
    deviations = ("prefix_recompute",)

    def __init__(self, upstream: str, model: str, commit: str = COMMIT, window_s: float = None,
                 max_frames: int = 256, max_pixels: int = 401408, short_frames: int = 8, medium_frames: int = 64,
                 attn: str = "sdpa", dtype: str = "float32") -> None:
        # defaults: evaluation/streamingbench/streamingbench.sh (MAX_PIXELS, MAX_NUM_FRAMES, SHORT/MEDIUM_FRAMES)
        super().__init__(upstream=upstream, model=model, commit=commit, window_s=window_s, max_frames=max_frames,
                         max_pixels=max_pixels, short_frames=short_frames, medium_frames=medium_frames, attn=attn,
                         dtype=dtype)
        self.found = checkout(upstream, commit, syspath=SRC)
        self.evaluator = None
        self.prefills: List[Dict[str, int]] = []

    def identity(self) -> Dict[str, Any]:
        import torch
        import transformers

        return {**self.found, "system": "FluxMem", "transformers": transformers.__version__, "torch": torch.__version__}

    def _load(self) -> None:
        """``StreamingBenchEvaluator`` as its ``_load_model`` builds it (model, processor, ``args``), with
        ``attn``/``dtype`` for ``flash_attention_2``/``bfloat16`` and no ``device_map``."""
        import torch
        from qwen2_5_vl_fluxmem import Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor

        opts = self.options
        path = os.path.join(self.found["upstream"], "evaluation", "streamingbench", "streamingbench.py")
        spec = importlib.util.spec_from_file_location("fluxmem_streamingbench", path)
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
        args = bench.build_argparser().parse_args(["--ckpt_path", opts["model"], "--task_csv", "-", "--video_dir", "-",
                                                   "--use_fluxmem", "--max_num_frames", str(opts["max_frames"]),
                                                   "--max_pixels", str(opts["max_pixels"]),
                                                   "--short_frames", str(opts["short_frames"]),
                                                   "--medium_frames", str(opts["medium_frames"])])
        ev = object.__new__(bench.StreamingBenchEvaluator)
        ev.args, ev.device = args, torch.device("cuda" if torch.cuda.is_available() else "cpu")
        ev.model = Qwen2_5_VLForConditionalGeneration.from_pretrained(
            opts["model"], torch_dtype=getattr(torch, opts["dtype"]), attn_implementation=opts["attn"])
        ev.model = ev.model.to(ev.device).eval()
        ev.processor = Qwen2_5_VLProcessor.from_pretrained(opts["model"], min_pixels=16 * 28 * 28,
                                                           max_pixels=args.max_pixels)
        memory = ev.model.model.fluxmem
        prune = memory.process_memory_streaming

        def counted(*a, **k):  # what each prefill kept of its tokens (FluxMem's own numbers)
            out = prune(*a, **k)
            self.prefills.append({"tokens": int(k["hidden_states"].shape[1]), "kept": int(out[0].shape[1])})
            return out

        memory.process_memory_streaming = counted
        self.evaluator = ev

    def begin(self, session: Session, sessions, state_dir: str, seed: int, harness: Harness) -> None:
        if self.evaluator is None:
            self._load()
        seed_all(seed)  # the script seeds once (1234) at load; here each session from the harness's seed
        self.session, self.current = session, []
        self.earlier: List[Frame] = load_frames(state_dir, sessions, session.index)

    def observe_frame(self, frame: Frame) -> None:
        self.current.append(frame)  # nothing else: FluxMem builds its memory when asked

    def answer(self, probe: Probe, harness: Harness) -> Answer:
        import numpy as np
        from qwen_vl_utils_fluxmem.vision_process import smart_nframes

        ev, opts = self.evaluator, self.options
        visible = set(probe.visible_sessions)
        stream = [f for f in self.earlier if f.session in visible] + self.current
        if opts["window_s"]:
            stream = stream[-int(opts["window_s"]):]  # 1 FPS: the last window_s seconds of the stream
        n = smart_nframes({"fps": 1.0, "max_frames": opts["max_frames"], "min_frames": 2}, total_frames=len(stream),
                          video_fps=1.0)
        frames = [stream[i] for i in np.linspace(0, len(stream) - 1, n).round().astype(int)]
        ev.args.fps = len(frames) / max(len(stream), 1)  # the sampled frames' rate (the reader returns it so)
        asked = query(probe.fields, probe.turns)
        prompt = ev._format_prompt(asked["question"], repr(asked["options"]) if asked["options"] else "")
        first, generate = FirstToken(), ev.model.generate
        ev.model.generate = lambda **kw: generate(**kw, streamer=first)
        start = time.perf_counter()
        try:
            response = ev._process_video([pil(f.jpeg) for f in frames], prompt, probe.probe_time)
        finally:
            ev.model.generate = generate
        total = time.perf_counter() - start
        return Answer(text=response, ttft_s=(first.at - start) if first.at else total, total_s=total,
                      frames=tuple(Frame(f.session, f.offset, f.wall_clock, b"") for f in frames))

    def export(self, state_dir: str) -> Dict[str, Any]:
        save_frames(state_dir, self.session, self.current)
        last = self.prefills[-1] if self.prefills else {}
        return {"frames": len(self.current), "prefills": len(self.prefills), "last_prefill_tokens": last.get("tokens"),
                "last_prefill_kept": last.get("kept")}
