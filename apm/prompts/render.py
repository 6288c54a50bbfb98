"""Fill the Appendix E templates from a runtime instance.

Templates live in ``templates/*.txt`` with the paper's angle-bracketed fields (``<QUESTION>``,
``<OPTION A>``, ``<START_TIME>``, …). The paper's text is kept word for word; see
``docs/prompts.md`` for the whitespace restored after punctuation and where frames and turns go.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable

from apm.data import clock
from apm.data.digest import files_digest
from apm.data.instances import Instance, Turn
from apm.data.model import Session
from apm.prompts.layout import SAID

_FIELD = re.compile(r"<([A-Z][A-Z_ ]*)>")

TEMPLATES = resources.files("apm.prompts").joinpath("templates")


def prompt_version(folder: Traversable) -> str:
    """``e-<digest>`` of the template files in ``folder`` (Appendix E): names the prompts' exact text."""
    return f"e-{files_digest(folder)}"


PROMPT_VERSION = prompt_version(TEMPLATES)
"""Changes exactly when any template's bytes change (never bumped by hand); recorded on every record."""

_PROBE_TEMPLATE = {
    "STU": "mcqa_stu",
    "EA": "ea",
    "ERA": "era_probe",
    "RCR": "rcr_probe",
    "MPA": "mpa_interval",
    "PRM": "prm_interval",
    "TPG": "tpg_interval",
}


@cache
def template(name: str) -> str:
    """The text of ``templates/<name>.txt`` without its trailing newline."""
    return TEMPLATES.joinpath(f"{name}.txt").read_text(encoding="utf-8").rstrip("\n")


def fill(name: str, fields: Mapping[str, str]) -> str:
    """Replace every ``<FIELD>`` of template ``name``; a field left unfilled is an error."""
    text = template(name)
    for key, value in fields.items():
        text = text.replace(f"<{key}>", value)
    left = [m[0] for m in _FIELD.finditer(text)]
    if left:
        raise ValueError(f"template {name}: unfilled fields {left}")
    return text


def _group(field: str) -> str:
    return field.replace(" ", "_")


@cache
def _body(name: str) -> str:
    """The regex of template ``name`` filled: its text escaped, each field a named group (a field
    that closes the template runs to its line's end)."""
    pieces = _FIELD.split(template(name))  # literal, field, literal, …, literal
    out = [re.escape(p) if i % 2 == 0 else f"(?P<{_group(p)}>.*?)" for i, p in enumerate(pieces)]
    return "".join(out) + "$"


def read_fields(name: str, text: str) -> dict[str, str] | None:
    """The fields of template ``name`` as :func:`fill` wrote it somewhere in ``text`` (None: not there)."""
    m = re.search(_body(name), text, re.S | re.M)
    return {f: m[_group(f)] for f in _FIELD.findall(template(name))} if m else None


PROBE_TEMPLATES = ("mcqa", *dict.fromkeys(_PROBE_TEMPLATE.values()))
"""Every template :func:`probe_prompt` may send."""


def read_probe(text: str) -> tuple[str, dict[str, str]] | None:
    """Which probe template ``text`` ends with (a request's last text part ends with its probe), and
    its fields; None when it ends with none."""
    for name in PROBE_TEMPLATES:
        m = re.search(rf"{_body(name)}\Z", text, re.S | re.M)
        if m:
            return name, {f: m[_group(f)] for f in _FIELD.findall(template(name))}
    return None


def _question_fields(fields: Mapping) -> dict[str, str]:
    out = {"QUESTION": fields["question"]}
    out.update({f"OPTION {c['option_id']}": c["text"] for c in fields["choices"]})
    return out


def _time(abs_second: int) -> str:
    return clock.label(abs_second)


def system_prompt() -> str:
    """E.1: precedes every task prompt."""
    return template("system")


def probe_prompt(instance: Instance) -> str:
    """The text sent at the probe time (E.2 MCQA, E.3 probes, E.4 EA)."""
    name = _PROBE_TEMPLATE.get(instance.task, "mcqa")
    fields = instance.candidate.fields
    if name in ("mcqa", "mcqa_stu", "ea"):
        return fill(name, _question_fields(fields))
    if instance.window_start is not None:
        return fill(name, {"START_TIME": _time(instance.window_start), "END_TIME": _time(instance.probe_time)})
    return template(name)


def turn_text(turn: Turn, instance: Instance) -> str:
    """The text of a turn the protocol injects before the probe (ERA question, registration, marker)."""
    if turn.kind == "question":
        return fill("era_question", _question_fields(instance.candidate.fields))
    if turn.kind == "interval_marker":
        return fill("interval_marker", {"START_TIME": _time(turn.time)})
    return turn.text


def summary_prompts(session: Session) -> tuple[str, str]:
    """E.5: the summary writer's instruction and its session-end request."""
    request = fill(
        "summary_request",
        {
            "DAY_ID": session.day_id,
            "SESSION_ID": session.session_id,
            "START_TIME": clock.split(session.start)[1],
            "END_TIME": clock.split(session.end)[1],
        },
    )
    return template("summary_writer"), request


def said_text(turns: Sequence[Turn], then: str) -> str:
    """The text part that follows a stretch of the stream's frames: what the user said during it, one
    ``[DAYn HH:MM:SS] User: …`` line per turn in time order, then ``then`` (docs/prompts.md, "The request")."""
    said = [SAID.write(at=clock.label(t.time), text=t.text) for t in sorted(turns, key=lambda t: t.time)]
    return "\n\n".join(["\n".join(said), then] if turns else [then])
