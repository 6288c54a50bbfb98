"""The resident memory and CPU of a process together with every process under it (its workers), sampled
from ``/proc`` while it runs: a child's ``ru_maxrss`` is the largest single process of its tree, never
their sum, and ``os.wait4`` counts only the CPU of the processes it reaped (not a forkserver's workers)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Self

PERIOD_S = 0.05
"""How often the tree is sampled."""


def descendants(pid: int) -> list[int]:
    """``pid`` and every living process under it."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                todo += [int(x) for x in task.read_text().split()]
            except OSError:  # the task ended while it was read
                continue
    return found


def rss_kib(pid: int) -> int:
    """A process's resident memory now (KiB; 0 once it has ended)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(x.split()[1]) for x in status.splitlines() if x.startswith("VmRSS:")), 0)


def cpu_s(pid: int) -> float | None:
    """A process's user + system CPU seconds so far (None once it has ended)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Sampler:
    """Calls :meth:`sample` every ``period_s`` in a thread while the ``with`` block runs."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.period_s)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


class TreePeak(Sampler):
    """While the ``with`` block runs: the largest sum of resident memory over a process tree (``peak_kib``)
    and the CPU each of its processes was last seen to have used (``cpu_s``: their sum; a process's last
    ``PERIOD_S`` before it ends may be missed)."""

    def __init__(self, pid: int) -> None:
        super().__init__(PERIOD_S)
        self.pid, self.peak_kib = pid, 0
        self.used: dict[int, float] = {}

    @property
    def cpu_s(self) -> float:
        return sum(self.used.values())

    def sample(self) -> None:
        tree = descendants(self.pid)
        self.peak_kib = max(self.peak_kib, sum(rss_kib(p) for p in tree))
        for p in tree:
            self.used[p] = max(self.used.get(p, 0.0), cpu_s(p) or 0.0)
