"""From a model's output to the decision, answer, correctness and gate of one instance (Section 3.3)."""

from __future__ import annotations

from dataclasses import dataclass

from apm.data.instances import Instance
from apm.data.tasks import ADAPTIVE, EA, EA_OPTIONS, MCQA_OPTIONS
from apm.prompts.parse import Parsed, parse_adaptive, parse_mcqa


@dataclass(frozen=True)
class Outcome:
    parsed: Parsed
    correct: bool | None
    """MCQA / EA: the parsed answer is the correct option (an unparseable answer is wrong)."""
    gate_pass: bool | None
    """Adaptive: the decision matches the probe's polarity; ERA positive also needs the right option."""


def apply_gate(instance: Instance, text: str, finish_reason: str | None = None) -> Outcome:
    """Parse ``text`` for ``instance`` and apply the deterministic checks."""
    if instance.task not in ADAPTIVE:
        options = "".join(EA_OPTIONS if instance.task == EA else MCQA_OPTIONS)
        parsed = parse_mcqa(text, options, finish_reason)
        return Outcome(parsed, parsed.answer is not None and parsed.answer == instance.correct_option, None)
    parsed = parse_adaptive(text, needs_answer=instance.task == "ERA", finish_reason=finish_reason)
    want = "INTERVENE" if instance.polarity == "positive" else "SILENT"
    gate = parsed.decision == want
    if gate and instance.task == "ERA" and instance.polarity == "positive":
        gate = parsed.answer == instance.correct_option
    return Outcome(parsed, None, gate)
