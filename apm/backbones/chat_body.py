"""A request as an OpenAI-compatible chat-completions body: the encoding every served engine shares.

The request's text parts are sent as they are, nothing added. ``frame_mode="images"`` sends each
frame as an ``image_url`` JPEG data URL; ``"video"`` (vLLM) sends each run of frames as one
``video_url`` ``data:video/jpeg;base64,f1,f2,…`` and its true timing as the request's
``media_io_kwargs``; stills go as images in both. ``media_uuids`` gives each media item its ``uuid``
(vLLM keys its caches by it).

:meth:`ChatBody.wire` is the body as sent: a :class:`~apm.backbones.transport.Body` of pieces, orjson's
JSON bytes with each data URL spliced in as its frames' base64 bytes objects (never joined into one
body), byte for byte what ``json.dumps(body(...), ensure_ascii=False, separators=(",", ":"))`` gives.
Each frame's base64 (pybase64, SIMD: the same bytes as the standard library's, ~7x faster) is computed
once and kept in a bounded :class:`EncodedFrames` cache, so the probes of a trajectory that show a
frame again reuse it (docs/backbones.md, "Request bodies").
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from pybase64 import b64encode

from apm.backbones.base import Message, Request, Stills, TextPart, VideoTiming, frame_uuid, video_timing, video_uuid
from apm.backbones.transport import Body
from apm.data.frames import Frame

log = logging.getLogger(__name__)

FrameMode = Literal["images", "video"]

ENCODED_FRAMES_BYTES = 512 * 2**20
"""The bound of a backbone's :class:`EncodedFrames` cache: JPEG plus base64 bytes held (512 MiB, ~9,000
frames of 24 KB: the frames of about eight 1,024-frame requests in flight)."""
IMAGE_URL, VIDEO_URL = b"data:image/jpeg;base64,", b"data:video/jpeg;base64,"

Url = str | orjson.Fragment
"""A data URL as a string (:meth:`ChatBody.body`) or a mark where :meth:`ChatBody.wire` splices it in."""
Render = Callable[[bytes, Sequence[bytes]], Url]
"""A data URL from its prefix and its frames' base64."""


def as_text(prefix: bytes, data: Sequence[bytes]) -> str:
    """A data URL as a Python string (a body to inspect)."""
    return (prefix + b",".join(data)).decode("ascii")


URL_MARK = b"\x00"
"""Where :meth:`ChatBody.wire` splices a data URL into orjson's bytes: a raw NUL, which orjson writes
nowhere else (inside a string it is escaped)."""
MARK = orjson.Fragment(URL_MARK)


