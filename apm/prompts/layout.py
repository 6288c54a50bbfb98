"""The request's own text markers (docs/prompts.md, "The request"): session headers, the current time and
what the user said. Each is one format string that both writes a marker and, as a regex, reads it back,
so the runner that writes them and a reader of requests (the pixel perceiver) cannot drift apart.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass

LABEL = r"DAY\d+ \d\d:\d\d:\d\d"
"""A wall-clock label as :func:`apm.data.clock.label` writes it (``DAY1 08:00:41``)."""
HMS = r"\d\d:\d\d:\d\d"

MEMORY_INTRO = "Persistent memory of completed sessions:"
"""Opens the text memories of earlier sessions."""
MEMORY = "Memory of session"
EARLIER_VIDEO = "Video of earlier session"
CURRENT = "Current session"
CURRENT_END = "now"
"""How the current session's header ends: at the current time (stated as ``[Current time: …]``), never
at the session's end, which lies after the probe; the same in every probe of a session (docs/prompts.md)."""


@dataclass(frozen=True)
class Marker:
    """One marker: how it is written (``{name}`` fields) and what each field may hold when read back."""

    form: str
    fields: dict[str, str]

    def write(self, **values: str) -> str:
        return self.form.format(**values)

    def pattern(self, line: bool = False) -> re.Pattern[str]:
        """The regex of a written marker (``line``: one that is a whole line): its literal text
        escaped, each field a named group."""
        out = ["^"] if line else []
        for literal, name, _, _ in string.Formatter().parse(self.form):
            out.append(re.escape(literal))
            if name is not None:
                out.append(f"(?P<{name}>{self.fields[name]})")
        return re.compile("".join([*out, "$"] if line else out), re.M)


HEADER = Marker("[{kind} {key}, {start} to {end}]", {
    "kind": "|".join(map(re.escape, (MEMORY, EARLIER_VIDEO, CURRENT))), "key": r"\S+", "start": LABEL,
    "end": f"{HMS}|{re.escape(CURRENT_END)}",
})
"""A session header: its start label and its end time (the current session's: :data:`CURRENT_END`)."""
CURRENT_TIME = Marker("[Current time: {now}]", {"now": LABEL})
SAID = Marker("[{at}] User: {text}", {"at": LABEL, "text": ".*"})
"""One user turn, with when it was said (a multi-line turn reads back as its first line)."""
