"""A loopback OpenAI-compatible chat server that streams canned answers or misbehaves on cue.

Used by the fault tests, the throughput benchmark and the server-lifecycle tests: each chat request
takes the next entry of ``faults`` (``ok`` once they run out) and the server counts what it saw, and
logs its own latency (``latencies``; ``GET /fake/stats`` from another process), the yardstick a
client's recorded time to first token is checked against.
Run standalone with ``python -m apm.testing.fake_server --port 0``; it prints ``PORT <n>``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import time
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

FAULTS = ("ok", "429", "500", "400", "malformed", "drop", "hang", "trickle")
"""``drop`` closes the connection mid-answer; ``hang`` never answers; ``trickle`` sends keep-alive
comments forever, so a read timeout never fires and only a deadline cuts it."""

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 429: "Too Many Requests",
            500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass
class FakeServer:
    """An asyncio HTTP/1.1 server on ``host``; ``start()`` binds it, ``port`` says where."""

    reply: str = '{"answer":"A"}'
    latency_s: float = 0.0
    """Delay before the first token."""
    chunks: int = 4
    faults: deque[str] = field(default_factory=deque)
    retry_after_s: float | None = None
    ready_after_s: float = 0.0
    """``/health`` answers 503 until this many seconds after start."""
    host: str = "127.0.0.1"
    port: int = 0
    keep_requests: bool = False
    """Keep each chat request's headers and body in ``requests`` (tests; off for benchmarks)."""
    models: tuple[str, ...] | None = None
    """Served model names, as vLLM's ``--served-model-name``: another name gets vLLM's 404 (None: any)."""
    model_info: dict[str, Any] = field(default_factory=dict)
    """More fields of each ``GET /models`` entry (vLLM's ``root``, a ``revision``): what names the model served."""
    api_key: str | None = None
    """The key every request must carry as ``Authorization: Bearer …`` (401 otherwise); None: no key."""
    max_videos: int | None = None
    """vLLM's ``limit_mm_per_prompt`` for videos: more ``video_url`` parts get vLLM's 400."""
    max_model_len: int | None = None
    """A prompt of more tokens (:func:`prompt_tokens`) plus ``max_tokens`` gets vLLM's 400."""
    cached_tokens: int | None = None
    """Reported as ``usage.prompt_tokens_details.cached_tokens`` (vLLM's ``--enable-prompt-tokens-details``)."""
    echo_headers: bool = False
    """Refuse every chat request with a 400 whose body quotes the request's ``Authorization`` header, as a
    careless server does (to prove the key never reaches a record or a log)."""
    counts: Counter[str] = field(default_factory=Counter)
    arrivals: list[float] = field(default_factory=list)
    requests: list[tuple[dict[str, str], dict]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    """Each chat request's body as it arrived, byte for byte (kept with ``requests``)."""
    latencies: list[float] = field(default_factory=list)
    """The server's own time to first token of each answered chat request, in answer order: seconds from
    its request head arriving (body upload and parsing included) to its first content event written."""
    inflight: int = 0
    max_inflight: int = 0
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task] = field(default_factory=set)
    _started: float = 0.0

    def plan(self, faults: Iterable[str]) -> None:
        """Queue the behaviour of the next chat requests."""
        for f in faults:
            if f not in FAULTS:
                raise ValueError(f"unknown fault {f!r}; choose from {FAULTS}")
            self.faults.append(f)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    async def start(self) -> FakeServer:
        self._server = await asyncio.start_server(self._connection, self.host, self.port, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]
        self._started = time.monotonic()
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> FakeServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while await self._one_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # client gone, or stop() cancelled the connection: nothing left to answer
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; False when the connection should close."""
        head = await reader.readuntil(b"\r\n\r\n")
        received = time.perf_counter()
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
        body = await reader.readexactly(int(headers.get("content-length", 0)))
        if method == "GET" and path == "/health":
            ready = time.monotonic() - self._started >= self.ready_after_s
            await _send(writer, 200 if ready else 503, b"")
        elif method == "GET" and path == "/fake/stats":
            await _send(writer, 200, json.dumps(self.take_stats()).encode())
        elif not self._authorised(headers):
            self.counts["401"] += 1
            await _send(writer, 401, _error("Unauthorized", 401))
        elif method == "GET" and path.endswith("/models"):
            served = [{"id": m, "object": "model", **self.model_info} for m in self.models or ("fake",)]
            await _send(writer, 200, json.dumps({"object": "list", "data": served}).encode())
        elif method == "POST" and path.endswith("/chat/completions"):
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
            try:
                return await self._chat(headers, body, writer, received)
            finally:
                self.inflight -= 1
        else:
            await _send(writer, 404, b"")
        return True

    def take_stats(self) -> dict[str, object]:
        """The latencies and the most chat requests in flight at once since the last call, then reset."""
        stats = {"latencies": self.latencies, "max_inflight": self.max_inflight}
        self.latencies, self.max_inflight = [], self.inflight
        return stats

    def _authorised(self, headers: dict[str, str]) -> bool:
        return self.api_key is None or headers.get("authorization") == f"Bearer {self.api_key}"

    def _refusal(self, body: dict) -> tuple[int, bytes] | None:
        """vLLM's answer to a request it would not serve: an unknown model, too many videos, too long."""
        if self.models is not None and body.get("model") not in self.models:
            return 404, _error(f"The model `{body.get('model')}` does not exist.", 404, "NotFoundError")
        videos = sum(p.get("type") == "video_url" for p in _parts(body))
        if self.max_videos is not None and videos > self.max_videos:
            return 400, _error(f"At most {self.max_videos} video(s) may be provided in one prompt.", 400)
        length = prompt_tokens(body)
        if self.max_model_len is not None and length + int(body.get("max_tokens") or 0) > self.max_model_len:
            return 400, _error(f"The decoder prompt (length {length}) is longer than the maximum model length of "
                               f"{self.max_model_len}. Make sure that `max_model_len` is no smaller than the number "
                               "of text tokens plus multimodal tokens.", 400)
        return None

    async def _chat(self, headers: dict[str, str], raw: bytes, writer: asyncio.StreamWriter, received: float) -> bool:
        self.counts["requests"] += 1
        self.arrivals.append(time.monotonic())
        body = orjson.loads(raw)  # a 1,024-frame body: a few ms, so the server is not what a benchmark measures
        if self.keep_requests:
            self.requests.append((headers, body))
            self.bodies.append(raw)
        refusal = self._refusal(body) or (
            (400, _error(f"bad request with Authorization: {headers.get('authorization')}", 400))
            if self.echo_headers else None)
        if refusal is not None:
            self.counts[str(refusal[0])] += 1
            await _send(writer, *refusal)
            return True
        fault = self.faults.popleft() if self.faults else "ok"
        self.counts[fault] += 1
        if fault in ("429", "500", "400"):
            extra = {"Retry-After": f"{self.retry_after_s:g}"} if fault == "429" and self.retry_after_s else {}
            await _send(writer, int(fault), json.dumps({"error": {"message": f"fake {fault}"}}).encode(), extra)
            return True
        if fault == "hang":
            await asyncio.sleep(3600)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        if fault == "trickle":
            while True:
                _chunk(writer, b": keep-alive\n\n")
                await writer.drain()
                await asyncio.sleep(0.05)
        await asyncio.sleep(self.latency_s)
        if fault == "malformed":
            _event(writer, '{"choices": [{"delta": {"content": "x"')
        pieces = _split(self.reply, self.chunks)
        served = {"model": f"{body.get('model')}-snapshot"}  # as an API names the dated model it served
        for i, piece in enumerate(pieces):
            delta = {"index": 0, "delta": {"content": piece}, "finish_reason": None}
            _event(writer, json.dumps({**served, "choices": [delta]}))
            if i == 0:
                self.latencies.append(time.perf_counter() - received)
            if fault == "drop" and i == len(pieces) // 2:
                await writer.drain()
                writer.transport.abort()
                return False
        usage: dict[str, int | dict[str, int]] = {
            "prompt_tokens": prompt_tokens(body), "completion_tokens": len(pieces),
        }
        if self.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        _event(writer, json.dumps({**served, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
        _event(writer, json.dumps({"choices": [], "usage": usage}))
        _event(writer, "[DONE]")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


TOKENS_PER_FRAME = 64
"""The fake engine's token count of one frame (an ``image_url``, or one JPEG of a ``video_url`` list)."""


def _parts(body: dict) -> list[dict]:
    """Every content part of every message (a plain-string content is one text part)."""
    out = []
    for m in body.get("messages") or ():
        content = m.get("content")
        out += [{"type": "text", "text": content}] if isinstance(content, str) else list(content or ())
    return out


def prompt_tokens(body: dict) -> int:
    """The fake engine's prompt length: 4 characters of text per token plus ``TOKENS_PER_FRAME`` per frame."""
    chars = sum(len(p.get("text", "")) for p in _parts(body) if p.get("type") == "text")
    frames = sum(1 for p in _parts(body) if p.get("type") == "image_url")
    frames += sum(p["video_url"]["url"].count(",") for p in _parts(body) if p.get("type") == "video_url")
    return chars // 4 + TOKENS_PER_FRAME * frames


def _error(message: str, code: int, kind: str = "BadRequestError") -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()


def _split(text: str, n: int) -> list[str]:
    step = max(1, -(-len(text) // max(n, 1)))
    return [text[i : i + step] for i in range(0, len(text), step)] or [""]


def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(b"%x\r\n%s\r\n" % (len(data), data))


def _event(writer: asyncio.StreamWriter, data: str) -> None:
    _chunk(writer, f"data: {data}\n\n".encode())


async def _send(writer: asyncio.StreamWriter, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    writer.write(
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n".encode() + body
    )
    await writer.drain()


async def _serve(args: argparse.Namespace) -> None:
    server = FakeServer(reply=args.reply, latency_s=args.latency, chunks=args.chunks,
                        ready_after_s=args.ready_after, host=args.host, port=args.port,
                        models=tuple(args.models.split(",")) if args.models else None,
                        api_key=os.environ.get(args.api_key_env) if args.api_key_env else None,
                        echo_headers=args.echo_headers)
    await server.start()
    print(f"PORT {server.port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, stop.set)
    if args.ignore_sigterm:  # stands in for a server that will not stop: only SIGKILL ends it
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop()


def main(argv: list[str] | None = None) -> None:
    """CLI entry; unknown arguments (e.g. vLLM's) are ignored so it can stand in for a server."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--latency", type=float, default=0.0)
    p.add_argument("--chunks", type=int, default=4)
    p.add_argument("--reply", default='{"answer":"A"}')
    p.add_argument("--ready-after", type=float, default=0.0)
    p.add_argument("--ignore-sigterm", action="store_true")
    p.add_argument("--models", default=None, help="comma-separated served model names (default: any name)")
    p.add_argument("--api-key-env", default=None, help="variable holding the key every request must carry")
    p.add_argument("--echo-headers", action="store_true", help="refuse every chat request, quoting its key")
    args, _ = p.parse_known_args(argv)
    asyncio.run(_serve(args))


if __name__ == "__main__":
    main()