class EncodedFrames:
    """Each frame's base64, computed once: keyed by the frame's identity (its frame-cache entry, content
    derived, and video offset; a frame read from no cache by its bytes object), a hit only when the JPEG
    bytes are the same; least recently used first out past ``max_bytes``. Safe to share between threads."""

    def __init__(self, max_bytes: int = ENCODED_FRAMES_BYTES) -> None:
        self.max_bytes = max_bytes
        self.held = 0
        """JPEG plus base64 bytes held."""
        self._entries: OrderedDict[Hashable, tuple[bytes, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, frames: Sequence[Frame]) -> list[bytes]:
        """The base64 of each of ``frames``' JPEGs: the lock taken once to look them all up and once to keep
        those encoded (a 1,024-frame request is one call, not 1,024)."""
        keys = [(f.entry, f.offset) if f.entry else ("", id(f.jpeg)) for f in frames]
        out: list[bytes] = []
        missing: list[int] = []
        with self._lock:
            for key, frame in zip(keys, frames, strict=True):
                found = self._entries.get(key)
                if found is not None and (found[0] is frame.jpeg or found[0] == frame.jpeg):
                    self._entries.move_to_end(key)
                    out.append(found[1])
                else:
                    missing.append(len(out))
                    out.append(b"")  # encoded below, outside the lock
        made = [(i, b64encode(frames[i].jpeg)) for i in missing]
        if made:
            with self._lock:
                for i, data in made:
                    self._keep(keys[i], frames[i].jpeg, data)
                    out[i] = data
        return out

    def _keep(self, key: Hashable, jpeg: bytes, data: bytes) -> None:
        """Hold ``jpeg``'s base64 under ``key``, dropping the least recently used past ``max_bytes`` (lock held)."""
        if (old := self._entries.pop(key, None)) is not None:
            self.held -= len(old[0]) + len(old[1])
        self._entries[key] = (jpeg, data)
        self.held += len(jpeg) + len(data)
        while self.held > self.max_bytes and len(self._entries) > 1:
            dropped_jpeg, dropped = self._entries.popitem(last=False)[1]
            self.held -= len(dropped_jpeg) + len(dropped)


@dataclass(frozen=True)
class ChatBody:
    """How requests are encoded for one endpoint: frames as images or videos, media ids, JSON output
    (``json_object``, or guided by a schema where the endpoint takes one) and extra body fields."""

    frame_mode: FrameMode = "images"
    media_uuids: bool = False
    json_response_format: bool = True
    json_schema_format: bool = False
    extra_body: dict[str, Any] = field(default_factory=dict)
    frames_base64: EncodedFrames = field(default_factory=EncodedFrames, compare=False, repr=False)
    """Each frame's base64, kept across requests (shared by the probes of a trajectory)."""

    def __post_init__(self) -> None:
        if self.frame_mode not in ("images", "video"):
            raise ValueError(f"frame_mode must be 'images' or 'video', not {self.frame_mode!r}")

    def body(self, model: str, request: Request, render: Render = as_text) -> dict[str, Any]:
        """The chat-completions JSON body asking ``model`` for ``request`` (frames already within the
        guard's limits), each data URL made by ``render``.

        In video mode the runs of frames go as videos with ``media_io_kwargs`` giving vLLM their
        timing and count (without ``num_frames`` vLLM keeps only a list's first 32 frames). vLLM
        (0.32) applies those to every video of a request, so runs whose timings differ go as images.
        """
        s = request.settings
        timing = self.video_timing(request)
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": m.role, "content": self._content(m, timing is not None, render)}
                         for m in request.messages],
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

    def wire(self, model: str, request: Request) -> Body:
        """:meth:`body` as the JSON bytes sent (what httpx's ``json=`` sent), built without scanning or copying
        the frames: orjson writes the body with a :data:`URL_MARK` for each data URL, and the pieces between
        the marks alternate with each URL's prefix and its frames' cached base64, the very bytes objects."""
        urls: list[tuple[bytes, Sequence[bytes]]] = []

        def mark(prefix: bytes, data: Sequence[bytes]) -> orjson.Fragment:
            urls.append((prefix, data))
            return MARK

        between = orjson.dumps(self.body(model, request, mark)).split(URL_MARK)
        pieces = [between[0]]
        for (prefix, data), after in zip(urls, between[1:], strict=True):
            pieces[-1] += b'"' + prefix
            for i, frame in enumerate(data):
                pieces += (b",", frame) if i else (frame,)
            pieces.append(b'"' + after)
        return Body(pieces)

    def video_timing(self, request: Request) -> VideoTiming | None:
        """In video mode, the one timing every run of frames of ``request`` has; None: send images."""
        if self.frame_mode != "video":
            return None
        timings = {video_timing(seg) for m in request.messages for seg in m.segments()
                   if isinstance(seg, tuple) and not isinstance(seg, Stills)}
        if len(timings) > 1:
            log.info("%s: runs of frames with different timings go as images", request.request_id)
        return timings.pop() if len(timings) == 1 else None

    def _content(self, m: Message, as_video: bool, render: Render) -> str | list[dict[str, Any]]:
        if m.role != "user":
            if m.frames:
                raise ValueError(f"frames are only allowed in user turns, not {m.role}")
            return "".join(p.text for p in m.parts if isinstance(p, TextPart))
        out: list[dict[str, Any]] = []
        for segment in m.segments():
            if isinstance(segment, TextPart):
                out.append(_text(segment.text))
            elif as_video and not isinstance(segment, Stills):
                url = render(VIDEO_URL, self.frames_base64(segment))
                video = {"type": "video_url", "video_url": {"url": url}}
                out.append(video | ({"uuid": video_uuid(segment)} if self.media_uuids else {}))
            else:
                out += [_image(render(IMAGE_URL, (data,))) | ({"uuid": frame_uuid(f)} if self.media_uuids else {})
                        for f, data in zip(segment, self.frames_base64(segment), strict=True)]
        return out


def media_items(body: dict[str, Any]) -> str:
    """How many video and image items a chat body carries, as a phrase."""
    parts = [p for m in body["messages"] if isinstance(m["content"], list) for p in m["content"]]
    videos = sum(p["type"] == "video_url" for p in parts)
    images = sum(p["type"] == "image_url" for p in parts)
    return f"{videos} video and {images} image items"


def _image(url: Url) -> dict[str, Any]:
    """One frame as an ``image_url`` part: its cached JPEG bytes, as they are, in a data URL."""
    return {"type": "image_url", "image_url": {"url": url}}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}
