"""Any OpenAI-compatible chat-completions endpoint (vLLM, Gemini, Seed, DeepSeek), streamed.

The API key is read from the environment variable ``api_key_env`` names, at each request, and is
never stored on the object, so it cannot leak into a repr, a log, a record or a saved config.
Failed attempts (429, 5xx, connection errors, timeouts, malformed or dropped streams) are retried
from scratch with exponential back-off plus jitter; only the final attempt's text, timing and token
counts are reported, and a request that still fails comes back with ``Response.error`` set and its
kind in ``Response.error_kind``. Before a run, :meth:`OpenAIBackbone.preflight` checks the endpoint,
the key and the model name, and :meth:`OpenAIBackbone.check_request` the run's largest request;
:meth:`OpenAIBackbone.advice` turns a failure into one line that names the setting to change.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import httpx
from omegaconf import DictConfig, ListConfig, OmegaConf
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt
from tenacity.wait import wait_exponential, wait_random

from apm.backbones.base import (
    Backbone,
    GenerationSettings,
    Message,
    Request,
    Response,
    Stills,
    TextPart,
    VideoTiming,
    frame_uuid,
    video_timing,
    video_uuid,
)
from apm.backbones.guard import ContextGuard, Policy, text_chars
from apm.data.frames import Frame
from apm.records.declaration import Declaration
from apm.records.redact import redact, url_userinfo

log = logging.getLogger(__name__)

FrameMode = Literal["images", "video"]
CONNECTIONS_PER_CLIENT = 8
"""httpcore's pool does work quadratic in its connection count per request, so slots are spread over
several small clients: 8 keeps the harness near 1.5 ms CPU per request at concurrency 64."""
RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
"""HTTP statuses worth another attempt; any other non-200 status fails the request at once."""
PREFLIGHT_CONNECT_ATTEMPTS = 3
"""Tries at reaching ``GET /models`` before a run (1 s, then 2 s apart): a server that is down is
reported within seconds instead of after every instance's retry budget."""


def url_credentials_problem(url: str, setting: str) -> str | None:
    """Why credentials in ``url`` (``setting`` names it) are refused, or None when it carries none: httpx
    would send them as Basic auth in place of the key, and the URL is saved and logged with the run."""
    if not url_userinfo(url):
        return None
    where = setting.removesuffix("base_url")
    return (f"{setting}: credentials in the URL ({redact(url)}) are refused (they would be sent as Basic auth "
            f"in place of the key); export the key and name its variable in {where}api_key_env")


class EndpointError(RuntimeError):
    """A preflight check failed; the message is one line saying what to change."""


class _Retryable(Exception):
    """A failed attempt worth repeating; ``retry_after`` is the server's hint in seconds."""

    def __init__(self, message: str, retry_after: float | None = None, kind: str = "server") -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.kind = kind


