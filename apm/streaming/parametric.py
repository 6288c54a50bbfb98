"""Parametric memory, in the spirit of Video-SALMONN-S: fast weights — a LoRA adapter on the language
model — trained at test time on the stream, and every answer generated through them.

The model is the run's backbone on the transformers path (``backbone=tiny_qwen2vl_hf``, or any
Qwen2-VL, Qwen2.5-VL or Qwen3-VL ``apm.backbones.hf.HFBackbone``); its base weights are shared and
never change: the adapter exists only inside this system's calls on the backbone's worker thread
(:func:`adapted`), which leave the model's modules, parameters, gradient flags and mode as they were.

Every ``chunk_frames`` frames, the chunk is run through the adapted model as one video segment and
the adapter takes ``steps`` SGD steps (``lr``) on a self-supervised loss: the last hidden state at
each of the chunk's visual tokens predicts the next visual token's input embedding (both
layer-normalised, mean squared error; the target detached) — the fast weights learn what the stream
looks like next. The adapter starts, for a trajectory's first session, from peft's initialisation
under ``seed`` (``lora_B`` zero: the base model's function) and then carries over from session to
session. A probe is answered through the adapted model from the run's request layout with the
session's latest ``recent_frames`` frames (those not yet trained on among them) and the instance's
earlier-session turns, decoded greedily; answering never trains.

State: the fast weights, one ``float32`` safetensors file of constant size
(``fast_weights/lora.safetensors``, under :data:`apm.streaming.base.FAST_WEIGHTS`: the memory line
reports it as ``fast_weight_bytes``, apart from per-video storage, as the paper's B.4 does), rewritten
at each session end; and per session ``<session>.parametric.json`` (the user's turns and each
chunk's training losses), counted in ``bytes``. Deterministic on a device: seeded, no sampling. As
the one fast-weights file is rewritten in place, a resume can put the folder back only to the newest
session's state (docs/records.md, "Resume checks the memory state"): a lost later line redoes the
trajectory from its start, a crash mid-session only that session.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from apm.backbones.hf import HFBackbone
from apm.data.frames import Frame
from apm.data.ids import session_path
from apm.data.instances import Turn
from apm.records.atomic import write_atomically, write_redacted
from apm.records.declaration import Declaration
from apm.streaming.base import FAST_WEIGHTS, Answer, Probe, SessionContext, StreamingSystem, TurnLog, earlier_states
from apm.streaming.internals import architecture, segment_inputs

FAST_WEIGHTS_FILE = f"{FAST_WEIGHTS}/lora.safetensors"
"""Where the fast weights lie in the trajectory's state folder (one file, rewritten at each session end)."""
TARGETS = r".*language_model.*\.(q_proj|v_proj)"
"""The adapted modules: the language model's query and value projections (never the vision tower)."""
Weights = dict[str, Any]
"""Fast weights: peft's adapter state dict, ``float32`` tensors on the CPU."""


@dataclass(frozen=True)
class Adapter:
    """The fast weights' shape and initialisation: LoRA ``rank`` and ``alpha``, peft's init under ``seed``."""

    rank: int
    alpha: int
    seed: int

    def config(self) -> Any:
        """peft's LoRA config of the adapter."""
        from peft import LoraConfig

        return LoraConfig(r=self.rank, lora_alpha=self.alpha, lora_dropout=0.0, target_modules=TARGETS)


@contextmanager
def adapted(model: Any, adapter: Adapter, weights: Weights | None) -> Iterator[Any]:
    """``model`` with the fast weights (peft's seeded initial ones if None) as a LoRA adapter, only adapter
    parameters trainable; afterwards the base model exactly as it was (modules, gradient flags, mode)."""
    import torch
    from peft import get_peft_model, set_peft_model_state_dict

    flags = {name: p.requires_grad for name, p in model.named_parameters()}
    training = model.training
    with torch.random.fork_rng(devices=[]):  # peft initialises on the CPU; the run's RNG is left alone
        torch.manual_seed(adapter.seed)
        peft_model = get_peft_model(model, adapter.config())
    try:
        if weights is not None:
            set_peft_model_state_dict(peft_model, weights)
        yield peft_model
    finally:
        peft_model.unload()
        for name, p in model.named_parameters():
            p.requires_grad_(flags[name])
        model.train(training)


def fast_weights_of(peft_model: Any) -> Weights:
    """The adapter's current weights, as ``float32`` CPU copies."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().float().cpu().clone() for k, v in get_peft_model_state_dict(peft_model).items()}


def known_architecture(processor: Any, model: Any) -> str:
    """The backbone's architecture, refused in one line unless ``apm.streaming.internals`` knows it."""
    return architecture(model).name


