"""Memory per request in flight (docs/backbones.md, "Request bodies"): a 1,024-frame request, while it is
sent and answered, holds no copy of its ~20 MB body — only its pieces (references to its frames' base64,
which the backbone's bounded cache keeps) and one write of at most ``CHUNK_BYTES`` at a time.

Measured with ``tracemalloc`` (every Python allocation, every thread) around N concurrent requests
against the fake server in a subprocess (its own allocations are not counted)."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator

import pytest

from apm.backbones.base import FramePart, Message, Request, TextPart
from apm.backbones.openai_api import OpenAIBackbone
from apm.backbones.transport import CHUNK_BYTES, Body
from apm.data import clock
from apm.data.frames import Frame

FRAMES, FRAME_BYTES, IN_FLIGHT = 1024, 14_800, 8
"""A paper-sized request (1,024 frames of JPEG-sized bytes: ~20 MB of base64), and how many are in flight."""
MIB = 2**20
HELD = 4 * MIB
"""The bound of docs/backbones.md: what a request in flight holds beyond its frames' base64."""
T0 = clock.absolute("DAY1", "10:00:00")


@pytest.fixture(scope="module")
def fake_api() -> Iterator[str]:
    """The fake server in a subprocess, answering after 0.5 s (so every request is in flight at once)."""
    proc = subprocess.Popen([sys.executable, "-m", "apm.testing.fake_server", "--port", "0", "--latency", "0.5"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    yield f"http://127.0.0.1:{proc.stdout.readline().split()[1]}/v1"
    proc.terminate()
    proc.wait(timeout=10)


def request(video: str) -> Request:
    """1,024 frames of one cached video (``video``: its entry key), random JPEG-sized bytes each, and a question."""
    rng = random.Random(video)
    parts = [FramePart(Frame("DAY1/S001", float(i), T0 + i, rng.randbytes(FRAME_BYTES), video)) for i in range(FRAMES)]
    return Request((Message("user", (*parts, TextPart("What is on the table?"))),), request_id=video)


def grown_per_request(url: str, requests: list[Request]) -> tuple[float, int]:
    """The most traced memory ``requests`` added at once, all sent together, per request (after a warm-up
    request of other frames that opens the connections), and the size of the first one's body."""
    async def main() -> tuple[float, int]:
        async with OpenAIBackbone(model="fake", base_url=url, concurrency=len(requests)) as backbone:
            assert (await backbone.generate(request("warm-up"))).ok
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                answers = await asyncio.gather(*(backbone.generate(r) for r in requests))
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            size = len(bytes(backbone.wire(requests[0])))
        assert all(a.ok for a in answers), [a.error for a in answers]
        return (peak - before) / len(requests), size

    return asyncio.run(main())


def test_requests_in_flight_that_show_the_same_frames_hold_no_copy_of_their_bodies(fake_api):
    """A trajectory's probes showing the same frames: the base64 is made once (one body's worth, for all),
    and each request in flight holds at most HELD more."""
    same = request("shared")
    grown, size = grown_per_request(fake_api, [same] * IN_FLIGHT)
    assert size > 19 * MIB
    assert grown <= HELD + size / IN_FLIGHT, f"{grown / MIB:.1f} MiB per request in flight"


def test_a_request_of_new_frames_holds_their_base64_and_no_more(fake_api):
    """Every frame new: each request's base64 (≈ its body, kept by the cache) and at most HELD more."""
    grown, size = grown_per_request(fake_api, [request(f"new-{i}") for i in range(IN_FLIGHT)])
    assert grown <= size + HELD, f"{grown / MIB:.1f} MiB per request in flight, body {size / MIB:.1f} MiB"


def test_a_body_is_written_in_chunks_of_whole_pieces_and_can_be_sent_again():
    """Consecutive pieces joined up to CHUNK_BYTES (a larger piece alone), the same bytes each time it is sent."""
    pieces = [b"a" * n for n in (10, CHUNK_BYTES - 5, 3, 2 * CHUNK_BYTES, 7, 1)]
    body = Body(pieces)

    async def writes() -> list[bytes]:
        return [w async for w in body]

    first = asyncio.run(writes())
    assert [len(w) for w in first] == [10, CHUNK_BYTES - 2, 2 * CHUNK_BYTES, 8]
    assert b"".join(first) == bytes(body) == b"".join(pieces) and body.size == len(bytes(body))
    assert asyncio.run(writes()) == first
