"""transformers backend: any local video VLM through AutoProcessor / AutoModelForImageTextToText."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import numpy as np

from apm.backbones.base import (
    GenerationSettings,
    Message,
    Request,
    Response,
    Stills,
    TextPart,
    frame_uuid,
    video_timing,
    video_uuid,
)
from apm.backbones.worker_thread import WorkerThreadBackbone
from apm.records.declaration import Declaration

FramesAs = Literal["video", "images"]
Weights = Literal["pretrained", "random"]
RANDOM_WEIGHTS_SEED = 0
"""``weights: random`` initialises from this seed, so two runs of one config hold the same weights."""
T = TypeVar("T")


@dataclass
class ChatInputs:
    """A request in the processor's terms: HF-style chat turns plus the pixels they refer to.

    ``video_metadata[i]`` is the true timing of ``videos[i]`` (:meth:`VideoTiming.metadata`); the
    ``*_uuids`` are each item's id for engine caches (:func:`video_uuid`, :func:`frame_uuid`)."""

    conversation: list[dict[str, Any]]
    videos: list[np.ndarray]
    video_metadata: list[dict[str, Any]]
    images: list[np.ndarray]
    video_uuids: list[str]
    image_uuids: list[str]


def to_chat_inputs(messages: tuple[Message, ...], frames_as: FramesAs = "video") -> ChatInputs:
    """Each text part as it is; each run of frames (:meth:`Message.segments`) as one timed video, or
    one image per frame (stills always)."""
    out = ChatInputs([], [], [], [], [], [])
    for message in messages:
        content: list[dict[str, Any]] = []
        for segment in message.segments():
            if isinstance(segment, TextPart):
                content.append({"type": "text", "text": segment.text})
            elif frames_as == "video" and not isinstance(segment, Stills):
                out.videos.append(np.stack([f.pixels() for f in segment]))
                out.video_metadata.append(video_timing(segment).metadata())
                out.video_uuids.append(video_uuid(segment))
                content.append({"type": "video"})
            else:
                out.images.extend(np.array(f.pixels()) for f in segment)  # writable copies, as torch wants
                out.image_uuids.extend(frame_uuid(f) for f in segment)
                content.extend({"type": "image"} for _ in segment)
        out.conversation.append({"role": message.role, "content": content})
    return out


class _FirstTokenClock:
    """A generate() streamer that only notes when the first new token arrives."""

    def __init__(self) -> None:
        self._prompt_seen = False
        self.first_token_at: float | None = None

    def put(self, value: Any) -> None:
        if not self._prompt_seen:  # generate() first pushes the prompt ids
            self._prompt_seen = True
        elif self.first_token_at is None:
            self.first_token_at = time.perf_counter()

    def end(self) -> None:
        """Nothing to flush."""


