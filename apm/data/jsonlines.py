"""JSON reading that remembers where each value stands, so errors can name ``file:line``."""

from __future__ import annotations

import json
from typing import Any

Path_ = tuple[str | int, ...]


def value_lines(text: str) -> dict[Path_, int]:
    """Map the path of every value in a JSON document to the 1-based line where it starts.

    A path is a tuple of object keys and array indices; ``()`` is the document itself. The text
    must already be valid JSON (parse it with :func:`json.loads` first).
    """
    lines: dict[Path_, int] = {}
    stack: list[list[Any]] = []  # each: [container kind, current key or index]
    line = 1
    i, n = 0, len(text)
    expecting_key = False

    def here() -> Path_:
        return tuple(frame[1] for frame in stack)

    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
        elif ch in " \t\r":
            pass
        elif ch == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if expecting_key:
                stack[-1][1] = json.loads(text[i : j + 1])
                expecting_key = False
            else:
                lines.setdefault(here(), line)
            i = j
        elif ch in "{[":
            lines.setdefault(here(), line)
            stack.append(["{" if ch == "{" else "[", None if ch == "{" else 0])
            expecting_key = ch == "{"
        elif ch in "}]":
            stack.pop()
        elif ch == ",":
            if stack[-1][0] == "[":
                stack[-1][1] += 1
            else:
                expecting_key = True
        elif ch == ":":
            pass
        else:
            lines.setdefault(here(), line)
            while i + 1 < n and text[i + 1] not in ",]}\n \t\r":
                i += 1
        i += 1
    return lines


def format_path(path: Path_) -> str:
    """``("sessions", 2, "start_time")`` → ``sessions[2].start_time``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"
