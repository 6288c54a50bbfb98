"""Parse model outputs into the decision/answer the prompts asked for (Appendix B.5).

A response is repaired (``parse_status: repaired``) only when exactly one task output can be read
from it. The repairs: Markdown fences, text around the JSON object, single-quoted (Python-literal)
objects, the case of keys and of SILENT/INTERVENE, and an answer or decision given in words instead
of the JSON field. An option letter is read when it stands alone as a capital (``B``, ``(B)``,
``B.``, ``Answer: B``, ``B. The red cup``); a lowercase letter counts only when it is the whole
answer (``{"answer": "c"}``), and a sentence-initial ``A`` before a lowercase word is the article.
A letter or keyword is negated when ``not``/``no``/``never``/``neither``/``nor``/``cannot``/``…n't``
is one of the five words before it in the same clause, with no ``but``/``so``/``and``/``maybe``/
``perhaps``/``probably`` after it; negated mentions are not read (``B, not A`` is B).

Otherwise ``parse_status`` is ``failed`` with one reason class:

- ``empty``: nothing but whitespace;
- ``repetition``: nothing could be read and the output was cut at the length limit or repeats itself;
- ``several_options``: two or more different option letters are asserted (``A or C``, ``C (or D)``);
- ``negated``: the only letter or decision mentioned is negated (``not A``, ``Do not INTERVENE``),
  or the same one is both asserted and negated (``B or not B``);
- ``no_decision``: no decision keyword, or both SILENT and INTERVENE are asserted;
- ``no_answer``: no option letter (no ``answer`` field, ``a guess``, ``null``), including an ERA
  INTERVENE without one;
- ``invalid_option``: the one letter read is not an option of the task (``Z``; ``E`` outside EA),
  or the answer is not a string.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

ParseStatus = Literal["ok", "repaired", "failed"]

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S | re.I)
"""The body of a Markdown code fence."""
_OBJECT = re.compile(r"\{.*\}", re.S)
"""From the first ``{`` to the last ``}``."""
_LONE = re.compile(r"\s*\(?\s*([A-Za-z])\s*\)?[.:)]?\s*")
"""A whole string that is one letter in either case, maybe bracketed or punctuated: ``(b).``."""
_LETTER = re.compile(r"(?<![\w'’])(?<!\w\.)[A-E](?![\w'’-]|\.\w)")
"""A capital option letter standing alone as a word (``(B)``, ``B.``, ``A or B``; not ``E.g.``, ``C-section``)."""
_DECISION = re.compile(r"\b(?:SILENT|INTERVENE)\b", re.I)
"""A decision keyword in any case."""
_SENTENCE_START = re.compile(r"(?:^|[.!?:\n])\s*$")
"""Text that ends where a sentence starts: nothing, or a full stop, ``?``, ``!``, colon or newline."""
_ARTICLE_NEXT = re.compile(r"\s+(?!(?:or|and|nor|not|is|was|because|since|as)\b)[a-z]")
"""What follows the article ``A`` (``A red cup``) and never option A (``A or C``, ``A is right``)."""
_CLAUSE_BREAK = re.compile(r"[,;.!?:\n]")
"""Punctuation that ends the clause a negation applies to."""
_WORD = re.compile(r"[\w'’]+")
"""A word, with its apostrophes (``don't``)."""

_NEGATORS = frozenset({"not", "no", "never", "neither", "nor", "cannot"})
"""Words that negate what follows them (as does any word ending in ``n't``)."""
_SCOPE_ENDS = frozenset({"but", "so", "and", "maybe", "perhaps", "probably"})
"""Words after which an earlier negation no longer applies (``not sure but B``)."""
_CONTEXT = 100
"""Characters before a mention that are read for its negation or article."""


@dataclass(frozen=True)
class Parsed:
    status: ParseStatus
    answer: str | None = None
    decision: str | None = None
    fields: dict[str, Any] | None = None
    error: str | None = None
    """Reason class when ``status`` is ``failed`` (see the module docstring)."""


def json_object(text: str) -> tuple[dict[str, Any] | None, bool]:
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


def _key(obj: dict[str, Any], name: str) -> str | None:
    """The key of ``obj`` that is ``name`` in any case."""
    return next((k for k in obj if isinstance(k, str) and k.lower() == name), None)


def _negated(before: str) -> bool:
    """Whether the clause ending ``before`` negates what follows it."""
    for word in reversed(_WORD.findall(_CLAUSE_BREAK.split(before)[-1].lower())[-5:]):
        if word in _SCOPE_ENDS:
            return False
        if word in _NEGATORS or word.endswith(("n't", "n’t")):
            return True
    return False


def _one(pattern: re.Pattern[str], text: str) -> tuple[str | None, str]:
    """The one word of ``pattern`` that ``text`` asserts, else why not: ``several``/``negated``/``none``."""
    asserted: set[str] = set()
    negated: set[str] = set()
    for m in pattern.finditer(text):
        before = text[max(0, m.start() - _CONTEXT):m.start()]
        if m.group(0) == "A" and _SENTENCE_START.search(before) and _ARTICLE_NEXT.match(text, m.end()):
            continue
        (negated if _negated(before) else asserted).add(m.group(0).upper())
    if len(asserted) > 1:
        return None, "several"
    if asserted and not asserted & negated:
        return asserted.pop(), ""
    return None, "negated" if negated else "none"


def _letter(value: Any, options: str) -> tuple[str | None, str | None]:
    """The option letter ``value`` gives, or ``None`` and the reason class."""
    if not isinstance(value, str):
        return None, "no_answer" if value is None else "invalid_option"
    lone = _LONE.fullmatch(value)
    letter, why = (lone.group(1).upper(), "") if lone else _one(_LETTER, value)
    if letter is None:
        return None, {"several": "several_options", "none": "no_answer"}.get(why, why)
    return (letter, None) if letter in options else (None, "invalid_option")


def _decision(value: Any) -> tuple[str | None, str | None]:
    """SILENT or INTERVENE as ``value`` gives it, or ``None`` and the reason class."""
    decision, why = _one(_DECISION, value) if isinstance(value, str) else (None, "none")
    return (decision, None) if decision else (None, "negated" if why == "negated" else "no_decision")


def _is_repetition(text: str, finish_reason: str | None) -> bool:
    """Whether the output was cut at the length limit or ends by repeating itself."""
    if finish_reason == "length":
        return True
    tail = text[-200:]
    return len(text) > 400 and len(tail) >= 20 and text.count(tail[:20]) > 5


def parse_mcqa(text: str, options: str = "ABCD", finish_reason: str | None = None) -> Parsed:
    """An MCQA/EA answer: ``{"answer": "B"}``, repaired from common deviations."""
    if not text or not text.strip():
        return Parsed("failed", error="empty")
    obj, repaired = json_object(text)
    source = obj if obj is not None else {"answer": text}
    key = _key(source, "answer")
    letter, error = _letter(source.get(key) if key else None, options)
    if letter is None:
        if obj is None and error == "no_answer" and _is_repetition(text, finish_reason):
            error = "repetition"
        return Parsed("failed", error=error, fields=obj)
    exact = not repaired and key == "answer" and source[key] == letter
    return Parsed("ok" if exact else "repaired", answer=letter, fields=obj)


def parse_adaptive(text: str, needs_answer: bool = False, finish_reason: str | None = None) -> Parsed:
    """An adaptive probe: ``{"decision": "SILENT"|"INTERVENE", …}``; ERA interventions need ``answer``."""
    if not text or not text.strip():
        return Parsed("failed", error="empty")
    obj, repaired = json_object(text)
    source = obj if obj is not None else {"decision": text, "answer": text}
    dkey, akey = _key(source, "decision"), _key(source, "answer")
    decision, error = _decision(source.get(dkey) if dkey else None)
    if decision is None:
        if obj is None and error == "no_decision" and _is_repetition(text, finish_reason):
            error = "repetition"
        return Parsed("failed", error=error, fields=obj)
    fields = obj if obj is not None else {"decision": decision, "reason": text.strip()}
    repaired = repaired or dkey != "decision" or source[dkey] != decision
    answer = None
    if needs_answer and decision == "INTERVENE":
        answer, error = _letter(source.get(akey) if akey else None, "ABCD")
        if answer is None:
            return Parsed("failed", decision=decision, error=error, fields=fields)
        repaired = repaired or akey != "answer" or source[akey] != answer
    return Parsed("repaired" if repaired else "ok", answer=answer, decision=decision, fields=fields)
