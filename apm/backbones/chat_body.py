"""A request as an OpenAI-compatible chat-completions body: the encoding every served engine shares.

The request's text parts are sent as they are, nothing added. ``frame_mode="images"`` sends each
frame as an ``image_url`` JPEG data URL; ``"video"`` (vLLM) sends each run of frames as one
``video_url`` ``data:video/jpeg;base64,f1,f2,…`` and its true timing as the request's
``media_io_kwargs``; stills go as images in both. ``media_uuids`` gives each media item its ``uuid``
(vLLM keys its caches by it).
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from apm.backbones.base import Message, Request, Stills, TextPart, VideoTiming, frame_uuid, video_timing, video_uuid
from apm.data.frames import Frame

log = logging.getLogger(__name__)

FrameMode = Literal["images", "video"]


@dataclass(frozen=True)
class ChatBody:
    """How requests are encoded for one endpoint: frames as images or videos, media ids, JSON output
    (``json_object``, or guided by a schema where the endpoint takes one) and extra body fields."""

    frame_mode: FrameMode = "images"
    media_uuids: bool = False
    json_response_format: bool = True
    json_schema_format: bool = False
    extra_body: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.frame_mode not in ("images", "video"):
            raise ValueError(f"frame_mode must be 'images' or 'video', not {self.frame_mode!r}")

    def body(self, model: str, request: Request) -> dict[str, Any]:
        """The chat-completions JSON body asking ``model`` for ``request`` (frames already within the
        guard's limits).

        In video mode the runs of frames go as videos with ``media_io_kwargs`` giving vLLM their
        timing and count (without ``num_frames`` vLLM keeps only a list's first 32 frames). vLLM
        (0.32) applies those to every video of a request, so runs whose timings differ go as images.
        """
        s = request.settings
        timing = self.video_timing(request)
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": m.role, "content": self._content(m, timing is not None)} for m in request.messages],
            "max_tokens": s.max_tokens,
            "temperature": s.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if s.seed is not None:
            body["seed"] = s.seed
        if s.stop:
            body["stop"] = list(s.stop)
        if s.json_schema is not None and self.json_schema_format:
            schema = {"name": "reply", "schema": s.json_schema, "strict": True}
            body["response_format"] = {"type": "json_schema", "json_schema": schema}
        elif s.json_output and self.json_response_format:
            body["response_format"] = {"type": "json_object"}
        if timing is not None:
            count = {"num_frames": len(timing.frames_indices)}
            body["media_io_kwargs"] = {"video": timing.metadata() | count}
        return body | self.extra_body

    def video_timing(self, request: Request) -> VideoTiming | None:
        """In video mode, the one timing every run of frames of ``request`` has; None: send images."""
        if self.frame_mode != "video":
            return None
        timings = {video_timing(seg) for m in request.messages for seg in m.segments()
                   if isinstance(seg, tuple) and not isinstance(seg, Stills)}
        if len(timings) > 1:
            log.info("%s: runs of frames with different timings go as images", request.request_id)
        return timings.pop() if len(timings) == 1 else None

    def _content(self, m: Message, as_video: bool) -> str | list[dict[str, Any]]:
        if m.role != "user":
            if m.frames:
                raise ValueError(f"frames are only allowed in user turns, not {m.role}")
            return "".join(p.text for p in m.parts if isinstance(p, TextPart))
        out: list[dict[str, Any]] = []
        for segment in m.segments():
            if isinstance(segment, TextPart):
                out.append(_text(segment.text))
            elif as_video and not isinstance(segment, Stills):
                data = ",".join(base64.b64encode(f.jpeg).decode("ascii") for f in segment)
                video = {"type": "video_url", "video_url": {"url": f"data:video/jpeg;base64,{data}"}}
                out.append(video | ({"uuid": video_uuid(segment)} if self.media_uuids else {}))
            else:
                out += [_image(f) | ({"uuid": frame_uuid(f)} if self.media_uuids else {}) for f in segment]
        return out


def media_items(body: dict[str, Any]) -> str:
    """How many video and image items a chat body carries, as a phrase."""
    parts = [p for m in body["messages"] if isinstance(m["content"], list) for p in m["content"]]
    videos = sum(p["type"] == "video_url" for p in parts)
    images = sum(p["type"] == "image_url" for p in parts)
    return f"{videos} video and {images} image items"


def _image(frame: Frame) -> dict[str, Any]:
    """One frame as an ``image_url`` part: its cached JPEG bytes, as they are."""
    url = f"data:image/jpeg;base64,{base64.b64encode(frame.jpeg).decode('ascii')}"
    return {"type": "image_url", "image_url": {"url": url}}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}
