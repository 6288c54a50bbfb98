"""JSON reading that remembers where each value stands, so errors can name ``file:line``.

:func:`decode` and :func:`parse` turn any bytes into a value, or raise one :class:`JsonProblem` with
its line: text that is not UTF-8, malformed JSON, nesting the parser would exhaust its recursion on,
an integer past Python's int-string limit, a key repeated in one object, a lone surrogate (a string
with no UTF-8 form, which every later writer would choke on) — never an exception of another kind.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, Iterator

Path_ = tuple[str | int, ...]
MAX_DEPTH = 64
"""Annotations nest a few levels; deeper text is refused before :func:`json.loads` recurses into it."""
_STRING = r'"(?:[^"\\\n]|\\.)*"'
_STRUCTURE = re.compile(rf"{_STRING}|[\[\]{{}}\n]")
"""A JSON string (skipped whole), a bracket or a newline: all that nesting depth needs."""
_DIGITS = re.compile(rf"{_STRING}|\d+")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class JsonProblem(ValueError):
    """Text that is not a usable JSON document: at which 1-based line, which field, what is wrong."""

    def __init__(self, line: int, field: str, message: str):
        super().__init__(message)
        self.line, self.field, self.message = line, field, message


def decode(data: bytes) -> str:
    """``data`` as UTF-8 text; raises ``JsonProblem`` at the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        column = e.start - data.rfind(b"\n", 0, e.start)
        line = data.count(b"\n", 0, e.start) + 1
        raise JsonProblem(line, "(encoding)", f"not UTF-8: byte 0x{data[e.start]:02x} at column {column}") from None


def parse(text: str) -> Any:
    """The value of the JSON document ``text``; raises ``JsonProblem`` for anything later stages cannot use."""
    _check_depth(text)
    try:
        value = json.loads(text, object_pairs_hook=_object)
    except _RepeatedKey:
        path, line = next(_repeats(text))
        raise JsonProblem(line, format_path(path), "appears twice in its object (JSON keeps only the last)") from None
    except json.JSONDecodeError as e:
        raise JsonProblem(e.lineno, "(syntax)", f"malformed JSON: {e.msg} (column {e.colno})") from None
    except ValueError:  # the only other error json.loads raises: an integer past the int-string limit
        limit = sys.get_int_max_str_digits()
        line = _long_number_line(text, limit)
        raise JsonProblem(line, "(syntax)", f"a number with more than {limit} digits") from None
    bad = _lone_surrogate(value) if _SURROGATE_ESCAPE.search(text) else None
    if bad is not None:
        line = value_lines(text).get(bad, 1)
        raise JsonProblem(line, format_path(bad), "holds a lone surrogate escape (not Unicode text)")
    return value


class _RepeatedKey(Exception):
    """An object names one key twice; :func:`parse` finds where."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refused when a key repeats (json.loads would silently keep the last value)."""
    obj = dict(pairs)
    if len(obj) < len(pairs):
        raise _RepeatedKey
    return obj


def _repeats(text: str) -> Iterator[tuple[Path_, int]]:
    """Each value whose path was met before (its key repeats one in the same object), with its line."""
    seen: set[Path_] = set()
    for path, line in _value_starts(text):
        if path in seen:
            yield path, line
        seen.add(path)


def _check_depth(text: str) -> None:
    """Raise ``JsonProblem`` where brackets nest deeper than ``MAX_DEPTH`` (those in strings do not count)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:  # too few brackets to nest that deep: skip the scan
        return
    depth, line = 0, 1
    for m in _STRUCTURE.finditer(text):
        ch = m.group()
        if ch == "\n":
            line += 1
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise JsonProblem(line, "(syntax)", f"nested deeper than {MAX_DEPTH} levels")
        elif ch in "]}":
            depth -= 1


def _long_number_line(text: str, limit: int) -> int:
    """The line of the first run of more than ``limit`` digits outside a string."""
    for m in _DIGITS.finditer(text):
        if len(m.group()) > limit and m.group()[0] != '"':
            return text.count("\n", 0, m.start()) + 1
    return 1


def _lone_surrogate(value: Any, path: Path_ = ()) -> Path_ | None:
    """The path of the first string (or key) in ``value`` holding a lone surrogate, None if there is none."""
    if isinstance(value, str):
        return path if not _encodable(value) else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, str) and not _encodable(key):
            return path + (key,)
        found = _lone_surrogate(item, path + (key,))
        if found is not None:
            return found
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def value_lines(text: str) -> dict[Path_, int]:
    """Map the path of every value in a JSON document to the 1-based line where it starts.

    A path is a tuple of object keys and array indices; ``()`` is the document itself. The text
    must already be valid JSON (parse it with :func:`json.loads` first).
    """
    lines: dict[Path_, int] = {}
    for path, line in _value_starts(text):
        lines.setdefault(path, line)
    return lines


def _value_starts(text: str) -> Iterator[tuple[Path_, int]]:
    """The path and line of each value as it starts; a path comes twice only when a key repeats."""
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
                yield here(), line
            i = j
        elif ch in "{[":
            yield here(), line
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
            yield here(), line
            while i + 1 < n and text[i + 1] not in ",]}\n \t\r":
                i += 1
        i += 1


def format_path(path: Path_) -> str:
    """``("sessions", 2, "start_time")`` → ``sessions[2].start_time``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"