def initial_weights(processor: Any, model: Any, adapter: Adapter) -> Weights:
    """The fast weights a trajectory starts from: peft's initialisation under the adapter's seed."""
    with adapted(model, adapter, None) as peft_model:
        return fast_weights_of(peft_model)


def next_token_loss(peft_model: Any, inputs: Any, video_token: int) -> Any:
    """The self-supervised loss on one chunk: each visual token's last hidden state against the next one's
    input embedding (both layer-normalised, target detached), mean squared error."""
    import torch.nn.functional as F

    out = peft_model(**inputs, output_hidden_states=True)
    visual = inputs["input_ids"][0] == video_token
    predicted, embedded = out.hidden_states[-1][0][visual], out.hidden_states[0][0][visual].detach()
    width = predicted.shape[-1:]
    return F.mse_loss(F.layer_norm(predicted[:-1], width), F.layer_norm(embedded[1:], width))


def train_on_chunk(processor: Any, model: Any, adapter: Adapter, weights: Weights | None, frames: list[Frame],
                   steps: int, lr: float) -> tuple[Weights, list[float]]:
    """The fast weights after ``steps`` SGD steps of :func:`next_token_loss` on the chunk (from ``weights``, or
    the initial ones if None), and each step's loss (a chunk shorter than a temporal patch: ``segment_inputs``)."""
    import torch

    inputs = segment_inputs(processor, model, frames)
    losses = []
    with adapted(model, adapter, weights) as peft_model, torch.enable_grad():
        trainable = [p for p in peft_model.parameters() if p.requires_grad]
        optimiser = torch.optim.SGD(trainable, lr=lr)
        for _ in range(steps):
            loss = next_token_loss(peft_model, inputs, model.config.video_token_id)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            losses.append(float(loss.detach()))
        return fast_weights_of(peft_model), losses


class ParametricMemory(StreamingSystem):
    """Parametric memory: fast weights trained on the stream chunk by chunk, answers generated through them."""

    name = "Parametric Memory (Video-SALMONN-S-like, reference)"
    declaration = Declaration("specialised", streaming=True, persistent=True, tag="reference system",
                              representation="parametric")

    def __init__(self, chunk_frames: int = 4, steps: int = 2, lr: float = 0.05, rank: int = 4, alpha: int = 8,
                 recent_frames: int = 8, seed: int = 0, name: str | None = None):
        super().__init__(name)
        self.chunk_frames, self.steps, self.lr, self.recent_frames = chunk_frames, steps, lr, recent_frames
        self.adapter = Adapter(rank, alpha, seed)

    async def begin(self, context: SessionContext) -> None:
        if not isinstance(context.backbone, HFBackbone):
            raise TypeError(f"{self.name} trains fast weights on a transformers model: run it with an HFBackbone "
                            f"(backbone=tiny_qwen2vl_hf, …), not {type(context.backbone).__name__}")
        self.context, self.engine = context, context.backbone
        await self.engine.with_model(known_architecture)
        self.turns = TurnLog()
        for _, _, kept in earlier_states(context, ".parametric.json"):
            self.turns.read(kept)
        stored = context.state_dir / FAST_WEIGHTS_FILE
        self.weights = (load_weights(stored) if stored.exists()
                        else await self.engine.with_model(initial_weights, self.adapter))
        self.seen: list[Frame] = []
        self.pending: list[Frame] = []
        self.losses: list[list[float]] = []

    async def _train(self) -> None:
        """Train the fast weights on the pending chunk."""
        self.weights, losses = await self.engine.with_model(train_on_chunk, self.adapter, self.weights,
                                                            self.pending, self.steps, self.lr)
        self.losses.append(losses)
        self.pending = []

    async def observe_frame(self, frame: Frame) -> None:
        self.seen = [*self.seen, frame][-self.recent_frames:]
        self.pending.append(frame)
        if len(self.pending) == self.chunk_frames:
            await self._train()

    async def observe_turn(self, turn: Turn) -> None:
        self.turns.hear(turn)

    async def answer(self, probe: Probe) -> Answer:
        request = probe.request(frames=self.seen, turns=self.turns.shown(probe))
        response = await self.engine.generate_adapted(partial(adapted, adapter=self.adapter, weights=self.weights),
                                                      request)
        return Answer(response, request)

    async def export(self, state_dir: Path) -> dict[str, Any]:
        if self.pending:
            await self._train()
        from safetensors.torch import save

        write_atomically(state_dir / FAST_WEIGHTS_FILE, save(self.weights))
        kept = {"losses": self.losses, "turns": self.turns.to_json()}
        write_redacted(session_path(state_dir, self.context.session, ".parametric.json"), kept)
        return {"chunks": len(self.losses)}


def load_weights(path: Path) -> Weights:
    """Fast weights as :meth:`ParametricMemory.export` wrote them."""
    from safetensors.torch import load

    return load(path.read_bytes())
