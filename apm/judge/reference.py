"""A judge that needs no model, for demos and smoke tests: every gate-passing probe scores 5.

With it the Gated LLM-Judge score reduces to 100 × the (candidate-balanced) gate pass rate: a
deterministic reference that runs anywhere. It is named as such wherever its scores appear.
"""

from __future__ import annotations

import json
import time

from apm.backbones.base import Backbone, Request, Response
from apm.judge.rubric import CRITERIA
from apm.records.declaration import Declaration

_REPLY = json.dumps({
    "score": 5,
    "criterion_checks": {name: "pass" for name in CRITERIA},
    "critical_issues": [],
    "justification": "Gate-only reference judge: the deterministic gate passed; quality is not assessed.",
})


class GateOnlyJudge(Backbone):
    """Replies with the rubric's JSON, score 5, to every request."""

    declaration = Declaration("reference", tag="gate-only reference judge")

    def __init__(self, name: str = "Gate-only reference judge (no LLM)", max_frames: int | None = 0):
        self.name = name
        self.max_frames = max_frames

    async def generate(self, request: Request) -> Response:
        began = time.perf_counter()
        took = time.perf_counter() - began
        return Response(text=_REPLY, ttft_s=took, total_s=took, elapsed_s=took, finish_reason="stop")
