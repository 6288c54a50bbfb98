"""Feature memory, in the spirit of Flash-VStream and FLUXMem: a fixed-budget memory of the vision
encoder's compressed frame features, injected as embeddings at answer time.

The model is the run's backbone on the transformers path (``backbone=tiny_qwen2vl_hf``, or any
``apm.backbones.hf.HFBackbone`` of an architecture in ``apm.streaming.internals.ARCHITECTURES``): the
system works on its weights, on its worker thread. Every ``chunk_frames`` frames, the chunk goes through
the model's own vision encoder (``get_video_features``: the merged visual tokens its decoder takes, and
Qwen3-VL's DeepStack features, one grid per temporal patch of frames); each grid is average-pooled to at
most ``pool`` x ``pool`` tokens and becomes one memory entry. A session keeps at most ``budget``
entries: while it holds more, the two adjacent entries most alike (cosine of their flattened features)
are merged into their weighted mean (weights: how many grids each holds), so the state is bounded by the
budget whatever the session's length (an entry keeps its span's first and last frame, not every frame).
At a probe the entries of the visible earlier sessions and of the current one (plus the frames not yet
in a chunk, encoded for this answer only) are written into the prompt as embeddings (DeepStack ones
added where the model adds its own), one placeholder run per session where the request layout puts its
frames, with plain text positions (a merged entry has no single grid position), and the answer is
decoded greedily up to ``generation.max_tokens``. At the session end the entries are written in
``store_dtype``: ``<session>.features.npz`` and ``<session>.features.json`` (entries' spans, frame
counts, weights and token counts, and the user's turns). docs/streaming-systems.md, "Feature memory".
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
from apm.backbones.hf import to_chat_inputs
from apm.data.frames import Frame
from apm.data.ids import session_path
from apm.data.instances import Turn
from apm.data.model import Session
from apm.records.atomic import write_atomically
from apm.records.declaration import Declaration
from apm.streaming.base import Answer, Probe, SessionContext, StreamingSystem, read_earlier, transformers_backbone
from apm.streaming.internals import architecture, segment_features

PLACEHOLDER = {"type": "video"}
"""A memory segment in the chat: the template's video placeholder, expanded to the segment's tokens."""


@dataclass(frozen=True)
class Entry:
    """One memory entry: the pooled features of one or more adjacent grids, and the frames they cover."""

    session: Session
    span: tuple[tuple[float, int], tuple[float, int]]
    """(video offset, wall-clock second) of the first and the last frame it covers (a run of the session's
    frames: only adjacent entries merge), so its size does not grow with what it covers."""
    frames: int
    """How many frames it covers."""
    features: np.ndarray
    """(layers, tokens, hidden): the decoder-input tokens, then each DeepStack layer's (Qwen3-VL); float32
    holding values of the store dtype (what a later session reads back)."""
    weight: int
    """How many grids it averages."""

    def refs(self) -> tuple[Frame, ...]:
        """The first and last frame the entry covers as the record lists them (no pixels: they are not kept)."""
        ends = dict.fromkeys(self.span)
        return tuple(Frame(self.session.key, offset, second, b"") for offset, second in ends)


def check_architecture(processor: Any, model: Any) -> None:
    """Refuse, in one line naming those it knows, a model whose internals ``apm.streaming.internals`` does
    not know (the one table the internals references share)."""
    architecture(model)


def visual_grids(processor: Any, model: Any, frames: list[Frame]) -> np.ndarray:
    """The model's own merged visual tokens of ``frames`` as one video, then their DeepStack features where the
    model has them (``apm.streaming.internals.segment_features``): (layers, temporal patches, rows, cols, hidden)."""
    segment = segment_features(processor, model, frames)
    layers = [segment.embeds, *segment.deepstack]
    return np.stack([layer.float().cpu().numpy() for layer in layers]).reshape(len(layers), *segment.grid, -1)


def pool_grids(grids: np.ndarray, pool: int) -> np.ndarray:
    """Each grid of each layer average-pooled to at most ``pool`` x ``pool`` tokens: (temporal patches, layers,
    tokens, hidden)."""
    import torch
    import torch.nn.functional as F

    layers, t, h, w, hidden = grids.shape
    maps = torch.from_numpy(grids).reshape(layers * t, h, w, hidden).permute(0, 3, 1, 2)
    pooled = F.adaptive_avg_pool2d(maps, (min(pool, h), min(pool, w))).flatten(2).transpose(1, 2)
    return pooled.reshape(layers, t, -1, hidden).transpose(0, 1).numpy()


def in_store_dtype(features: np.ndarray, dtype: str) -> np.ndarray:
    """``features`` rounded to the store dtype (kept as float32), so memory and its file agree exactly."""
    return features.astype(dtype).astype(np.float32)


def merge_to_budget(entries: list[Entry], budget: int, dtype: str) -> list[Entry]:
    """While more than ``budget`` entries: merge the adjacent pair most alike (cosine; the earliest on a tie)
    into their weighted mean."""
    entries = list(entries)
    while len(entries) > budget:
        flat = [e.features.ravel() for e in entries]
        alike = [float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-9)) if a.shape == b.shape else -np.inf
                 for a, b in zip(flat, flat[1:])]
        i = int(np.argmax(alike))
        a, b = entries[i], entries[i + 1]
        mean = (a.features * a.weight + b.features * b.weight) / (a.weight + b.weight)
        entries[i: i + 2] = [Entry(a.session, (a.span[0], b.span[1]), a.frames + b.frames, in_store_dtype(mean, dtype),
                                   a.weight + b.weight)]
    return entries


def written_in(processor: Any, model: Any, prompt: str, segments: list[np.ndarray]) -> tuple[Any, dict[str, Any]]:
    """``prompt``'s input embeddings with its i-th video placeholder expanded to ``segments[i]`` (layers, tokens,
    hidden): the first layer written in at those tokens, the others (DeepStack) as the language model's
    arguments that add them where the model adds its own."""
    import torch

    pad = model.config.video_token_id
    prompt_ids = processor.tokenizer(prompt).input_ids
    if prompt_ids.count(pad) != len(segments):
        raise ValueError(f"the prompt holds {prompt_ids.count(pad)} video placeholders for {len(segments)} segments")
    runs = iter(segments)
    expanded = [t for token in prompt_ids for t in ([pad] * next(runs).shape[1] if token == pad else [token])]
    ids = torch.tensor([expanded], device=model.device)
    with torch.inference_mode():
        embeds = model.get_input_embeddings()(ids)
        if not segments:
            return embeds, {}
        memory = torch.from_numpy(np.concatenate(segments, axis=1)).to(model.device, embeds.dtype)
        embeds[ids == pad] = memory[0]
    deepstack = {"visual_pos_masks": ids == pad, "deepstack_visual_embeds": list(memory[1:])} if len(memory) > 1 else {}
    return embeds, deepstack


def next_logits(model: Any, embeds: Any, position: int, cache: Any, extra: dict[str, Any]) -> Any:
    """The language model's logits after ``embeds`` (batch 1) placed at plain text positions from ``position``."""
    import torch

    span = torch.arange(position, position + embeds.shape[1], device=model.device).view(1, -1)
    with torch.inference_mode():
        out = model.model.language_model(inputs_embeds=embeds, position_ids=span, cache=cache, use_cache=True, **extra)
        return model.lm_head(out.last_hidden_state[0, -1])


