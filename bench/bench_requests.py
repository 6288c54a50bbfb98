"""What a many-frame request costs the harness, and whether its recorded time to first token is the server's.

Against the loopback fake server in a subprocess (``apm.testing.fake_server``, which logs its own time
to first token: from a request's head arriving to its first content event), three clients send the
same chat bodies:

- **bare**: httpx alone, posting body bytes built once before the run (transport and server only);
- **apm warm**: ``OpenAIBackbone.generate`` on requests whose frames it has encoded before (the
  probes of a trajectory showing frames again: each frame's base64 comes from the backbone's cache);
- **apm cold**: the same, every frame new to the backbone (each request encodes all its frames).

Frames are random bytes of ``--frame-bytes`` (≈ 19 MiB of base64 per 1,024 frames, as issue 24
measured; the client never decodes them). Reported per client: requests/s (and its ratio to bare),
harness CPU ms per request (this process's ``time.process_time()``, its threads included, the
server's excluded), the most requests in flight at the server, the median ``encode_s``, and the
median recorded ``engine_ttft_s`` over the median of the server's own latencies. Usage::

    python bench/bench_requests.py [--write-docs]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import httpx
from bench_backbone_throughput import machine, start_server, write_docs

from apm.backbones import FramePart, Message, Request, TextPart
from apm.backbones.openai_api import OpenAIBackbone
from apm.data import clock
from apm.data.frames import Frame

SECTION = "## Request bodies (cheap requests, honest timers)"
T0 = clock.absolute("DAY1", "10:00:00")
TEXT = "Based only on the information available up to the current moment, answer ... " * 8


@dataclass(frozen=True)
class Row:
    client: str
    frames: int
    concurrency: int
    latency_s: float
    requests: int
    wall_s: float
    cpu_s: float
    max_inflight: int
    encode_s: float | None
    ttft_s: float
    server_ttft_s: float
    vs_bare: float = 1.0
    """Median over repeats of this client's requests/s ÷ bare's in the same repeat."""
    ttft_vs_bare: float = 1.0
    """Median over repeats of this client's median time to first token ÷ bare's median time to first content
    (httpx alone, measured the same way on the same bodies) in the same repeat: the server's own clock
    leaves out the upload and the client's side, which a user waits for too."""

    @property
    def rps(self) -> float:
        return self.requests / self.wall_s

    @property
    def cpu_ms(self) -> float:
        return 1000 * self.cpu_s / self.requests


def frames(n: int, size: int, video: str) -> tuple[FramePart, ...]:
    """``n`` frames of one cached video (``video``: its entry), JPEG-sized random bytes each."""
    rng = random.Random(video)
    return tuple(FramePart(Frame("DAY1/S001", float(i), T0 + i, rng.randbytes(size), video)) for i in range(n))


def request(parts: tuple[FramePart, ...], key: str) -> Request:
    system = Message.text("system", "You are a streaming assistant.")
    return Request((system, Message("user", (*parts, TextPart(TEXT)))), request_id=key, trajectory_id="T-1")


def renamed(req: Request, video: str) -> Request:
    """``req`` with the same bytes, its frames from another video (new to the backbone's base64 cache)."""
    [system, user] = req.messages
    parts = tuple(FramePart(Frame(p.frame.session, p.frame.offset, p.frame.wall_clock, p.frame.jpeg, video))
                  if isinstance(p, FramePart) else p for p in user.parts)
    return Request((system, Message("user", parts)), request_id=video, trajectory_id=req.trajectory_id)


async def server_stats(base_url: str) -> dict:
    """The server's latencies and most requests in flight since the last call (then reset)."""
    async with httpx.AsyncClient() as c:
        return (await c.get(base_url.removesuffix("/v1") + "/fake/stats")).json()


