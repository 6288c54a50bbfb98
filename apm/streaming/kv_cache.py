"""KV-cache memory, in the spirit of ReKV: the stream encoded chunk by chunk into the model's own
key/value cache, and a question answered from the chunks retrieved for it.

The model is the run's backbone on the transformers path (``backbone=tiny_qwen2vl_hf``, or any
``apm.backbones.hf.HFBackbone`` of an architecture ``apm.streaming.internals`` supports: Qwen2-VL,
Qwen2.5-VL, Qwen3-VL): the system works on its weights directly, on its worker thread, on the
model's device. Every ``chunk_frames`` frames, the chunk is run through the model as one video
segment; its per-layer keys and values are kept, with the mean last hidden state of its tokens as
its retrieval vector. At a probe the question is embedded the same way; the ``top_k`` chunks most
similar to it (cosine) among the visible earlier sessions and the current one, plus the current
session's latest chunk (frames not yet in a chunk are encoded for the answer only, never kept), are
joined in time order into the cache the prompt is prefilled on, and the answer is decoded greedily
up to the run's ``generation.max_tokens``. Each chunk keeps its own positions (it was encoded
alone); the prompt follows at the largest of them. At the session end the chunks' caches are
written to the state folder in ``store_dtype``: ``<session>.kv.npz`` (keys, values, retrieval
vectors) and ``<session>.kv.json`` (chunk index and the user's turns).
"""

from __future__ import annotations

import io
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from apm.backbones.base import Request, Response
from apm.backbones.hf import HFBackbone, to_chat_inputs
from apm.data.frames import Frame
from apm.data.ids import session_path
from apm.data.instances import Turn
from apm.data.model import Session
from apm.memory.text import instance_query
from apm.records.atomic import write_atomically
from apm.records.declaration import Declaration
from apm.streaming.base import Answer, Probe, SessionContext, StreamingSystem, TurnLog, earlier_states
from apm.streaming.internals import (
    UnsupportedArchitecture,
    architecture,
    position_after,
    segment_inputs,
    segment_positions,
    supported,
    text_positions,
)


@dataclass(frozen=True, eq=False)
class Chunk:
    """A run of frames encoded together: where it lies, its retrieval vector and its cache."""

    session: Session
    frames: tuple[tuple[float, int], ...]
    """(video offset, wall-clock second) of each frame."""
    vector: np.ndarray
    next_position: int
    """The position the text after the chunk takes (one past its largest M-RoPE position)."""
    tokens: int
    kv: tuple[np.ndarray, np.ndarray] | None = None
    """Keys and values, each (layers, kv heads, tokens, head dim), while in memory (this session's)."""
    stored: tuple[Path, int] | None = None
    """Else where they are: an earlier session's ``.kv.npz`` and the chunk's number in it."""

    def cache(self) -> tuple[np.ndarray, np.ndarray]:
        """Keys and values, read from the state folder for an earlier session's chunk (only when attended)."""
        if self.kv is not None:
            return self.kv
        assert self.stored is not None  # a chunk holds its caches (kv) or where they are stored
        path, i = self.stored
        with np.load(path) as arrays:
            return arrays[f"keys{i}"], arrays[f"values{i}"]

    def refs(self) -> tuple[Frame, ...]:
        """The chunk's frames as the record lists them (no pixels: they are not kept)."""
        return tuple(Frame(self.session.key, offset, second, b"") for offset, second in self.frames)