def _random_model(path: str, dtype: Any, device: str, trust_remote_code: bool) -> Any:
    """The model ``path``'s config describes, its weights drawn from :data:`RANDOM_WEIGHTS_SEED` directly
    on ``device`` in ``dtype`` (an 8B model never passes through host memory); nothing else is read."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText, GenerationConfig

    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    torch.manual_seed(RANDOM_WEIGHTS_SEED)
    with torch.device(device):
        model = AutoModelForImageTextToText.from_config(config, dtype=dtype, trust_remote_code=trust_remote_code)
    text = config.get_text_config()
    model.generation_config = GenerationConfig(eos_token_id=text.eos_token_id, pad_token_id=text.pad_token_id)
    return model


class HFBackbone(WorkerThreadBackbone):
    """A local transformers VLM, run on one worker thread so ``generate`` never blocks the loop.

    ``frames_as`` sends each run of frames as a video (default; with its true timing as
    ``video_metadata`` and ``do_sample_frames=False``: the frames are already the sampled ones) or as
    separate images; ``processor_kwargs`` go to every processor call. ``weights: random`` builds the
    model from the folder's config alone, randomly initialised on ``device`` (a benchmark's stand-in for
    weights too large to carry; docs/backbones.md). Greedy decoding when ``temperature`` is 0;
    ``json_output`` is not enforced here.
    """

    declaration = Declaration("general")

    def __init__(
        self,
        model: str,
        *,
        name: str = "hf",
        frames_as: FramesAs = "video",
        max_frames: int | None = None,
        dtype: str = "float32",
        device: str = "cpu",
        processor_kwargs: dict[str, Any] | None = None,
        trust_remote_code: bool = False,
        weights: Weights = "pretrained",
    ) -> None:
        if weights not in ("pretrained", "random"):
            raise ValueError(f"weights must be 'pretrained' or 'random', got {weights!r}")
        self.name = name
        self.model_path: str = model
        self.frames_as = frames_as
        self.max_frames = max_frames
        self.dtype = dtype
        self.device = device
        self.processor_kwargs = dict(processor_kwargs or {})
        self.trust_remote_code = trust_remote_code
        self.weights = weights
        self._model: Any = None
        self._processor: Any = None

    @property
    def model_id(self) -> str:
        return self.model_path

    async def model_identity(self, where: str = "backbone") -> dict[str, Any] | None:
        """The folder's content, and ``weights: random`` when its weights are drawn, not read."""
        found = await super().model_identity(where)
        return found if self.weights == "pretrained" else {**(found or {}), "weights": self.weights}

    def _load(self) -> None:
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self._processor = AutoProcessor.from_pretrained(
            self.model_path, trust_remote_code=self.trust_remote_code
        )
        dtype = self.dtype if self.dtype == "auto" else getattr(torch, self.dtype)
        if self.weights == "random":
            self._model = _random_model(self.model_path, dtype, self.device, self.trust_remote_code)
        else:
            self._model = AutoModelForImageTextToText.from_pretrained(
                self.model_path, dtype=dtype, trust_remote_code=self.trust_remote_code
            )
        self._model.to(self.device).eval()

    def _unload(self) -> None:
        self._model = self._processor = None

    async def with_model(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(processor, model, *args)`` on the worker thread, for a memory system that works on the
        model itself (``apm.streaming.kv_cache`` encodes the stream into its KV cache)."""
        await self.start()
        work = functools.partial(fn, self._processor, self._model, *args)
        return await asyncio.get_running_loop().run_in_executor(self._executor, work)

    async def generate_adapted(self, adapt: Callable[[Any], AbstractContextManager[object]],
                               request: Request) -> Response:
        """``generate(request)`` through the model as ``adapt(model)`` changes it for this one call, on the
        worker thread, so no other call ever sees the change (``apm.streaming.parametric``'s fast weights)."""
        await self.start()
        started = time.perf_counter()

        def adapted() -> Response:
            with adapt(self._model):
                return self._generate(request, started)

        return await asyncio.get_running_loop().run_in_executor(self._executor, adapted)

    def _inputs(self, request: Request) -> Any:
        chat = to_chat_inputs(request.messages, self.frames_as)
        prompt = self._processor.apply_chat_template(
            chat.conversation, tokenize=False, add_generation_prompt=True
        )
        timing = {"video_metadata": chat.video_metadata, "do_sample_frames": False} if chat.videos else {}
        return self._processor(
            text=[prompt],
            videos=chat.videos or None,
            images=chat.images or None,
            return_tensors="pt",
            **timing,
            **self.processor_kwargs,
        ).to(self.device)

    def _generate(self, request: Request, started: float) -> Response:
        import torch

        sent = time.perf_counter()
        inputs = self._inputs(request)
        clock = _FirstTokenClock()
        with torch.inference_mode():
            output = self._model.generate(
                **inputs, **self._decoding(request.settings), streamer=clock
            )
        done = time.perf_counter()
        prompt_len = inputs["input_ids"].shape[1]
        new_ids = output[0, prompt_len:].tolist()
        text, finish = self._finish(new_ids, request.settings)
        return Response(
            text=text,
            ttft_s=None if clock.first_token_at is None else clock.first_token_at - sent,
            total_s=done - sent,
            elapsed_s=done - started,
            prompt_tokens=prompt_len,
            completion_tokens=len(new_ids),
            finish_reason=finish,
        )

    def _decoding(self, settings: GenerationSettings) -> dict[str, Any]:
        import torch

        tokenizer = self._processor.tokenizer
        kwargs: dict[str, Any] = {
            "max_new_tokens": settings.max_tokens,
            "pad_token_id": tokenizer.pad_token_id,
        }
        if settings.temperature > 0:
            if settings.seed is not None:
                torch.manual_seed(settings.seed)
            kwargs.update(do_sample=True, temperature=settings.temperature)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if settings.stop:
            kwargs.update(stop_strings=list(settings.stop), tokenizer=tokenizer)
        return kwargs

    def _finish(self, new_ids: list[int], settings: GenerationSettings) -> tuple[str, str]:
        """Decoded text cut before any stop string, and the OpenAI-style finish reason."""
        text = self._processor.tokenizer.decode(new_ids, skip_special_tokens=True)
        cuts = [i for i in (text.find(s) for s in settings.stop) if i >= 0]
        if cuts:
            return text[: min(cuts)], "stop"
        eos = self._model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos])
        hit_eos = bool(new_ids) and new_ids[-1] in eos_ids
        return text, "stop" if hit_eos or len(new_ids) < settings.max_tokens else "length"
