"""The synthetic release's question and reminder wording: the generator fills these templates and the
pixel perceiver reads them back with :func:`pattern`, so a rewording changes both together."""

from __future__ import annotations

import re
import string

DOING_NOW = "What am I doing right now?"
COUNT_NOW = "How many items are on the tray right now?"
SIGN_NOW = "What word is written on the sign right now?"
WHERE_NOW = "Where is the {obj} relative to me right now?"
DOING_WHILE = "In an earlier session, what was I doing while the sign read '{word}'?"
LEFT_AT_END = "Where did I leave the {obj} at the end of my session on {day} that started at {hms}?"
SIGN_ORDER = "In what order did these signs appear in my earlier sessions: {words}?"
REMIND_WHEN = "When the {obj} is on {place}, remind me to {purpose}."
"""RCR's registration: a reminder for every time the condition shows."""
REMIND_NEXT = "Next time the {obj} is on {place}, remind me to {purpose}."
"""PRM's registration: a reminder for the next time the condition shows."""


def pattern(template: str, at_end: bool = False, **fields: str) -> re.Pattern[str]:
    """A regex matching ``template`` filled in: its text literally, each ``{field}`` a named group of
    ``fields[field]`` (default ``.+?``, as short as the text after it allows); ``at_end``: only where
    the filled template ends the text searched."""
    parts = []
    for literal, field, _spec, _conversion in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if field is not None:
            parts.append(f"(?P<{field}>{fields.get(field, '.+?')})")
    return re.compile("".join(parts) + ("$" if at_end else ""))
