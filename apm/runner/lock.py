"""One writer at a time: an exclusive ``flock`` on a lock file whose content names the holder.

The kernel releases a ``flock`` when its holder's process ends, however it ends (SIGKILL, OOM, a
node's requeue), so a lock file left by a dead job is taken over by the next one without any pid or
age check; the content (host, pid, job id, since when) only tells a refused writer who holds it.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any


class LockHeld(Exception):
    """Another writer holds the lock; ``holder`` is what its lock file says (``None``: not yet written)."""

    def __init__(self, path: Path, holder: dict[str, Any] | None):
        super().__init__(f"{path} is held by {holder}")
        self.path, self.holder = path, holder


class WriterLock:
    """``with WriterLock(path, holder):`` — exclusive, refused at once (``LockHeld``) or, with ``wait``,
    waited for; the holder's description is written into the file once the lock is taken."""

    def __init__(self, path: Path, holder: dict[str, Any], wait: bool = False):
        self.path, self.holder, self.wait = Path(path), holder, wait
        self._fd: int | None = None

    def __enter__(self) -> WriterLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self) -> WriterLock:
        """Take the lock (or raise ``LockHeld``) and write this holder's description into the file."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if self.wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            raise LockHeld(self.path, read_holder(self.path)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(self.holder).encode(), 0)
        os.fsync(fd)
        self._fd = fd
        return self

    def release(self) -> None:
        """Let the next writer in (the file and its content stay: they say who held it last)."""
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor releases the flock
            self._fd = None


def read_holder(path: Path) -> dict[str, Any] | None:
    """What the lock file says about its (last) holder; ``None`` if it is empty or half written."""
    try:
        return json.loads(path.read_text() or "null")
    except (OSError, json.JSONDecodeError):
        return None
