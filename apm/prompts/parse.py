"""Parse model outputs into the decision/answer the prompts asked for (Appendix B.5).

What can be repaired deterministically is repaired (``parse_status: repaired``): Markdown fences,
text around the JSON object, single quotes, the case of SILENT/INTERVENE, ``Answer: B``. Where no
unambiguous answer can be recovered the status is ``failed`` with a reason class: ``empty``,
``repetition`` (cut at the length limit without a decision), ``several_options``, ``no_decision``,
``no_answer``, ``invalid_option``.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

ParseStatus = Literal["ok", "repaired", "failed"]

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S | re.I)
_OBJECT = re.compile(r"\{.*\}", re.S)
_ANSWER_LINE = re.compile(r"\b(?i:answer|option)\s*(?i:is)?\s*[:=]?\s*\(?([A-E])\)?(?![A-Za-z])")
"""``Answer: B`` / ``the answer is (C)``: the letter must be a capital, so "the answer is a guess" is no answer."""
_LONE_LETTER = re.compile(r"^\s*\(?([A-E])\)?[.)]?\s*$")
_DECISION = re.compile(r"\b(SILENT|INTERVENE)\b", re.I)


@dataclass(frozen=True)
class Parsed:
    status: ParseStatus
    answer: str | None = None
    decision: str | None = None
    fields: dict[str, Any] | None = None
    error: str | None = None
    """Reason class when ``status`` is ``failed``."""


def _json_object(text: str) -> tuple[dict[str, Any] | None, bool]:
    """The JSON object in ``text`` and whether recovering it needed a repair."""
    stripped = text.strip()
    try:
        value = json.loads(stripped)
        if isinstance(value, dict):
            return value, False
    except json.JSONDecodeError:
        pass
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [m.group(0) for m in _OBJECT.finditer(text)]
    for chunk in candidates:
        for loader in (json.loads, ast.literal_eval):
            try:
                value = loader(chunk.strip())
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if isinstance(value, dict):
                return value, True
    return None, True


def _letter(value: Any, options: str) -> str | None:
    if not isinstance(value, str):
        return None
    m = re.fullmatch(r"\s*\(?([A-Ea-e])\)?[.)]?(?:\s.*)?", value, re.S)
    return m.group(1).upper() if m and m.group(1).upper() in options else None


def _is_repetition(text: str, finish_reason: str | None) -> bool:
    if finish_reason == "length":
        return True
    tail = text[-200:]
    return len(text) > 400 and len(tail) >= 20 and text.count(tail[:20]) > 5


def parse_mcqa(text: str, options: str = "ABCD", finish_reason: str | None = None) -> Parsed:
    """An MCQA/EA answer: ``{"answer": "B"}``, repaired from common deviations."""
    if not text or not text.strip():
        return Parsed("failed", error="empty")
    obj, repaired = _json_object(text)
    if obj is not None:
        key = next((k for k in obj if k.lower() == "answer"), None)
        letter = _letter(obj.get(key), options) if key else None
        if letter:
            return Parsed("repaired" if repaired or key != "answer" or obj[key] != letter else "ok", answer=letter, fields=obj)
        if key and isinstance(obj[key], str) and len(set(re.findall(r"\b[A-E]\b", obj[key]))) > 1:
            return Parsed("failed", error="several_options", fields=obj)
        return Parsed("failed", error="invalid_option" if key else "no_answer", fields=obj)
    found = {m.group(1).upper() for m in _ANSWER_LINE.finditer(text)} | {
        m.group(1) for m in _LONE_LETTER.finditer(text)
    }
    found &= set(options)
    if not found and len(text.strip()) <= 20:
        found = set(re.findall(r"\b([A-E])\b", text)) & set(options)
    if len(found) == 1:
        return Parsed("repaired", answer=found.pop())
    if len(found) > 1:
        return Parsed("failed", error="several_options")
    return Parsed("failed", error="repetition" if _is_repetition(text, finish_reason) else "no_answer")


def parse_adaptive(text: str, needs_answer: bool = False, finish_reason: str | None = None) -> Parsed:
    """An adaptive probe: ``{"decision": "SILENT"|"INTERVENE", …}``; ERA interventions need ``answer``."""
    if not text or not text.strip():
        return Parsed("failed", error="empty")
    obj, repaired = _json_object(text)
    if obj is None:
        decisions = {m.group(1).upper() for m in _DECISION.finditer(text)}
        if len(decisions) != 1:
            error = "repetition" if _is_repetition(text, finish_reason) else "no_decision"
            return Parsed("failed", error=error)
        obj, repaired = {"decision": decisions.pop(), "reason": text.strip()}, True
    key = next((k for k in obj if k.lower() == "decision"), None)
    raw = obj.get(key) if key else None
    decision = raw.strip().upper() if isinstance(raw, str) else None
    if decision not in ("SILENT", "INTERVENE"):
        return Parsed("failed", error="no_decision", fields=obj)
    repaired = repaired or key != "decision" or raw != decision
    answer = None
    if needs_answer and decision == "INTERVENE":
        akey = next((k for k in obj if k.lower() == "answer"), None)
        answer = _letter(obj.get(akey), "ABCD") if akey else None
        if answer is None:
            return Parsed("failed", decision=decision, error="no_answer", fields=obj)
        repaired = repaired or obj[akey] != answer
    return Parsed("repaired" if repaired else "ok", answer=answer, decision=decision, fields=obj)
