"""An example backbone that lives outside the package: Hydra finds it through ``_target_``.

It "answers" MCQA by picking the option whose letter appears most often in the prompt text and
reports how many frames it was shown, which is all a runner needs to see the contract honoured.
"""

from __future__ import annotations

import json
import time

from apm.backbones import Backbone, Request, Response, TextPart


class LetterCountBackbone(Backbone):
    """Chooses the most frequent option letter in the prompt; a stand-in for a real model."""

    def __init__(self, name: str = "LetterCount", max_frames: int = 8, letters: str = "ABCD") -> None:
        self.name = name
        self.max_frames = max_frames
        self.letters = letters

    async def generate(self, request: Request) -> Response:
        began = time.perf_counter()
        text = " ".join(p.text for m in request.messages for p in m.parts if isinstance(p, TextPart))
        best = max(self.letters, key=text.count)
        took = time.perf_counter() - began
        return Response(
            text=json.dumps({"answer": best}),
            ttft_s=took,
            total_s=took,
            elapsed_s=took,
            prompt_tokens=len(text.split()) + len(request.frames),
            completion_tokens=1,
            finish_reason="stop",
        )