async def bare_post(client: httpx.AsyncClient, url: str, body: bytes) -> float:
    """One streamed completion by httpx alone; its time to first content line."""
    sent, ttft = time.perf_counter(), None
    async with client.stream("POST", url, content=body, headers={"Content-Type": "application/json"}) as r:
        async for line in r.aiter_lines():
            if ttft is None and '"content"' in line:
                ttft = time.perf_counter() - sent
    assert ttft is not None
    return ttft


async def bare(base_url: str, bodies: Sequence[bytes], concurrency: int) -> tuple[float, float, list[float]]:
    """A post of each of ``bodies`` at ``concurrency`` (after a warm-up round of the first): wall s, CPU s,
    times to first token."""
    url, gate = f"{base_url}/chat/completions", asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        async def one(body: bytes) -> float:
            async with gate:
                return await bare_post(client, url, body)

        await asyncio.gather(*(one(bodies[0]) for _ in range(concurrency)))  # warm connections
        await server_stats(base_url)
        cpu0, t0 = time.process_time(), time.perf_counter()
        ttfts = await asyncio.gather(*(one(body) for body in bodies))
        return time.perf_counter() - t0, time.process_time() - cpu0, list(ttfts)


async def measure(base_url: str, client: str, req: Request, concurrency: int, n: int, latency: float) -> Row:
    """One client's run of ``n`` requests like ``req`` at ``concurrency``."""
    encode: float | None = None
    if client == "bare":
        body = bytes(OpenAIBackbone(model="fake", base_url=base_url).wire(req))
        wall, cpu, ttfts = await bare(base_url, [body] * n, concurrency)
    else:
        async with OpenAIBackbone(model="fake", base_url=base_url, concurrency=concurrency, read_timeout_s=120) as b:
            await asyncio.gather(*(b.generate(req) for _ in range(concurrency)))  # warm connections and cache
            batch = [req if client == "apm warm" else renamed(req, f"cold-{i}") for i in range(n)]
            await server_stats(base_url)
            cpu0, t0 = time.process_time(), time.perf_counter()
            out = await asyncio.gather(*(b.generate(r) for r in batch))
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        assert all(r.ok and r.ttft_s is not None for r in out), [r.error for r in out if not r.ok][:3]
        ttfts = [r.ttft_s for r in out if r.ttft_s is not None]
        encode = statistics.median(r.encode_s for r in out if r.encode_s is not None)
    stats = await server_stats(base_url)
    return Row(client, len(req.frames), concurrency, latency, n, wall, cpu, stats["max_inflight"], encode,
               statistics.median(ttfts), statistics.median(stats["latencies"]))


CLIENTS = ("bare", "apm warm", "apm cold")


