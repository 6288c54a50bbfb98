"""Names in a run directory: every file and folder a stage writes is named through here."""

from __future__ import annotations


def slug(text: str) -> str:
    """A display name as a file or folder name: letters, digits, ``-_.`` kept, the rest ``-``, lower case."""
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text).strip("-").lower()
