"""Problems found in a release, each as ``file:line: field: what is wrong``."""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_LISTED = 50
MAX_CHARS = 300
"""A field or message longer than this (a pasted value, most likely) loses its middle, so it stays readable."""


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.field}: {self.message}"


@dataclass
class Problems:
    """Collects every problem of a release; nothing runs until it is empty."""

    items: list[Problem] = field(default_factory=list)

    def add(self, file: str, line: int, field_: str, message: str) -> None:
        self.items.append(Problem(file, line, one_line(field_), one_line(message)))

    def __bool__(self) -> bool:
        return bool(self.items)

    def report(self, limit: int = MAX_LISTED) -> str:
        shown = [str(p) for p in self.items[:limit]]
        if len(self.items) > limit:
            shown.append(f"... and {len(self.items) - limit} more problems")
        return "\n".join(shown)


def one_line(text: str) -> str:
    """``text`` printable on one line, its middle cut past ``MAX_CHARS`` (released values may hold anything)."""
    if len(text) > MAX_CHARS:
        half = MAX_CHARS // 2 - 2
        return f"{one_line(text[:half])}...{one_line(text[-half:])}"
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


class ReleaseError(ValueError):
    """A release that cannot be used; ``problems`` lists everything that is wrong with it."""

    def __init__(self, root: str, problems: Problems):
        self.problems = problems
        n = len(problems.items)
        super().__init__(f"{root}: {n} problem{'s' * (n != 1)} in the release\n{problems.report()}")