def answer_from(processor: Any, model: Any, prompt: str, segments: list[np.ndarray], max_tokens: int) -> Response:
    """Decode greedily up to ``max_tokens`` from ``prompt`` with the memory ``segments`` written in."""
    import torch
    from transformers import DynamicCache

    began = time.perf_counter()
    step, extra = written_in(processor, model, prompt, segments)
    prompt_tokens = step.shape[1]
    eos = model.generation_config.eos_token_id
    stops = set(eos if isinstance(eos, list) else [eos])
    cache, position, first = DynamicCache(), 0, None
    new: list[int] = []
    while len(new) < max_tokens:
        token = int(next_logits(model, step, position, cache, extra).argmax())
        first = first or time.perf_counter() - began
        position, extra = position + step.shape[1], {}
        if token in stops:
            break
        new.append(token)
        with torch.inference_mode():
            step = model.get_input_embeddings()(torch.tensor([[token]], device=model.device))
    total = time.perf_counter() - began
    return Response(text=processor.tokenizer.decode(new, skip_special_tokens=True), ttft_s=first, total_s=total,
                    elapsed_s=total, prompt_tokens=prompt_tokens, completion_tokens=len(new),
                    finish_reason="length" if len(new) >= max_tokens else "stop")


def chat_with_segments(processor: Any, model: Any, request: Request, segments: int) -> str:
    """The request as the model's chat text, with ``segments`` video placeholders where the layout puts its
    frames (after the user message's first part), ready for the answer to follow."""
    conversation = to_chat_inputs(request.messages).conversation
    user = conversation[-1]["content"]
    user[1:1] = [PLACEHOLDER] * segments
    return processor.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)


