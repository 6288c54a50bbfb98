"""The run directory: every path of a run (docs/records.md, "Records"), and the one rule by which every
command finds runs at or below the folders it is given.

The layout is owned here alone; the runner, the judge, the reducer, the publisher, the viewer and
``apm-status`` name a run's files through :class:`RunDir`, never by folder-name strings of their own.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from apm.data.ids import id_path

CONFIG = "config.json"
RECORDS = "records"
MEMORY = "memory"
JUDGEMENTS = "judgements"
JOBS = "jobs"
LOCKS = "locks"
PROMPTS = "prompts"
PUBLISH = "publish"
MEMORY_STATE, MEMORY_STATE_VISIBLE = "memory_state", "memory_state_visible"
PLAN, LEDGER, MANIFEST = "plan.json", "ledger.jsonl", "manifest.json"
RUN_MARKERS = (CONFIG, RECORDS, JOBS, LOCKS)
"""What the runner puts in a run dir: a folder holding any of these is a run, or the debris of one."""
NOTE_NAMES = 3
"""How many skipped folders a note names before it says 'and N more'."""
SPECIAL_FILES = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"),
                 (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def not_regular(path: Path) -> str | None:
    """What ``path`` is when it is not a regular file (``"a FIFO"``, …), told by ``os.stat`` alone: it is
    never opened, since opening a FIFO waits for a writer forever. None for a regular file (or a link to one)."""
    mode = os.stat(path).st_mode
    if stat.S_ISREG(mode):
        return None
    return next((name for is_kind, name in SPECIAL_FILES if is_kind(mode)), "a special file")


def slug(text: str) -> str:
    """A display name as a file or folder name: letters, digits, ``-_.`` kept, the rest ``-``, lower case."""
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text).strip("-").lower()


@dataclass(frozen=True)
class RunDir:
    """One run directory ``<output_root>/<dataset>/<memory>/<backbone>-<config hash>/`` and every path in it."""

    path: Path

    @property
    def config(self) -> Path:
        """``config.json``: the resolved config, its hash, the release fingerprint and the code identity."""
        return self.path / CONFIG

    @property
    def records(self) -> Path:
        return self.path / RECORDS

    @property
    def memory(self) -> Path:
        """The memory lines (one per completed session), a ``<shard>.jsonl`` per shard."""
        return self.path / MEMORY

    @property
    def judgements(self) -> Path:
        return self.path / JUDGEMENTS

    @property
    def jobs(self) -> Path:
        return self.path / JOBS

    @property
    def locks(self) -> Path:
        return self.path / LOCKS

    @property
    def prompts(self) -> Path:
        """The text parts of the requests sent, one ``<sha256>.txt`` per distinct text (docs/prompts.md)."""
        return self.path / PROMPTS

    @property
    def publish(self) -> Path:
        """``publish/``: where ``apm-publish`` writes offline W&B runs by default, of the sweep's root (the
        output root a run dir was run into, ``apm.publish.source.sweep_root``; the run dir itself when it is
        not below it)."""
        return self.path / PUBLISH

    @property
    def judge_lock(self) -> Path:
        """Held by the ``apm-judge`` judging this run dir."""
        return self.locks / "apm-judge.lock"

    def records_file(self, shard: str) -> Path:
        return self.records / f"{shard}.jsonl"

    def memory_file(self, shard: str) -> Path:
        return self.memory / f"{shard}.jsonl"

    def judgements_file(self, judge: str, suffix: str = "") -> Path:
        """The judgement lines of judge ``judge`` (its display name, slugged), ``suffix`` for a shard's own file."""
        return self.judgements / f"{slug(judge)}{suffix}.jsonl"

    def job(self, shard: str) -> Path:
        """A shard job's folder: Hydra's output, ``plan.json``, ``ledger.jsonl`` and ``manifest.json``."""
        return self.jobs / shard

    def plan(self, shard: str) -> Path:
        return self.job(shard) / PLAN

    def ledger(self, shard: str) -> Path:
        return self.job(shard) / LEDGER

    def manifest(self, shard: str) -> Path:
        return self.job(shard) / MANIFEST

    def plans(self) -> list[Path]:
        """Every shard job's ``plan.json``, in shard-folder name order."""
        return sorted(self.jobs.glob(f"shard-*-of-*/{PLAN}"))

    def manifests(self) -> list[Path]:
        """Every job's ``manifest.json``, in job-folder name order."""
        return sorted(self.jobs.glob(f"*/{MANIFEST}"))

    def shard_lock(self, shard: str) -> Path:
        return self.locks / f"{shard}.lock"

    @property
    def memory_states(self) -> Path:
        """``memory_state/``: the persistent state of every trajectory, a folder each (:meth:`memory_state`)."""
        return self.path / MEMORY_STATE

    def memory_state(self, trajectory_id: str) -> Path:
        """The protocol's persistent state of one trajectory (what a memory line's ``bytes`` measures)."""
        return id_path(self.memory_states, trajectory_id)

    def memory_state_visible(self, trajectory_id: str) -> Path:
        """A streaming system's states built from an EA instance's visible sessions alone (never storage)."""
        return id_path(self.path / MEMORY_STATE_VISIBLE, trajectory_id)

    def files(self, kind: str) -> list[Path]:
        """The ``<kind>/*.jsonl`` line files (``records``, ``memory``, ``judgements``), sorted."""
        return sorted((self.path / kind).glob("*.jsonl"))

    def is_run(self, need_config: bool = False) -> bool:
        """A run: it has its ``config.json`` (the runner writes it before anything else of the run) or,
        unless ``need_config``, ``records/`` (lines written by other tools) or a shard's ledger (a job
        ``apm-submit`` submitted that has not started yet). A ``jobs/`` with neither is a failed start's debris."""
        if self.config.is_file():
            return True
        return not need_config and (self.records.is_dir() or any(self.jobs.glob(f"*/{LEDGER}")))


