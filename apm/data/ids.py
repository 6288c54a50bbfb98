"""Ids are data, never paths: the rules a release's ids obey, and the one way an id becomes a file name.

A trajectory id names its memory-state folder in a run and a session's ids name its state files, so
an id like ``/home/me`` or ``../x`` must never reach the file system as written. :func:`id_problem`
and :func:`fold` are the validator's rules (docs/release-format.md, "Ids"); :func:`id_path` is the
only place a path is built from an id, and it holds even for an id that was never validated.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Sequence
from pathlib import Path

from apm.data.model import Session

PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
"""Characters an id keeps in its file name; every other one is written ``%XX`` per UTF-8 byte."""
MAX_NAME_CHARS = 120
"""The longest escaped id (file systems allow 255 bytes per name; state files add a prefix and suffix)."""


def safe_name(id_: str) -> str:
    """``id_`` as one file name: ``%XX`` escapes leave no separator, dot or glob character, and keep ids distinct."""
    return "".join(ch if ch in PLAIN else _escaped(ch) for ch in id_)


def _escaped(ch: str) -> str:
    """``%XX`` for each UTF-8 byte of ``ch`` (a lone surrogate too: ids are checked before they are written)."""
    return "".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))


def id_path(parent: Path, id_: str, suffix: str = "") -> Path:
    """``parent/<safe name of id_><suffix>``; raises ``ValueError`` unless that lies directly inside ``parent``."""
    path = parent / f"{safe_name(id_)}{suffix}"
    if path.parent != parent or path.name in ("", ".", "..") or not id_:
        raise ValueError(f"id {id_!r} with suffix {suffix!r} does not name a file inside {parent}")
    return path


def session_path(parent: Path, session: Session, suffix: str) -> Path:
    """A session's file in a state folder: ``<index>_<day>_<session><suffix>``, names sorting in session order."""
    return id_path(parent, f"{session.index:04d}_{session.day_id}_{session.session_id}", suffix)


MAX_SET_NAME_CHARS = 200
"""The longest readable name of a set of sessions; a longer set is named by its digest (a name, with a
suffix such as ``.built.json``, must stay within the 255 bytes file systems allow)."""
DIGEST_NAME = "sha256="
"""The prefix of a set's digest name: ``=`` is in no readable name (escaped there as ``%3D``)."""
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_]+/[A-Za-z0-9_]+")


def sessions_name(keys: Sequence[str]) -> str:
    """One file name for a set of sessions (``day/session`` keys, in order), distinct for distinct sets:
    ``DAY1-S001+DAY1-S002`` while every id is letters, digits and ``_`` (the form earlier runs wrote), a
    key with any other character :func:`safe_name`-escaped (``DAY1%2FS-1``: ``+`` and ``/`` escaped too),
    and ``sha256=<hex>`` of the keys when that would exceed :data:`MAX_SET_NAME_CHARS`."""
    name = "+".join(key.replace("/", "-") if _PLAIN_KEY.fullmatch(key) else safe_name(key) for key in keys)
    if len(name) <= MAX_SET_NAME_CHARS:
        return name
    return DIGEST_NAME + hashlib.sha256(json.dumps(list(keys)).encode()).hexdigest()


def id_problem(id_: str) -> str | None:
    """What makes ``id_`` unusable as a name (None when nothing does)."""
    if not id_:
        return "must not be empty"
    if "/" in id_ or "\\" in id_:
        return f"{id_[:40]!r} contains a path separator (ids are names, not paths)"
    if has_control(id_):
        return f"{id_[:40]!r} contains a control character"
    if ".." in id_:
        return f"{id_[:40]!r} contains '..'"
    if not fold(id_):
        return f"{id_[:40]!r} is only dots and spaces"
    if len(safe_name(id_)) > MAX_NAME_CHARS:
        return f"is too long: {len(safe_name(id_))} characters as a file name, at most {MAX_NAME_CHARS}"
    return None


def has_control(text: str) -> bool:
    """Whether ``text`` holds a control character (NUL, newline, escape, …), which no name should."""
    return any(unicodedata.category(ch) == "Cc" for ch in text)


def fold(id_: str) -> str:
    """The form in which file systems compare names (case, Unicode composition, trailing dots and spaces)."""
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", id_).casefold()).rstrip(". ")