def compared(base_url: str, req: Request, concurrency: int, n: int, latency: float, repeats: int) -> list[Row]:
    """Each client's median run (by requests/s) of ``repeats``, the clients taking turns within each repeat so
    the machine's changing load falls on all of them; ``vs_bare`` pairs each run with bare's of its repeat."""
    runs = [[asyncio.run(measure(base_url, c, req, concurrency, n, latency)) for c in CLIENTS] for _ in range(repeats)]
    rows = []
    for i, _ in enumerate(CLIENTS):
        mine = sorted((rep[i] for rep in runs), key=lambda r: r.rps)
        ratio = statistics.median(rep[i].rps / rep[0].rps for rep in runs)
        ttft = statistics.median(rep[i].ttft_s / rep[0].ttft_s for rep in runs)
        rows.append(replace(mine[len(mine) // 2], vs_bare=ratio, ttft_vs_bare=ttft))
    return rows


def report(rows: list[Row], command: str, frame_bytes: int) -> str:
    lines = [
        SECTION, "",
        "What one many-frame request costs the harness and whether its recorded time to first token is the "
        "server's (`bench/bench_requests.py`; issue 24, item 2). The backbone builds each body once, in its one "
        "encoder thread, before the request's timer starts: orjson bytes with each frame's base64 spliced in as a "
        "pre-serialised fragment, the base64 taken from a bounded per-backbone cache keyed by frame identity "
        "([backbones.md](backbones.md#request-bodies)). Against the loopback fake server in a subprocess, "
        "which logs its own time to first token (request head arriving → first content event written, "
        "upload and parsing included). Clients: **bare** = httpx alone posting body bytes built once before the "
        "run; **apm warm** = `OpenAIBackbone.generate` on frames it has encoded before (a trajectory's probes "
        "showing frames again); **apm cold** = every frame new to it. Frames are random bytes of "
        f"{frame_bytes:,} B (≈ 19 MiB of base64 per 1,024 frames). CPU: this process's `time.process_time()` "
        "(threads included, server excluded) per request. TTFT ratio: median recorded `engine_ttft_s` ÷ median "
        "of the server's own latencies; TTFT ÷ bare's first content: the client's median recorded TTFT ÷ bare "
        "httpx's median time from sending to the first content line, same bodies, same repeat (the fair "
        "comparison: the server's clock starts after the upload). "
        "Targets: CPU ≤ 60 ms for a 1,024-frame request; ≥ 0.9 of bare's "
        "requests/s at 975 frames; TTFT ratio ≤ 1.05 at C = 1 and C = 16. The clients take turns within each of "
        "`--repeats` repeats; each row is a client's median run by requests/s, and ÷ bare the median of its "
        "requests/s over bare's in the same repeat.",
        "", f"Command: `{command}`", "", f"Machine: {machine()}", "",
        "| client | frames | C | L (s) | requests | requests/s | ÷ bare | harness CPU ms / request | max in flight "
        "| median encode_s (ms) | median TTFT recorded / server (s) | TTFT ratio | TTFT ÷ bare's first content |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        encode = f"{1000 * r.encode_s:.1f}" if r.encode_s is not None else "–"
        lines.append(f"| {r.client} | {r.frames} | {r.concurrency} | {r.latency_s:g} | {r.requests} | {r.rps:.2f} | "
                     f"{r.vs_bare:.2f} | {r.cpu_ms:.1f} | {r.max_inflight} | {encode} | "
                     f"{r.ttft_s:.3f} / {r.server_ttft_s:.3f} | {r.ttft_s / r.server_ttft_s:.3f} | "
                     f"{r.ttft_vs_bare:.3f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--latency", type=float, default=0.5, help="the server's fixed latency before its first token")
    p.add_argument("--frame-bytes", type=int, default=14_800)
    p.add_argument("--cpu-frames", type=int, default=1024, help="frames per request of the CPU rows (L = 0, C = 1)")
    p.add_argument("--frames", type=int, default=975, help="frames per request of the throughput and TTFT rows")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    p.add_argument("--rounds", type=int, default=4, help="requests per run = rounds × C (at least 8)")
    p.add_argument("--repeats", type=int, default=3, help="repeats per setting, the clients taking turns in each")
    p.add_argument("--write-docs", action="store_true", help="write the figures into docs/performance.md")
    args = p.parse_args()
    rows: list[Row] = []
    proc, base_url = start_server(0.0)
    try:
        cpu_req = request(frames(args.cpu_frames, args.frame_bytes, "cpu"), "cpu")
        rows += compared(base_url, cpu_req, 1, 8, 0.0, args.repeats)
    finally:
        proc.terminate()
        proc.wait()
    proc, base_url = start_server(args.latency)
    try:
        req = request(frames(args.frames, args.frame_bytes, "rate"), "rate")
        for conc in args.concurrency:
            rows += compared(base_url, req, conc, max(8, args.rounds * conc), args.latency, args.repeats)
    finally:
        proc.terminate()
        proc.wait()
    section = report(rows, "python " + " ".join(sys.argv), args.frame_bytes)
    print(section)
    print(json.dumps([r.__dict__ for r in rows]), file=sys.stderr)
    if args.write_docs:
        write_docs(section, SECTION)


if __name__ == "__main__":
    main()
