"""Reference baselines that need no model and anchor every table: random, always-*, oracle.

They answer from the instance — handed to them on their own channel (``ask``), never inside the
request a model sees — in exactly the Appendix E JSON formats. ``random`` is seeded
from a stable hash of the instance key, so its answer never depends on order, concurrency or
sharding. ``always_silent`` / ``always_intervene`` only make sense for Adaptive probes and return an
error Response for MCQA/EA. ``oracle`` copies the annotations: an upper-bound sanity check.
"""

from __future__ import annotations

import abc
import hashlib
import json
import random
import time
from typing import Any

from apm.backbones.base import Backbone, Request, Response
from apm.data.instances import Instance
from apm.data.tasks import ADAPTIVE, EA, EA_OPTIONS, MCQA_OPTIONS
from apm.records.declaration import Declaration

Answer = dict[str, Any]


def options(task: str) -> tuple[str, ...]:
    """The option letters a task's answer may take (A–E for EA, A–D otherwise)."""
    return EA_OPTIONS if task == EA else MCQA_OPTIONS


def stable_rng(key: str, seed: int = 0) -> random.Random:
    """A generator seeded only by ``(seed, key)``: the same draw in any process, order or shard."""
    digest = hashlib.sha256(f"{seed}\0{key}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def silent(reason: str) -> Answer:
    return {"decision": "SILENT", "reason": reason}


def intervene(task: str, reason: str, *, answer: str = "", proactive_response: str = "") -> Answer:
    """An INTERVENE object: ERA carries an option ``answer``, the other tasks a ``proactive_response``."""
    if task == "ERA":
        return {"decision": "INTERVENE", "answer": answer, "reason": reason}
    return {"decision": "INTERVENE", "proactive_response": proactive_response, "reason": reason}


class Baseline(Backbone):
    """A backbone that answers from the instance; subclasses say what, as an Appendix E object."""

    declaration = Declaration("baseline", tag="baseline")

    def __init__(self, name: str | None = None, max_frames: int | None = 0) -> None:
        self.name = name or type(self).__name__
        self.max_frames = max_frames

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    @abc.abstractmethod
    def answer(self, instance: Instance) -> Answer:
        """The answer object; raise ValueError when the baseline has none for this instance."""

    answers_from_annotations = True

    async def generate(self, request: Request) -> Response:
        """Without its instance a reference baseline has nothing to answer from."""
        return Response(error=f"{self.name} answers from the instance: call it through apm.backbones.base.ask")

    async def answer_instance(self, request: Request, instance: Instance) -> Response:
        began = time.perf_counter()
        try:
            text = json.dumps(self.answer(instance), ensure_ascii=False, separators=(",", ":"))
        except (ValueError, KeyError, IndexError, TypeError) as e:
            return Response(error=f"{self.name}: {type(e).__name__}: {e}")
        took = time.perf_counter() - began
        return Response(text=text, ttft_s=took, total_s=took, elapsed_s=took, finish_reason="stop")


class RandomBaseline(Baseline):
    """Uniform answers: an option for MCQA/EA; SILENT or INTERVENE with equal odds for Adaptive."""

    def __init__(self, name: str | None = "Random", seed: int = 0, max_frames: int | None = 0) -> None:
        super().__init__(name, max_frames)
        self.seed = seed

    def answer(self, instance: Instance) -> Answer:
        rng = stable_rng(instance.key, self.seed)
        letter = rng.choice(options(instance.task))
        if instance.task not in ADAPTIVE:
            return {"answer": letter}
        if rng.random() < 0.5:
            return silent("random baseline")
        return intervene(instance.task, "random baseline", answer=letter, proactive_response="random baseline")


class AlwaysSilent(Baseline):
    """SILENT at every Adaptive probe."""

    def __init__(self, name: str | None = "Always-Silent", max_frames: int | None = 0) -> None:
        super().__init__(name, max_frames)

    def answer(self, instance: Instance) -> Answer:
        _require_adaptive(instance, self.name)
        return silent("always_silent baseline")


class AlwaysIntervene(Baseline):
    """INTERVENE at every Adaptive probe; ERA's option is drawn as :class:`RandomBaseline` draws it."""

    def __init__(self, name: str | None = "Always-Intervene", seed: int = 0, max_frames: int | None = 0) -> None:
        super().__init__(name, max_frames)
        self.seed = seed

    def answer(self, instance: Instance) -> Answer:
        _require_adaptive(instance, self.name)
        letter = stable_rng(instance.key, self.seed).choice(MCQA_OPTIONS)
        return intervene(
            instance.task,
            "always_intervene baseline",
            answer=letter,
            proactive_response="I can help with what you are doing now.",
        )


class Oracle(Baseline):
    """The annotated answer, decision, reference response and reason: an upper bound, not a model."""

    declaration = Declaration("reference", tag="oracle upper bound")

    def __init__(self, name: str | None = "Oracle (annotation upper bound)", max_frames: int | None = 0) -> None:
        super().__init__(name, max_frames)

    def answer(self, instance: Instance) -> Answer:
        if instance.task not in ADAPTIVE:
            if instance.correct_option is None:
                raise ValueError(f"{instance.key}: no correct_option_id")
            return {"answer": instance.correct_option}
        f = instance.candidate.fields
        index = _probe_index(instance.probe_id)
        if instance.polarity == "negative":
            field = "negative_heartbeats" if instance.task in ("ERA", "RCR") else "negative_or_silence_windows"
            return silent(f[field][index]["silence_reason"])
        if instance.task == "ERA":
            return intervene("ERA", f["positive_heartbeat"]["response_reason"], answer=f["correct_option_id"])
        if instance.task == "RCR":
            hb = f["positive_heartbeat"]
            return intervene("RCR", hb["reason"], proactive_response=hb["proactive_response"])
        if instance.task == "TPG":
            w = f["ideal_response_windows"][index]
            response = w["reference_proactive_response"]
            return intervene("TPG", w["response_window_rationale"], proactive_response=response)
        reason = f["response_window_rationale" if instance.task == "MPA" else "trigger_match_reason"]
        return intervene(instance.task, reason, proactive_response=f["reference_proactive_response"])


def _require_adaptive(instance: Instance, name: str) -> None:
    if instance.task not in ADAPTIVE:
        raise ValueError(f"{name} applies to Adaptive probes only, not {instance.task}")


def _probe_index(probe_id: str) -> int:
    """``neg2`` → 2, ``pos1`` → 1, ``pos`` → 0 (see :func:`apm.data.instances.probe_points`)."""
    digits = probe_id.removeprefix("pos").removeprefix("neg")
    return int(digits) if digits else 0