class _Fatal(Exception):
    """A failure that another attempt would repeat (bad request, auth, unknown model)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def status_kind(status: int) -> str:
    """The ``Response.error_kind`` of a failed HTTP status."""
    kinds = {401: "auth", 403: "auth", 404: "not_found", 400: "bad_request", 413: "bad_request", 422: "bad_request",
             429: "rate_limit"}
    return kinds.get(status, "server" if status >= 500 else "http")


@dataclass(frozen=True)
class _Answer:
    text: str
    ttft_s: float | None
    total_s: float
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    finish_reason: str | None
    model: str | None


def plain(value: Any) -> Any:
    """A Hydra/OmegaConf container as plain Python (JSON-serialisable) data; others unchanged."""
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig | ListConfig) else value


class OpenAIBackbone(Backbone):
    """Streams chat completions from ``base_url``; see docs/backbones.md for every option.

    The request's text parts are sent as they are, nothing added. ``frame_mode="images"`` sends each
    frame as an ``image_url`` JPEG data URL; ``"video"`` (vLLM) sends each run of frames as one
    ``video_url`` ``data:video/jpeg;base64,f1,f2,…`` and its true timing as the request's
    ``media_io_kwargs`` (:meth:`payload`); stills go as images in both. ``media_uuids`` gives each media
    item its ``uuid`` (vLLM keys its caches by it); ``data_parallel_size`` pins each trajectory to one of
    a data-parallel server's engines (``X-data-parallel-rank``), so its probes share one prefix cache.
    """

    declaration = Declaration("general")

    def __init__(
        self,
        *,
        model: str,
        base_url: str,
        name: str | None = None,
        api_key_env: str | None = None,
        frame_mode: FrameMode = "images",
        max_frames: int | None = None,
        max_context_tokens: int | None = None,
        tokens_per_frame: int = 256,
        truncation_policy: Policy = "uniform",
        concurrency: int = 16,
        max_attempts: int = 6,
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 60.0,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 120.0,
        attempt_timeout_s: float = 600.0,
        deadline_s: float = 1800.0,
        json_response_format: bool = True,
        json_schema_format: bool = False,
        media_uuids: bool = False,
        data_parallel_size: int = 1,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        if frame_mode not in ("images", "video"):
            raise ValueError(f"frame_mode must be 'images' or 'video', not {frame_mode!r}")
        if problem := url_credentials_problem(base_url, "base_url"):
            raise ValueError(problem)
        self.name = name or model
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.frame_mode = frame_mode
        self.max_frames = max_frames
        self.guard = ContextGuard(max_frames, max_context_tokens, tokens_per_frame, policy=truncation_policy)
        self.concurrency = concurrency
        self.max_attempts = max_attempts
        self.backoff_max_s = backoff_max_s
        self._backoff = wait_exponential(multiplier=backoff_initial_s, max=backoff_max_s) + wait_random(
            0, backoff_initial_s
        )
        self.timeout = httpx.Timeout(connect=connect_timeout_s, read=read_timeout_s, write=read_timeout_s, pool=None)
        self.attempt_timeout_s = attempt_timeout_s
        self.deadline_s = deadline_s
        self.json_response_format = json_response_format
        self.json_schema_format = json_schema_format
        self.media_uuids = media_uuids
        self.data_parallel_size = data_parallel_size
        self.extra_body = dict(plain(extra_body) or {})
        self.served: list[str] | None = None
        """What ``GET /models`` listed at the preflight (None: not asked, or the endpoint lists none)."""
        self._clients: list[httpx.AsyncClient] = []
        self._slots: asyncio.Queue[httpx.AsyncClient] | None = None
        """One entry per concurrent request allowed, naming the client that request uses."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r}, base_url={self.base_url!r})"

    async def start(self) -> None:
        """Open the HTTP connection pool; fails fast when the API key variable is unset."""
        if self.api_key_env and not os.environ.get(self.api_key_env):
            raise RuntimeError(f"{self.name}: environment variable {self.api_key_env} is not set")
        if self._slots is None:
            self._slots = asyncio.Queue()
            for first in range(0, self.concurrency, CONNECTIONS_PER_CLIENT):
                size = min(CONNECTIONS_PER_CLIENT, self.concurrency - first)
                limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
                client = httpx.AsyncClient(timeout=self.timeout, limits=limits)
                self._clients.append(client)
                for _ in range(size):
                    self._slots.put_nowait(client)

    async def close(self) -> None:
        clients, self._clients, self._slots = self._clients, [], None
        await asyncio.gather(*(c.aclose() for c in clients))

    async def generate(self, request: Request) -> Response:
        """One streamed completion, retried on transient failures; errors come back in the Response."""
        response = await self._complete(request)
        if not response.ok:
            log.warning("%s %s: %s", self.name, request.request_id, response.error)
        return response

    async def _complete(self, request: Request) -> Response:
        """:meth:`generate` without its warning (the preflight reports its failures in one line)."""
        if self._slots is None:
            raise RuntimeError(f"{self.name}: call start() (or use `async with`) before generate()")
        began = time.perf_counter()
        if self.guard.frame_budget(request) < 0:
            return Response(
                error=f"prompt exceeds max_context_tokens={self.guard.max_context_tokens} even without frames",
                error_kind="context", attempts=0,
            )
        request, truncation = self.guard.apply(request)
        payload, route = self.payload(request), self.route(request)
        attempts, last_error, kind = 0, "", "timeout"
        try:
            async with asyncio.timeout(None) as deadline:  # armed once the first attempt has a slot
                async for attempt in self._retrying(request.request_id):
                    with attempt:
                        attempts += 1
                        try:
                            answer = await self._attempt(payload, route, deadline if attempts == 1 else None)
                        except _Retryable as e:
                            last_error = str(e)
                            raise
        except _Retryable as e:
            error, kind = f"gave up after {attempts} attempts: {e}", e.kind
        except _Fatal as e:
            error, kind = str(e), e.kind
        except TimeoutError:
            error = f"deadline of {self.deadline_s:g}s exceeded after {attempts} attempts; last error: {last_error}"
        else:
            return Response(
                text=answer.text,
                ttft_s=answer.ttft_s,
                total_s=answer.total_s,
                elapsed_s=time.perf_counter() - began,
                prompt_tokens=answer.prompt_tokens,
                completion_tokens=answer.completion_tokens,
                cached_tokens=answer.cached_tokens,
                finish_reason=answer.finish_reason,
                attempts=attempts,
                truncation=truncation,
                model=answer.model,
            )
        return Response(error=error, error_kind=kind, elapsed_s=time.perf_counter() - began, attempts=attempts,
                        truncation=truncation)

    async def preflight(self, where: str = "backbone") -> None:
        """Before a run: the endpoint answers, takes the key and serves the model (``GET /models``, then a
        one-token text request); raises :class:`EndpointError` with the one line that says what to change."""
        self.served = await self._served_models(where)
        ping = Request((Message.text("user", "Reply with OK."),), GenerationSettings(max_tokens=1, seed=None),
                       request_id="preflight/ping")
        response = await self._complete(ping)
        if not response.ok:
            raise EndpointError(self.advice(response, where))

    async def check_request(self, request: Request, where: str = "backbone") -> None:
        """Send ``request`` (the run's largest) with ``max_tokens=1``; raises :class:`EndpointError` naming the
        engine limit it breaks (``limit_mm_per_prompt``, ``max_model_len``, ``max_num_batched_tokens``)."""
        one_token = replace(request, settings=replace(request.settings, max_tokens=1), request_id="preflight/largest")
        response = await self._complete(one_token)
        if not response.ok:
            raise EndpointError(self.advice(response, where, request))

    async def _served_models(self, where: str) -> list[str] | None:
        """The model names ``GET /models`` lists (None: the endpoint lists none); an unreachable endpoint
        or a refused key raises :class:`EndpointError`."""
        failure: Exception | None = None
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            for attempt in range(PREFLIGHT_CONNECT_ATTEMPTS):
                await asyncio.sleep(attempt)
                try:
                    r = await client.get(f"{self.base_url}/models", headers=self._headers())
                    break
                except httpx.TransportError as e:
                    failure = e
            else:
                gone = Response(error=f"{type(failure).__name__}: {failure}", error_kind="connection")
                raise EndpointError(self.advice(gone, where))
        if r.status_code in (401, 403):
            refused = Response(error=f"HTTP {r.status_code} from GET /models", error_kind="auth")
            raise EndpointError(self.advice(refused, where))
        try:
            return [m["id"] for m in r.json()["data"]] if r.status_code == 200 else None
        except (ValueError, KeyError, TypeError):
            return None

    def advice(self, response: Response, where: str = "backbone", request: Request | None = None) -> str:
        """One line: what failed at this endpoint and the setting to change (``where``: the config key
        holding this backbone); ``request`` is the largest request, when that is what failed."""
        head = f"{where} {self.name!r} at {self.base_url}: {_reason(response.error or '')}"
        kind = response.error_kind
        if kind == "auth":
            fix = (f"check the key in ${self.api_key_env}" if self.api_key_env
                   else f"set {where}.api_key_env to the variable that holds the key")
        elif kind == "not_found":
            listed = f" (it serves {', '.join(self.served[:8])})" if self.served else ""
            fix = f"{where}.{self.model_setting}={self.model!r} is not a model served there{listed}: set it"
        elif kind == "connection":
            fix = f"start the server, or set {where}.base_url"
        elif request is not None:
            fix = self._request_advice(response, request, where)
        else:
            return head
        return f"{head} — {fix}"

    @property
    def model_setting(self) -> str:
        """The config key whose value is the model name sent in requests."""
        return "model"

    def engine_setting(self, flag: str, where: str) -> str:
        """Where an engine limit is set: the server's own flag (this class does not start the server)."""
        return f"the server's --{flag.replace('_', '-')}"

    def _request_advice(self, response: Response, request: Request, where: str) -> str:
        """Which engine limit the run's largest request broke, from the engine's message."""
        error, frames = response.error or "", len(request.frames)
        size = f"the largest request ({frames} frames, {text_chars(request)} characters of text)"
        if response.error_kind == "context":
            return f"{size}: its text alone is over {where}.max_context_tokens: raise it and the engine's max_model_len"
        if "may be provided in one prompt" in error:
            items = _media_items(self.payload(request))
            return f"{size} sends {items}: raise {self.engine_setting('limit_mm_per_prompt', where)}"
        length = re.search(r"\(length (\d+)\)|at least (\d+) input tokens|requested (\d+) tokens", error)
        if length or "maximum context length" in error or "max_model_len" in error:
            tokens = next(int(g) for g in length.groups() if g) if length else None
            need = f" to at least {tokens + request.settings.max_tokens}" if tokens else ""
            return (f"{size} is longer than the engine's context: raise "
                    f"{self.engine_setting('max_model_len', where)}{need} (or raise {where}.tokens_per_frame, "
                    f"now {self.guard.tokens_per_frame}, so the context guard keeps fewer frames)")
        if "encoder cache" in error or "max_num_batched_tokens" in error:
            return f"{size} does not fit one engine step: raise {self.engine_setting('max_num_batched_tokens', where)}"
        if response.error_kind == "timeout":
            return (f"{size} got no answer in time: the engine may be unable to schedule it (raise "
                    f"{self.engine_setting('max_num_batched_tokens', where)}) or slower than {where}.attempt_timeout_s")
        return f"{size} was refused"

    def payload(self, request: Request) -> dict[str, Any]:
        """The chat-completions JSON body for a request (frames already within the guard's limits).

        In video mode the runs of frames go as videos with ``media_io_kwargs`` giving vLLM their
        timing and count (without ``num_frames`` vLLM keeps only a list's first 32 frames). vLLM
        (0.32) applies those to every video of a request, so runs whose timings differ go as images.
        """
        s = request.settings
        timing = self._video_timing(request)
        body: dict[str, Any] = {
            "model": self.model,
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

    def route(self, request: Request) -> dict[str, str]:
        """Headers that send ``request`` to its trajectory's engine of a data-parallel server (none for one
        engine, or for a request of no trajectory): every probe of a trajectory reaches one prefix cache."""
        if self.data_parallel_size <= 1 or request.trajectory_id is None:
            return {}
        return {"X-data-parallel-rank": str(engine_of(request.trajectory_id, self.data_parallel_size))}

    def _video_timing(self, request: Request) -> VideoTiming | None:
        """In video mode, the one timing every run of frames of ``request`` has; None: send images."""
        if self.frame_mode != "video":
            return None
        timings = {video_timing(seg) for m in request.messages for seg in m.segments()
                   if isinstance(seg, tuple) and not isinstance(seg, Stills)}
        if len(timings) > 1:
            log.info("%s %s: runs of frames with different timings go as images", self.name, request.request_id)
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

    def _retrying(self, request_id: str) -> AsyncRetrying:
        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            log.warning(
                "%s %s: attempt %d failed (%s); retrying in %.2fs",
                self.name, request_id, state.attempt_number, exc, state.upcoming_sleep,
            )

        return AsyncRetrying(
            stop=stop_after_attempt(self.max_attempts),
            wait=self._wait,
            retry=retry_if_exception_type(_Retryable),
            before_sleep=before_sleep,
            reraise=True,
        )

    def _wait(self, state: RetryCallState) -> float:
        """Exponential back-off with jitter, lengthened to the server's Retry-After hint."""
        exc = state.outcome.exception() if state.outcome else None
        hint = getattr(exc, "retry_after", None) or 0.0
        return min(max(self._backoff(state), hint), self.backoff_max_s)

    def _headers(self) -> dict[str, str]:
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        return {"Authorization": f"Bearer {key}"} if key else {}

    async def _attempt(self, payload: dict[str, Any], route: dict[str, str], arm: asyncio.Timeout | None) -> _Answer:
        """One HTTP attempt (``route``: its extra headers); transient failures raise :class:`_Retryable`,
        the rest :class:`_Fatal`.

        ``arm`` (first attempt only) is the call's deadline, started here so queueing for a slot
        behind other requests does not count against it.
        """
        assert self._slots is not None
        client = await self._slots.get()
        if arm is not None:
            arm.reschedule(asyncio.get_running_loop().time() + self.deadline_s)
        try:
            sent = time.perf_counter()
            async with asyncio.timeout(self.attempt_timeout_s):
                return await self._stream(client, payload, route, sent)
        except TimeoutError:
            raise _Retryable(f"attempt exceeded {self.attempt_timeout_s:g}s", kind="timeout") from None
        except httpx.TransportError as e:
            unreachable = isinstance(e, httpx.ConnectError | httpx.ConnectTimeout)
            raise _Retryable(f"{type(e).__name__}: {e}", kind="connection" if unreachable else "stream") from None
        finally:
            self._slots.put_nowait(client)

    async def _stream(self, client: httpx.AsyncClient, payload: dict[str, Any], route: dict[str, str],
                      sent: float) -> _Answer:
        url = f"{self.base_url}/chat/completions"
        async with client.stream("POST", url, json=payload, headers=self._headers() | route) as r:
            if r.status_code != 200:
                detail = (await r.aread())[:300].decode("utf-8", "replace")
                message = f"HTTP {r.status_code}: {detail}"
                if r.status_code in RETRY_STATUS:
                    raise _Retryable(message, _retry_after(r.headers.get("retry-after")), status_kind(r.status_code))
                raise _Fatal(message, status_kind(r.status_code))
            pieces: list[str] = []
            ttft = finish = usage = served = None
            done = False
            async for line in r.aiter_lines():  # read to the end, so the connection can be reused
                if done or not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    continue
                try:
                    chunk = json.loads(data)
                except ValueError:
                    raise _Retryable(f"malformed stream chunk: {data[:80]!r}", kind="stream") from None
                if chunk.get("error"):
                    raise _Retryable(f"error event in stream: {str(chunk['error'])[:200]}", kind="stream")
                usage = chunk.get("usage") or usage
                served = chunk.get("model") or served
                for choice in chunk.get("choices") or ():
                    piece = (choice.get("delta") or {}).get("content")
                    if piece:
                        ttft = ttft if ttft is not None else time.perf_counter() - sent
                        pieces.append(piece)
                    finish = choice.get("finish_reason") or finish
            if not done and finish is None:
                raise _Retryable("stream ended before the answer finished", kind="stream")
        return _Answer(
            text="".join(pieces),
            ttft_s=ttft,
            total_s=time.perf_counter() - sent,
            prompt_tokens=(usage or {}).get("prompt_tokens"),
            completion_tokens=(usage or {}).get("completion_tokens"),
            cached_tokens=((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens"),
            finish_reason=finish,
            model=served,
        )


def engine_of(trajectory_id: str, engines: int) -> int:
    """The engine (0 … ``engines`` − 1) a trajectory's requests go to: a stable hash of its id."""
    return int.from_bytes(hashlib.sha256(trajectory_id.encode()).digest()[:8], "big") % engines


def _image(frame: Frame) -> dict[str, Any]:
    """One frame as an ``image_url`` part: its cached JPEG bytes, as they are."""
    url = f"data:image/jpeg;base64,{base64.b64encode(frame.jpeg).decode('ascii')}"
    return {"type": "image_url", "image_url": {"url": url}}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _reason(error: str) -> str:
    """A failure as one short line: an HTTP error's JSON body reduced to its message (also when the body
    was cut short)."""
    status = re.match(r"(.*HTTP \d+): \{.*?\"message\"\s*:\s*\"((?:[^\"\\]|\\.)*)", error, re.S)
    if status:
        error = f"{status[1]}: {status[2]}".replace('\\"', '"').replace("\\'", "'")
    return " ".join(error.split())[:200]


def _media_items(body: dict[str, Any]) -> str:
    """How many video and image items a chat body carries, as a phrase."""
    parts = [p for m in body["messages"] if isinstance(m["content"], list) for p in m["content"]]
    videos = sum(p["type"] == "video_url" for p in parts)
    images = sum(p["type"] == "image_url" for p in parts)
    return f"{videos} video and {images} image items"


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header given in seconds (HTTP dates are ignored)."""
    try:
        return float(value) if value else None
    except ValueError:
        return None
