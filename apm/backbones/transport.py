"""The HTTP side of an OpenAI-compatible endpoint: pooled clients, one streamed attempt, retries.

A :class:`Transport` sends a chat-completions body it is given (JSON bytes, or a :class:`Body` of
pieces never joined whole, encoded by the caller before the call, so no encoding runs on the event loop
or inside a timer) and reads the streamed
answer back; it knows nothing of requests, frames or engines. Failed attempts (429, 5xx, connection errors,
timeouts, malformed or dropped streams) are retried from scratch with exponential back-off plus
jitter; only the final attempt's text, timing and token counts are reported, and a call that still
fails comes back with ``Response.error`` set and its kind in ``Response.error_kind``. The API key is
read from the environment variable ``api_key_env`` names, at each request, and is never stored.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from bisect import bisect_right
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import httpx
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt
from tenacity.wait import wait_exponential, wait_random

from apm.backbones.base import Response

log = logging.getLogger(__name__)

CONNECTIONS_PER_CLIENT = 8
"""httpcore's pool does work quadratic in its connection count per request, so slots are spread over
several small clients: 8 keeps the harness near 1.5 ms CPU per request at concurrency 64."""
RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
"""HTTP statuses worth another attempt; any other non-200 status fails the request at once."""
JSON_BODY = {"Content-Type": "application/json"}
"""The header httpx's ``json=`` set, sent with the pre-encoded body."""
CHUNK_BYTES = 2**20
"""How many bytes of a :class:`Body`'s pieces are joined into one write (1 MiB): few enough writes that
each costs nothing against its bytes, a small enough copy that a body is never held twice."""
PREFLIGHT_CONNECT_ATTEMPTS = 3
"""Tries at reaching ``GET /models`` before a run (1 s, then 2 s apart): a server that is down is
reported within seconds instead of after every instance's retry budget."""


class Body:
    """A request body as the byte pieces it is made of (shared, never copied whole: a 1,024-frame body's
    frames are the base64 its backbone keeps), sent with its ``Content-Length`` in writes of about
    :data:`CHUNK_BYTES`; it can be sent again (a retry) and read whole (``bytes(body)``)."""

    __slots__ = ("pieces", "size")

    def __init__(self, pieces: Sequence[bytes]) -> None:
        self.pieces = tuple(pieces)
        self.size = sum(map(len, self.pieces))

    def __bytes__(self) -> bytes:
        return b"".join(self.pieces)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        """The body in writes: consecutive pieces joined up to :data:`CHUNK_BYTES` (a larger piece alone),
        the cuts found by bisection, not piece by piece (a 1,024-frame body has ~2,000 pieces)."""
        ends = list(accumulate(map(len, self.pieces)))
        start = 0
        while start < len(ends):
            stop = max(bisect_right(ends, (ends[start - 1] if start else 0) + CHUNK_BYTES), start + 1)
            yield b"".join(self.pieces[start:stop])
            start = stop


class Retryable(Exception):
    """A failed attempt worth repeating; ``retry_after`` is the server's hint in seconds."""

    def __init__(self, message: str, retry_after: float | None = None, kind: str = "server") -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.kind = kind


class Fatal(Exception):
    """A failure that another attempt would repeat (bad request, auth, unknown model, no server)."""

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


