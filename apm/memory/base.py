"""The memory-protocol contract (DESIGN.md, "Memory protocols").

A protocol observes each completed session (``end_session``) and may write persistent state into
its own folder; the runner measures that folder's bytes on disk after every session. For each
instance it says what history to expose (``history``): frame spans of earlier sessions, text notes
and earlier turns, each carrying the time it was formed (a span: its end; a note: ``formed_at``; a
turn: when it was said). The runner refuses an instance shown any item formed after its probe time or
outside its visible sessions (docs/memory.md, "Causality"); the current session's causal prefix is
always added by the runner. A new protocol is one subclass plus one YAML file under
``conf/memory/`` (its ``_target_``), inside or outside this package.
"""

from __future__ import annotations

import abc
import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from apm.data.frames import Frame
from apm.data.instances import Instance, Turn
from apm.data.model import Session, Trajectory
from apm.records.declaration import Declaration
from apm.video.select import Span

if TYPE_CHECKING:
    from apm.backbones.base import Backbone


@dataclass(frozen=True)
class Note:
    """A text memory: the session it was written for, its text, and when it was formed."""

    session: Session
    text: str
    formed_at: int
    """Absolute second the text was formed (a session-end summary: that session's end); the runner
    refuses it for an instance probed before it, or when it lies outside the instance's visible sessions."""


@dataclass(frozen=True)
class History:
    """What an instance is shown besides its current causal prefix; every item carries when it was formed."""

    spans: tuple[Span, ...] = ()
    """Frame spans of visible sessions, each formed at its ``end`` (checked against the probe time)."""
    notes: tuple[Note, ...] = ()
    """Text memories, each with the session it was written for and its ``formed_at``."""
    turns: tuple[Turn, ...] = ()
    """What the user said in earlier sessions (e.g. a PRM registration), as the protocol kept it, each
    formed at its ``time`` and shown there within that session's block. Turns of the current session
    need no memory."""
    current: Literal["prefix", "recent"] = "prefix"
    """``prefix``: the current session from its start to the probe; ``recent``: only its latest frames."""
    recent_frames: int = 4


@dataclass(frozen=True)
class SessionView:
    """A completed session as a protocol observes it at its end."""

    trajectory: Trajectory
    session: Session
    interactions: tuple[Turn, ...]
    """User turns that happened during the session (registrations, ERA questions), in time order,
    with their text as it was said (the ERA question with its choices, Appendix E.3)."""
    frames: tuple[Frame, ...] = field(default=(), repr=False)
    """The whole session, sampled uniformly to the protocol's ``session_frames`` (none if 0)."""


class MemoryProtocol(abc.ABC):
    """Base class: stateless by default; subclasses override what they keep."""

    name: str = "memory"
    """How tables print the protocol (e.g. "Raw Video as Memory"); a config may override it."""
    session_frames: int = 0
    """How many frames of a completed session ``end_session`` wants to see (0: none)."""
    needs_writer: bool = False
    """Whether ``end_session`` asks a backbone to write text memory: only then is it given the
    ``writer`` (otherwise ``None``)."""
    declaration: ClassVar[Declaration | None] = None
    """What the protocol is (family, Table 3's Streaming and Persistent, a reference's tag;
    docs/memory.md, "Declaring a protocol"); undeclared, the tables print '–' and group it apart."""

    def __init__(self, name: str | None = None):
        if name:
            self.name = name

    async def end_session(self, view: SessionView, state_dir: Path, writer: Backbone | None) -> dict:
        """Update persistent state in ``state_dir`` after ``view.session``; return facts to record.

        A failed update returns ``{"error": "why"}`` among its facts: the session's memory line records
        it, and ``rerun=errors`` redoes the update and every later instance that saw its result.
        """
        return {}

    @abc.abstractmethod
    def history(self, instance: Instance, trajectory: Trajectory, state_dir: Path) -> History:
        """What ``instance`` is shown of earlier sessions (only its ``visible_sessions`` may appear)."""


def prior_sessions(instance: Instance, trajectory: Trajectory) -> list[Session]:
    """The completed sessions the instance may see, oldest first."""
    return [trajectory.session(k) for k in instance.visible_sessions[:-1]]


def state_files(state_dir: Path) -> list[Path]:
    """The files of the protocol's persistent state, sorted: every file under ``state_dir`` but the
    ``*.tmp`` files a writer has not renamed yet (or a crash left; they are not state)."""
    if not state_dir.exists():
        return []
    return sorted(p for p in state_dir.rglob("*") if p.is_file() and p.suffix != ".tmp")


def state_bytes(state_dir: Path) -> int:
    """Bytes the protocol's persistent state occupies on disk (``state_files``)."""
    return sum(p.stat().st_size for p in state_files(state_dir))


StateManifest = dict[str, dict[str, Any]]
"""What a state folder holds: relative POSIX path -> ``{"bytes": size, "sha256": hex digest}``."""


def state_manifest(state_dir: Path) -> StateManifest:
    """Each state file with its size and SHA-256, so a resume can tell whether the state is still there."""
    manifest = {}
    for path in state_files(state_dir):
        st = path.stat()
        digest = _file_sha256(str(path), (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        manifest[path.relative_to(state_dir).as_posix()] = {"bytes": st.st_size, "sha256": digest}
    return manifest


def manifest_sha256(manifest: StateManifest) -> str:
    """One digest for a whole state: SHA-256 of the manifest as canonical JSON."""
    return hashlib.sha256(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@functools.lru_cache(maxsize=65536)
def _file_sha256(path: str, identity: tuple[int, ...]) -> str:
    """SHA-256 of a file's bytes, remembered per inode, size and change times, so the state a session
    keeps (a raw video: gigabytes) is read once per process, not after every later session too."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()
