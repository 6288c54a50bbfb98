"""Text a streaming system keeps in memory: what the run's writer backbone writes about frames as they
stream (event descriptions, thoughts), and the BM25 recall of such text for a probe."""

from __future__ import annotations

from collections.abc import Sequence

from apm.backbones.base import FramePart, GenerationSettings, Message, Part, Request, Response, TextPart
from apm.data.frames import Frame
from apm.data.instances import Instance
from apm.memory.text import bm25_scores, instance_query
from apm.streaming.base import SessionContext


async def write_about(context: SessionContext, instruction: str, frames: Sequence[Frame], cue: str,
                      max_tokens: int, what: str) -> Response:
    """The writer's text about ``frames`` (oldest first) after ``instruction``, ending on ``cue``; the request
    is named ``<trajectory>/<session>/<what>`` so each written piece has an id of its own."""
    parts: tuple[Part, ...] = (TextPart(instruction), *(FramePart(f) for f in frames), TextPart(cue))
    session = context.session
    request = Request(messages=(Message("user", parts),), settings=GenerationSettings(max_tokens=max_tokens),
                      request_id=f"{context.trajectory.trajectory_id}/{session.key}/{what}")
    return await context.writer.generate(request)


def best_matches(instance: Instance, texts: Sequence[str], top_k: int) -> list[int]:
    """Indices of the ``top_k`` texts that match the instance best (BM25 on its question, as
    ``retrieval_bm25``; only scores above 0, ties to the earlier text), in the texts' order."""
    scores = bm25_scores(instance_query(instance), list(texts)) if texts else []
    ranked = sorted(range(len(texts)), key=lambda i: (-scores[i], i))
    return sorted(i for i in ranked[:top_k] if scores[i] > 0)