def encode_chunk(processor: Any, model: Any, frames: list[Frame]) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Run one chunk through the model as one video segment (its architecture's placeholder and M-RoPE
    index: ``apm.streaming.internals``): its keys, values, mean last hidden state and next text position."""
    import torch

    inputs = segment_inputs(processor, model, frames)
    positions = segment_positions(model, inputs)
    with torch.inference_mode():
        out = model(**inputs, position_ids=positions, use_cache=True, output_hidden_states=True)
    keys = torch.stack([layer.keys[0] for layer in out.cache.layers]).float().cpu().numpy()
    values = torch.stack([layer.values[0] for layer in out.cache.layers]).float().cpu().numpy()
    vector = out.hidden_states[-1][0].mean(0).float().cpu().numpy()
    return keys, values, vector, position_after(positions)


def embed_text(processor: Any, model: Any, text: str) -> np.ndarray:
    """A text's retrieval vector: the mean last hidden state of its tokens."""
    import torch

    ids = processor.tokenizer(text, return_tensors="pt").input_ids.to(model.device)
    with torch.inference_mode():
        out = model(input_ids=ids, output_hidden_states=True)
    return out.hidden_states[-1][0].mean(0).float().cpu().numpy()


def generate_from(processor: Any, model: Any, chunks: list[Chunk], prompt: str, max_tokens: int) -> Response:
    """Prefill ``prompt`` on the chunks' caches (in order) and decode greedily up to ``max_tokens``."""
    import torch
    from transformers import DynamicCache

    began = time.perf_counter()
    cache = DynamicCache()
    kv = [c.cache() for c in chunks]
    for layer in range(kv[0][0].shape[0]):
        keys = np.concatenate([k[layer] for k, _ in kv], axis=1)[None]
        values = np.concatenate([v[layer] for _, v in kv], axis=1)[None]
        cache.update(torch.from_numpy(keys).to(model.device, model.dtype),
                     torch.from_numpy(values).to(model.device, model.dtype), layer)
    ids = processor.tokenizer(prompt, return_tensors="pt").input_ids.to(model.device)
    position = max(c.next_position for c in chunks)
    eos = model.generation_config.eos_token_id
    stops = set(eos if isinstance(eos, list) else [eos])
    prompt_tokens = cache.get_seq_length() + ids.shape[1]
    new: list[int] = []
    first = None
    with torch.inference_mode():
        while len(new) < max_tokens:
            span = text_positions(model, position, ids.shape[1])
            mask = torch.ones(1, cache.get_seq_length() + ids.shape[1], dtype=torch.long, device=model.device)
            out = model(input_ids=ids, position_ids=span, attention_mask=mask, cache=cache, use_cache=True)
            token = int(out.logits[0, -1].argmax())
            first = first or time.perf_counter() - began
            position += ids.shape[1]
            if token in stops:
                break
            new.append(token)
            ids = torch.tensor([[token]], device=model.device)
    total = time.perf_counter() - began
    finish = "length" if len(new) >= max_tokens else "stop"
    return Response(text=processor.tokenizer.decode(new, skip_special_tokens=True), ttft_s=first, total_s=total,
                    elapsed_s=total, prompt_tokens=prompt_tokens, completion_tokens=len(new), finish_reason=finish)


def chat_text(processor: Any, model: Any, request: Request) -> str:
    """A request without frames as the model's chat text, ready for the answer to follow."""
    conversation = to_chat_inputs(request.messages).conversation
    return processor.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)


