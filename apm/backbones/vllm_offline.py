"""In-process vLLM engine (``vllm.LLM``) with multi-modal inputs; vllm is imported only on start()."""

from __future__ import annotations

import time
from typing import Any

from apm.backbones.base import EndpointError, GenerationSettings, Request, Response
from apm.backbones.hf import ChatInputs, FramesAs, to_chat_inputs
from apm.backbones.worker_thread import WorkerThreadBackbone
from apm.records.declaration import Declaration


def multi_modal_uuids(chat: ChatInputs) -> dict[str, list[str]]:
    """vLLM's ``multi_modal_uuids``: each item's id (:func:`apm.backbones.base.video_uuid`,
    :func:`~apm.backbones.base.frame_uuid`), so its caches key a repeated item without hashing it."""
    return {k: v for k, v in (("video", chat.video_uuids), ("image", chat.image_uuids)) if v}


def multi_modal_data(chat: ChatInputs) -> dict[str, Any]:
    """vLLM's ``multi_modal_data``: each video with its true timing as ``(frames, metadata)`` (vLLM
    takes metadata per video here, unlike a server request), and the images."""
    data: dict[str, Any] = {}
    if chat.videos:
        data["video"] = list(zip(chat.videos, chat.video_metadata, strict=True))
    if chat.images:
        data["image"] = chat.images
    return data


class VLLMOfflineBackbone(WorkerThreadBackbone):
    """``vllm.LLM`` run on one worker thread, one request at a time.

    The prompt is rendered with the model's own chat template from the same chat turns as
    :class:`apm.backbones.hf.HFBackbone`, and the decoded frames go in as ``multi_modal_data``.
    ``engine`` holds ``vllm.LLM`` keyword arguments (dtype, max_model_len, limit_mm_per_prompt, …).
    ``ttft_s`` is the engine's own first-token latency; ``cached_tokens`` its prefix-cache hits.
    """

    declaration = Declaration("general")

    def __init__(
        self,
        model: str,
        *,
        name: str = "vllm_offline",
        frames_as: FramesAs = "video",
        max_frames: int | None = None,
        engine: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.model_path: str = model
        self.frames_as = frames_as
        self.max_frames = max_frames
        self.engine = dict(engine or {})
        self._llm: Any = None
        self._processor: Any = None

    @property
    def model_id(self) -> str:
        return self.model_path

    def _load(self) -> None:
        from transformers import AutoProcessor
        try:
            from vllm import LLM
        except ImportError as e:  # say what to install, not the import machinery's words
            raise EndpointError(f"{self.name}: vLLM is not installed in this environment ({e}); pip install vllm "
                                "(GPU nodes), or serve it from another environment with a vLLM server preset "
                                "and backbone.python") from None

        self._processor = AutoProcessor.from_pretrained(self.model_path)
        self._llm = LLM(model=self.model_path, disable_log_stats=False, **self.engine)

    def _unload(self) -> None:
        llm, self._llm, self._processor = self._llm, None, None
        if llm is not None:  # vllm.LLM has no public shutdown (0.32): stop its engine core directly
            llm.llm_engine.engine_core.shutdown()

    def engine_input(self, request: Request) -> dict[str, Any]:
        """The prompt ``vllm.LLM.generate`` takes: the chat rendered by the model's template, plus the
        frames (:func:`multi_modal_data`) and their ids (:func:`multi_modal_uuids`)."""
        chat = to_chat_inputs(request.messages, self.frames_as)
        prompt = self._processor.apply_chat_template(
            chat.conversation, tokenize=False, add_generation_prompt=True
        )
        return {"prompt": prompt, "multi_modal_data": multi_modal_data(chat),
                "multi_modal_uuids": multi_modal_uuids(chat)}

    def _generate(self, request: Request, started: float) -> Response:
        engine_input = self.engine_input(request)
        sent = time.perf_counter()
        (out,) = self._llm.generate(engine_input, self._sampling(request.settings), use_tqdm=False)
        done = time.perf_counter()
        completion = out.outputs[0]
        metrics = out.metrics
        return Response(
            text=completion.text,
            ttft_s=metrics.first_token_latency if metrics and metrics.first_token_latency else None,
            total_s=done - sent,
            elapsed_s=done - started,
            prompt_tokens=len(out.prompt_token_ids or ()),
            completion_tokens=len(completion.token_ids),
            cached_tokens=out.num_cached_tokens,
            finish_reason=completion.finish_reason,
        )

    @staticmethod
    def _sampling(settings: GenerationSettings) -> Any:
        from vllm import SamplingParams

        return SamplingParams(
            max_tokens=settings.max_tokens,
            temperature=settings.temperature,
            seed=settings.seed,
            stop=list(settings.stop) or None,
        )
