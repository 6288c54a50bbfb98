"""The Appendix A.3 rubric: the judge prompt for one probe and the strict check of its reply."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from apm.data.digest import files_digest
from apm.data.located_json import JsonProblem, parse

TEMPLATES = resources.files("apm.judge").joinpath("templates")
JUDGE_SYSTEM = "You are an impartial evaluator. Reply with exactly one JSON object."

CRITERIA: dict[str, tuple[str, ...]] = {
    "task_fidelity": ("pass", "partial", "fail"),
    "historical_or_registration_grounding": ("pass", "partial", "fail", "not_applicable"),
    "current_trigger_or_silence_grounding": ("pass", "partial", "fail"),
    "factual_support": ("pass", "partial", "fail"),
    "usefulness": ("pass", "partial", "fail", "not_applicable"),
}
REPLY_KEYS = {"score", "criterion_checks", "critical_issues", "justification"}
REPLY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "score": {"type": "integer", "minimum": 1, "maximum": 5},
        "criterion_checks": {
            "type": "object",
            "properties": {name: {"type": "string", "enum": list(allowed)} for name, allowed in CRITERIA.items()},
            "required": list(CRITERIA),
            "additionalProperties": False,
        },
        "critical_issues": {"type": "array", "items": {"type": "string", "maxLength": 200}, "maxItems": 5},
        "justification": {"type": "string", "maxLength": 600},
    },
    "required": sorted(REPLY_KEYS),
    "additionalProperties": False,
}
"""The A.3 reply as a JSON Schema, for engines that decode to one; :func:`check_reply` still decides.
The length caps (not in A.3) keep a guided reply within the judge's 512 tokens: a small model would
otherwise list issues until it is cut off mid-JSON."""

MAX_REPLY_CHARS = 16_384
"""A reply longer than this is an invalid reply (a judge failure), never parsed or kept: the rubric's JSON
within the schema's caps is under 3,000 characters, and an endpoint streaming megabytes would otherwise
fill the judgements file. Not in A.3 (docs/prompts.md)."""

REFERENCE_FIELDS = {
    "ERA": ("question", "choices", "correct_option_id", "answer_evidence_moments", "ideal_response_window"),
    "RCR": ("registration_event", "ideal_response_window"),
    "MPA": ("evidence_moments", "response_window_rationale", "reference_proactive_response", "ideal_response_window"),
    "PRM": ("registration_event", "trigger_match_reason", "reference_proactive_response", "ideal_response_window"),
    "TPG": ("evidence_moments", "memory_relevance"),
}
"""Annotation fields given to the judge for every probe of a task (plus the probe's own fields)."""


def rubric_version(folder: Traversable) -> str:
    """``a3-<digest>`` of the judge templates in ``folder`` and of the in-code parts of what the judge
    is sent (system line, criteria, reply schema, reference fields)."""
    shaping = json.dumps([JUDGE_SYSTEM, CRITERIA, REPLY_SCHEMA, REFERENCE_FIELDS], sort_keys=True)
    return f"a3-{files_digest(folder, shaping.encode())}"


RUBRIC_VERSION = rubric_version(TEMPLATES)
"""Changes exactly when the rubric, the guidance or the judge's system line, criteria, reply schema
or reference fields change (never bumped by hand): cached judgements of another version are not reused."""


@cache
def _text(name: str) -> str:
    return TEMPLATES.joinpath(name).read_text(encoding="utf-8").strip()


def rubric() -> str:
    return _text("rubric.txt")


def guidance(task: str) -> str:
    """The task's line of the task-specific guidance field."""
    for line in _text("guidance.txt").splitlines():
        if line.startswith(f"{task}:"):
            return line
    raise KeyError(task)


def probe_reference(fields: Mapping[str, Any], task: str, probe_id: str) -> dict[str, Any]:
    """The reference annotations of one probe: the task's fields and the probe's own entry."""
    ref = {k: fields[k] for k in REFERENCE_FIELDS[task] if k in fields}
    index = int(probe_id.lstrip("posneg") or 0)
    if probe_id.startswith("neg"):
        key = "negative_heartbeats" if task in ("ERA", "RCR") else "negative_or_silence_windows"
        ref["this_probe"] = fields[key][index]
    elif task in ("ERA", "RCR"):
        ref["this_probe"] = fields["positive_heartbeat"]
    elif task == "TPG":
        ref["this_probe"] = fields["ideal_response_windows"][index]
    return ref


def judge_prompt(task: str, polarity: str, probe_time: str, reference: dict[str, Any], output: str) -> str:
    """The user message to the judge: rubric, the task's guidance, cutoff, references, response."""
    expected = "INTERVENE" if polarity == "positive" else "SILENT"
    return "\n\n".join([
        rubric(),
        f"Task-specific guidance field:\n\n{guidance(task)}",
        f"Task: {task}. Probe polarity: {polarity} (the correct decision, already checked: {expected}).",
        f"Causal cutoff: {probe_time}",
        "Reference annotations:\n\n" + json.dumps(reference, ensure_ascii=False, indent=1),
        f"Model response:\n\n{output}",
    ])


@dataclass(frozen=True)
class Verdict:
    score: int
    criterion_checks: dict[str, str]
    critical_issues: list[str]
    justification: str


def check_reply(text: str) -> Verdict:
    """The reply as exactly the rubric's JSON, at most :data:`MAX_REPLY_CHARS` long; raise ``ValueError``
    saying what is wrong otherwise."""
    if len(text) > MAX_REPLY_CHARS:
        raise ValueError(f"{len(text):,} characters, over the cap of {MAX_REPLY_CHARS:,}")
    try:
        obj = parse(text)  # a repeated key is refused: json.loads would keep its last value
    except JsonProblem as e:
        raise ValueError(f"not JSON as the rubric asks: {e.field}: {e.message}") from None
    if not isinstance(obj, dict) or set(obj) != REPLY_KEYS:
        raise ValueError(f"keys must be exactly {sorted(REPLY_KEYS)}")
    score = obj["score"]
    if type(score) is not int or not 1 <= score <= 5:
        raise ValueError(f"score must be an integer 1-5, got {score!r}")
    checks = obj["criterion_checks"]
    if not isinstance(checks, dict) or set(checks) != set(CRITERIA):
        raise ValueError(f"criterion_checks must have exactly {sorted(CRITERIA)}")
    for name, allowed in CRITERIA.items():
        if checks[name] not in allowed:
            raise ValueError(f"criterion_checks.{name}: {checks[name]!r} is not one of {'|'.join(allowed)}")
    issues = obj["critical_issues"]
    if not isinstance(issues, list) or not all(isinstance(i, str) for i in issues):
        raise ValueError("critical_issues must be a list of strings")
    if not isinstance(obj["justification"], str):
        raise ValueError("justification must be a string")  # noqa: TRY004 (every bad reply is a ValueError)
    return Verdict(score, checks, issues, obj["justification"])