class KVCacheMemory(StreamingSystem):
    """KV-cache memory: chunk caches kept per session, the top-k most similar to the question attended."""

    name = "KV-Cache Memory"
    declaration = Declaration("specialised", streaming=True, persistent=True, tag="reference system",
                              representation="kv_cache")

    def __init__(self, chunk_frames: int = 4, top_k: int = 4, store_dtype: str = "float16", name: str | None = None):
        super().__init__(name)
        self.chunk_frames, self.top_k, self.store_dtype = chunk_frames, top_k, store_dtype

    async def begin(self, context: SessionContext) -> None:
        if not isinstance(context.backbone, HFBackbone):
            raise UnsupportedArchitecture(
                f"{self.name} works on a transformers model's own cache: it needs an HFBackbone of {supported()} "
                f"(e.g. backbone=tiny_qwen2vl_hf), not {context.backbone.name!r}")
        self.context = context
        self.engine = context.backbone
        await self.engine.with_model(lambda _, model: architecture(model))  # refuses an unsupported one
        self.earlier: list[Chunk] = []
        self.turns = TurnLog()
        for session, path, kept in earlier_states(context, ".kv.json"):
            self.earlier += load_chunks(session, kept, path.with_suffix(".npz"))
            self.turns.read(kept)
        self.chunks: list[Chunk] = []
        self.pending: list[Frame] = []

    async def _encode(self, frames: list[Frame]) -> Chunk:
        keys, values, vector, next_position = await self.engine.with_model(encode_chunk, frames)
        dtype = np.dtype(self.store_dtype)
        return Chunk(self.context.session, tuple((f.offset, f.wall_clock) for f in frames), vector, next_position,
                     keys.shape[2], kv=(keys.astype(dtype), values.astype(dtype)))

    async def observe_frame(self, frame: Frame) -> None:
        self.pending.append(frame)
        if len(self.pending) == self.chunk_frames:
            self.chunks.append(await self._encode(self.pending))
            self.pending = []

    async def observe_turn(self, turn: Turn) -> None:
        self.turns.hear(turn)

    async def answer(self, probe: Probe) -> Answer:
        latest = [await self._encode(self.pending)] if self.pending else self.chunks[-1:]
        visible = set(probe.instance.visible_sessions)
        pool = [c for c in self.earlier if c.session.key in visible] + [c for c in self.chunks if c not in latest]
        chosen = [*await self._retrieve(instance_query(probe.instance), pool), *latest]
        request = probe.request(turns=self.turns.shown(probe))  # the cache stands for the frames
        if not chosen:
            return Answer(Response(error="no frame of the session could be observed"), request)
        prompt = await self.engine.with_model(chat_text, request)
        response = await self.engine.with_model(generate_from, chosen, prompt, request.settings.max_tokens)
        return Answer(response, request, tuple(f for c in chosen for f in c.refs()))

    async def _retrieve(self, query: str, pool: list[Chunk]) -> list[Chunk]:
        """The ``top_k`` chunks most similar to the query (cosine), in the order they were recorded."""
        if not pool:
            return []
        question = await self.engine.with_model(embed_text, query)
        vectors = np.stack([c.vector for c in pool])
        similarity = vectors @ question / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(question) + 1e-9)
        best = sorted(np.argsort(-similarity, kind="stable")[: self.top_k])
        return [pool[i] for i in best]

    async def export(self, state_dir: Path) -> dict[str, Any]:
        if self.pending:
            self.chunks.append(await self._encode(self.pending))
            self.pending = []
        session = self.context.session
        arrays: dict[str, np.ndarray] = {}
        for i, c in enumerate(self.chunks):
            assert c.kv is not None  # this session's chunks come from _encode, which keeps their caches
            arrays[f"keys{i}"], arrays[f"values{i}"] = c.kv
        arrays["vectors"] = np.stack([c.vector for c in self.chunks]) if self.chunks else np.zeros((0, 0))
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)  # type: ignore[arg-type]  # numpy's stub fears a key named allow_pickle; ours are keysN/valuesN/vectors
        write_atomically(session_path(state_dir, session, ".kv.npz"), buffer.getvalue())
        index = {"chunks": [{"frames": c.frames, "next_position": c.next_position, "tokens": c.tokens}
                            for c in self.chunks], "turns": self.turns.to_json()}
        write_atomically(session_path(state_dir, session, ".kv.json"), json.dumps(index).encode())
        return {"chunks": len(self.chunks), "tokens": sum(c.tokens for c in self.chunks)}


def load_chunks(session: Session, index: dict[str, Any], npz: Path) -> list[Chunk]:
    """An earlier session's chunks from its state files: retrieval vectors now, caches when attended."""
    with np.load(npz) as arrays:
        vectors = arrays["vectors"]
    return [Chunk(session, tuple((float(o), int(s)) for o, s in c["frames"]), vectors[i], c["next_position"],
                  c["tokens"], stored=(npz, i)) for i, c in enumerate(index["chunks"])]
