"""One writer at a time: an exclusive ``flock`` on a lock file whose content names the holder.

The kernel releases a ``flock`` when its holder's process ends, however it ends (SIGKILL, OOM, a
node's requeue), so a lock file left by a dead job is taken over by the next one without any pid or
age check; the content (host, pid, job id, since when) only tells a refused writer who holds it.
A group lock (``take_group``) lets any number of writers of one group in at a time, never two groups.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


class LockHeld(Exception):
    """Another writer holds the lock; ``holder`` is what its lock file says (``None``: not yet written)."""

    def __init__(self, path: Path, holder: dict[str, Any] | None):
        super().__init__(f"{path} is held by {holder}")
        self.path, self.holder = path, holder


_held_here: dict[Path, int] = {}
"""Lock files this process holds through re-entrant ``WriterLock``s, with how many hold each (the job
takes its shard before it writes anything; the run inside takes it again)."""


class WriterLock:
    """``with WriterLock(path, holder):`` — exclusive between processes, refused at once (``LockHeld``)
    or, with ``wait``, waited for; the holder's description (if any) is written into the file once the
    lock is taken. A ``shared`` lock excludes only exclusive ones (any number share it; it names no
    holder). A ``reentrant`` lock taken again where this process holds it re-entrantly nests instead."""

    def __init__(self, path: Path, holder: dict[str, Any] | None, wait: bool = False, reentrant: bool = False,
                 shared: bool = False):
        self.path, self.holder, self.wait, self.reentrant = Path(path), holder, wait, reentrant
        self.mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        self._fd: int | None = None
        self._nested = False

    def held_here(self) -> bool:
        """Whether this process already holds this (re-entrant) lock, so taking it again only nests."""
        return self.reentrant and self.path.resolve() in _held_here

    def __enter__(self) -> WriterLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self) -> WriterLock:
        """Take the lock (or raise ``LockHeld``) and write this holder's description into the file."""
        key = self.path.resolve()
        if self.reentrant and key in _held_here:
            _held_here[key] += 1
            self._nested = True
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, self.mode | (0 if self.wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            raise LockHeld(self.path, read_holder(self.path)) from None
        if self.holder is not None:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(self.holder).encode(), 0)
            os.fsync(fd)
        self._fd = fd
        if self.reentrant:
            _held_here[key] = 1
        return self

    def release(self) -> None:
        """Let the next writer in (the file and its content stay: they say who held it last)."""
        key = self.path.resolve()
        if self.reentrant and (self._nested or self._fd is not None):
            _held_here[key] -= 1
            if not _held_here[key]:
                del _held_here[key]
        self._nested = False
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor releases the flock
            self._fd = None


def read_holder(path: Path) -> dict[str, Any] | None:
    """What the lock file says about its (last) holder; ``None`` if it is empty or half written."""
    try:
        return json.loads(path.read_text() or "null")
    except (OSError, json.JSONDecodeError):
        return None


def this_process() -> dict[str, Any]:
    """Who holds a lock, as a refused writer is told: host, pid and since when."""
    return {"host": socket.gethostname(), "pid": os.getpid(),
            "since": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def holder_line(holder: dict[str, Any] | None) -> str:
    """A lock holder as words, for a refusal."""
    if not holder:
        return "a process that is only now writing its lock file"
    return f"host {holder.get('host')} pid {holder.get('pid')} since {holder.get('since')}"


def held_elsewhere(path: Path) -> bool:
    """Whether another open file (another process) holds a lock on ``path`` now."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases the probe's lock, if it got one
    return False


class GroupHeld(Exception):
    """Writers of another group hold a group lock (``path``) of the folder."""

    def __init__(self, path: Path):
        super().__init__(f"{path} is held")
        self.path = path


GROUP_SUFFIX = ".group.lock"


def take_group(folder: Path, group: str) -> WriterLock:
    """Join ``group``'s writers in ``folder`` (a shared lock on ``<group>.group.lock``, re-entrant),
    unless writers of another group hold theirs (``GroupHeld``): any number of writers of one group at
    a time, never two groups. The check and the join happen under ``groups.lock``, so two groups
    starting at once cannot both get in."""
    lock = WriterLock(folder / f"{group}{GROUP_SUFFIX}", None, reentrant=True, shared=True)
    if lock.held_here():
        return lock.acquire()
    with WriterLock(folder / "groups.lock", None, wait=True):
        busy = sorted(p for p in folder.glob(f"*{GROUP_SUFFIX}") if p.name != lock.path.name and held_elsewhere(p))
        if busy:
            raise GroupHeld(busy[0])
        return lock.acquire()