class FeatureMemory(StreamingSystem):
    """Feature memory: the vision encoder's pooled features per session, merged as its budget fills."""

    name = "Feature Memory (Flash-VStream-like, reference)"
    declaration = Declaration("specialised", streaming=True, persistent=True, tag="reference system",
                              representation="visual_features")

    def __init__(self, chunk_frames: int = 4, pool: int = 2, budget: int = 16, store_dtype: str = "float16",
                 name: str | None = None):
        super().__init__(name)
        self.chunk_frames, self.pool, self.budget, self.store_dtype = chunk_frames, pool, budget, store_dtype

    async def begin(self, context: SessionContext) -> None:
        self.context = context
        self.engine = transformers_backbone(self.name, context.backbone)
        await self.engine.with_model(check_architecture)
        self.earlier, self.turns = read_earlier(context, ".features.json", load_entries)
        self.entries: list[Entry] = []
        self.pending: list[Frame] = []

    async def _encode(self, frames: list[Frame]) -> list[Entry]:
        """The frames' entries: one per temporal patch of the model's grid (the frames it covers)."""
        grids = pool_grids(await self.engine.with_model(visual_grids, frames), self.pool)
        per = -(-len(frames) // len(grids))
        runs = [frames[i * per: (i + 1) * per] for i in range(len(grids))]
        return [Entry(self.context.session, ((run[0].offset, run[0].wall_clock), (run[-1].offset, run[-1].wall_clock)),
                      len(run), in_store_dtype(grid, self.store_dtype), 1) for run, grid in zip(runs, grids)]

    async def observe_frame(self, frame: Frame) -> None:
        self.pending.append(frame)
        if len(self.pending) == self.chunk_frames:
            await self._keep_pending()

    async def _keep_pending(self) -> None:
        """Encode the frames not yet in a chunk into the session's memory and merge it to its budget."""
        self.entries = merge_to_budget([*self.entries, *await self._encode(self.pending)], self.budget,
                                       self.store_dtype)
        self.pending = []

    async def observe_turn(self, turn: Turn) -> None:
        self.turns.hear(turn)

    async def answer(self, probe: Probe) -> Answer:
        visible = set(probe.instance.visible_sessions)
        shown = [e for e in self.earlier if e.session.key in visible] + self.entries
        shown += await self._encode(self.pending) if self.pending else []  # for this answer only
        request = probe.request(turns=self.turns.shown(probe))  # the features stand for the frames
        if not shown:
            return Answer(Response(error="no frame of the session could be observed"), request)
        sessions = sorted({e.session.index: e.session for e in shown}.values(), key=lambda s: s.index)
        segments = [np.concatenate([e.features for e in shown if e.session is s], axis=1) for s in sessions]
        prompt = await self.engine.with_model(chat_with_segments, request, len(segments))
        response = await self.engine.with_model(answer_from, prompt, segments, request.settings.max_tokens)
        return Answer(response, request, tuple(f for e in shown for f in e.refs()))

    async def export(self, state_dir: Path) -> dict[str, Any]:
        if self.pending:
            await self._keep_pending()
        session = self.context.session
        features = np.concatenate([e.features for e in self.entries], axis=1) if self.entries else np.zeros((0, 0, 0))
        buffer = io.BytesIO()
        np.savez(buffer, features=features.astype(self.store_dtype))
        write_atomically(session_path(state_dir, session, ".features.npz"), buffer.getvalue())
        index = {"entries": [{"span": e.span, "frames": e.frames, "weight": e.weight, "tokens": e.features.shape[1]}
                             for e in self.entries], "turns": self.turns.to_json()}
        write_atomically(session_path(state_dir, session, ".features.json"), json.dumps(index).encode())
        return {"entries": len(self.entries), "tokens": features.shape[1],
                "frames": sum(e.frames for e in self.entries)}


def load_entries(session: Session, index: dict[str, Any], path: Path) -> list[Entry]:
    """An earlier session's entries from its state files (``path``: its JSON index, beside the features)."""
    with np.load(path.with_suffix(".npz")) as arrays:
        features = arrays["features"].astype(np.float32)
    bounds = np.cumsum([0, *(e["tokens"] for e in index["entries"])])
    return [Entry(session, tuple((float(o), int(s)) for o, s in e["span"]), e["frames"],  # type: ignore[arg-type]
                  features[:, bounds[i]: bounds[i + 1]], e["weight"]) for i, e in enumerate(index["entries"])]