@dataclass(frozen=True)
class FoundRuns:
    """The runs at or below the given folders, in path order, and the folders that looked like runs but
    are not (e.g. the ``jobs/`` of a start that failed before it wrote ``config.json``)."""

    runs: list[RunDir]
    skipped: list[Path] = field(default_factory=list)
    need_config: bool = False

    @property
    def paths(self) -> list[Path]:
        return [r.path for r in self.runs]

    def note(self) -> str | None:
        """One line naming the skipped folders (None when nothing was skipped)."""
        if not self.skipped:
            return None
        names = ", ".join(map(str, self.skipped[:NOTE_NAMES]))
        more = f" and {len(self.skipped) - NOTE_NAMES} more" if len(self.skipped) > NOTE_NAMES else ""
        lacking = CONFIG if self.need_config else f"{CONFIG}, {RECORDS}/ or a job ledger"
        return f"skipped {len(self.skipped)} folder(s) that are not runs (no {lacking}): {names}{more}"


def find_runs(paths: Iterable[str | os.PathLike[str]], need_config: bool = False) -> FoundRuns:
    """Every run at or below ``paths`` (a run dir, or any folder above run dirs), each once (resolved),
    in path order; a folder holding what a run holds (:data:`RUN_MARKERS`) but not a run is skipped. A path that
    does not exist raises ``FileNotFoundError``. ``need_config``: only runs with a ``config.json`` count."""
    runs: dict[Path, None] = {}
    skipped: dict[Path, None] = {}
    for root in map(Path, paths):
        if not root.exists():
            raise FileNotFoundError(2, "no such run directory", str(root))
        for folder in _candidates(root):
            run = RunDir(folder.resolve())
            (runs if run.is_run(need_config) else skipped).setdefault(run.path, None)
    return FoundRuns([RunDir(p) for p in runs], [p for p in skipped if p not in runs], need_config)


def _candidates(root: Path) -> list[Path]:
    """Folders at or below ``root`` holding any of :data:`RUN_MARKERS`, sorted; the walk does not enter
    them (a run's own folders hold no runs)."""
    found = []
    for folder, subfolders, files in os.walk(root):
        if any(m in files or m in subfolders for m in RUN_MARKERS):
            found.append(Path(folder))
            subfolders.clear()
        else:
            subfolders.sort()
    return found