class Transport:
    """``concurrency`` streamed calls at a time to an endpoint, each retried within its deadline.

    Each call's ``deadline_s`` starts once its first attempt has a slot (queueing behind other calls
    does not count); each attempt has ``attempt_timeout_s``; ``max_attempts`` bounds the retries.
    """

    def __init__(self, *, name: str, api_key_env: str | None, concurrency: int, max_attempts: int,
                 backoff_initial_s: float, backoff_max_s: float, connect_timeout_s: float, read_timeout_s: float,
                 attempt_timeout_s: float, deadline_s: float) -> None:
        self.name = name
        self.api_key_env = api_key_env
        self.concurrency = concurrency
        self.max_attempts = max_attempts
        self.backoff_max_s = backoff_max_s
        self._backoff = wait_exponential(multiplier=backoff_initial_s, max=backoff_max_s) + wait_random(
            0, backoff_initial_s
        )
        self.timeout = httpx.Timeout(connect=connect_timeout_s, read=read_timeout_s, write=read_timeout_s, pool=None)
        self.attempt_timeout_s = attempt_timeout_s
        self.deadline_s = deadline_s
        self._clients: list[httpx.AsyncClient] = []
        self._slots: asyncio.Queue[httpx.AsyncClient] | None = None
        """One entry per concurrent call allowed, naming the client that call uses."""

    @property
    def started(self) -> bool:
        return self._slots is not None

    def start(self) -> None:
        """Open the connection pool; fails fast when the API key variable is unset."""
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

    def headers(self) -> dict[str, str]:
        """The key as a bearer token, read from the environment now (none when no variable is named)."""
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        return {"Authorization": f"Bearer {key}"} if key else {}

    async def complete(self, url: str, body: bytes | Body, route: dict[str, str], request_id: str) -> Response:
        """POST ``body`` (JSON) to ``url`` (``route``: extra headers), streamed and retried; failures come
        back in the Response (``elapsed_s``: from this call to its end)."""
        began = time.perf_counter()
        attempts, last_error, kind = 0, "", "timeout"
        try:
            async with asyncio.timeout(None) as deadline:  # armed once the first attempt has a slot
                async for attempt in self._retrying(request_id):
                    with attempt:
                        attempts += 1
                        try:
                            answer = await self._attempt(url, body, route, deadline if attempts == 1 else None)
                        except Retryable as e:
                            last_error = str(e)
                            raise
        except Retryable as e:
            error, kind = f"gave up after {attempts} attempts: {e}", e.kind
        except Fatal as e:
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
                model=answer.model,
            )
        return Response(error=error, error_kind=kind, elapsed_s=time.perf_counter() - began, attempts=attempts)

    async def listing(self, url: str) -> list[dict[str, Any]] | None:
        """The model entries ``GET url`` lists (``{"id": …}`` and whatever else the server says of each;
        None: the endpoint lists none); an unreachable endpoint (after :data:`PREFLIGHT_CONNECT_ATTEMPTS`
        tries) or a refused key raises :class:`Fatal`."""
        failure: Exception | None = None
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            for attempt in range(PREFLIGHT_CONNECT_ATTEMPTS):
                await asyncio.sleep(attempt)
                try:
                    r = await client.get(url, headers=self.headers())
                    break
                except httpx.TransportError as e:
                    failure = e
            else:
                raise Fatal(f"{type(failure).__name__}: {failure}", "connection")
        if r.status_code in (401, 403):
            raise Fatal(f"HTTP {r.status_code} from GET /models", "auth")
        try:
            entries = r.json()["data"] if r.status_code == 200 else None
        except (ValueError, KeyError, TypeError):
            return None
        listed = isinstance(entries, list) and all(isinstance(m, dict) and "id" in m for m in entries)
        return entries if listed else None

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
            retry=retry_if_exception_type(Retryable),
            before_sleep=before_sleep,
            reraise=True,
        )

    def _wait(self, state: RetryCallState) -> float:
        """Exponential back-off with jitter, lengthened to the server's Retry-After hint."""
        exc = state.outcome.exception() if state.outcome else None
        hint = exc.retry_after if isinstance(exc, Retryable) else None
        return min(max(self._backoff(state), hint or 0.0), self.backoff_max_s)

    async def _attempt(self, url: str, body: bytes | Body, route: dict[str, str],
                       arm: asyncio.Timeout | None) -> _Answer:
        """One HTTP attempt; transient failures raise :class:`Retryable`, the rest :class:`Fatal`.

        ``arm`` (first attempt only) is the call's deadline, started here so queueing for a slot
        behind other requests does not count against it.
        """
        assert self._slots is not None  # the backbone checks :attr:`started` before any call
        client = await self._slots.get()
        if arm is not None:
            arm.reschedule(asyncio.get_running_loop().time() + self.deadline_s)
        try:
            sent = time.perf_counter()
            async with asyncio.timeout(self.attempt_timeout_s):
                return await self._stream(client, url, body, route, sent)
        except TimeoutError:
            raise Retryable(f"attempt exceeded {self.attempt_timeout_s:g}s", kind="timeout") from None
        except httpx.TransportError as e:
            unreachable = isinstance(e, httpx.ConnectError | httpx.ConnectTimeout)
            raise Retryable(f"{type(e).__name__}: {e}", kind="connection" if unreachable else "stream") from None
        finally:
            self._slots.put_nowait(client)

    async def _stream(self, client: httpx.AsyncClient, url: str, body: bytes | Body, route: dict[str, str],
                      sent: float) -> _Answer:
        length = {"Content-Length": str(body.size)} if isinstance(body, Body) else {}
        headers = self.headers() | JSON_BODY | length | route
        async with client.stream("POST", url, content=body, headers=headers) as r:
            if r.status_code != 200:
                detail = (await r.aread())[:300].decode("utf-8", "replace")
                message = f"HTTP {r.status_code}: {detail}"
                if r.status_code in RETRY_STATUS:
                    raise Retryable(message, _retry_after(r.headers.get("retry-after")), status_kind(r.status_code))
                raise Fatal(message, status_kind(r.status_code))
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
                    raise Retryable(f"malformed stream chunk: {data[:80]!r}", kind="stream") from None
                if chunk.get("error"):
                    raise Retryable(f"error event in stream: {str(chunk['error'])[:200]}", kind="stream")
                usage = chunk.get("usage") or usage
                served = chunk.get("model") or served
                for choice in chunk.get("choices") or ():
                    piece = (choice.get("delta") or {}).get("content")
                    if piece:
                        ttft = ttft if ttft is not None else time.perf_counter() - sent
                        pieces.append(piece)
                    finish = choice.get("finish_reason") or finish
            if not done and finish is None:
                raise Retryable("stream ended before the answer finished", kind="stream")
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


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header given in seconds (HTTP dates are ignored)."""
    try:
        return float(value) if value else None
    except ValueError:
        return None
