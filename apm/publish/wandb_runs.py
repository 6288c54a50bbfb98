"""W&B runs built from the records, idempotently (docs/publish.md).

Each method (config hash) gets one W&B run per stage — ``run`` (the per-instance table), ``judge``
(the judgements, when there are any) and ``reduce`` (the paper's metrics in its summary) — with a
deterministic id ``<config hash>-<stage>-<group digest>``. Everything goes into the run's summary
(tables too), never into history, so a run holds one state. Offline, each publish writes a fresh
``offline-run-*`` folder (artifact staging inside it), names it in the folder's marker once it is
finished and only then deletes the earlier folder of that id (:class:`PublishFolder`), so ``wandb
sync`` sees exactly one; one publish at a time holds a folder (:func:`holding`); online, the run of
that id is resumed and its config and summary keys are overwritten.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from apm.data.model import Release
from apm.data.problems import ReleaseError
from apm.data.release import load_release
from apm.publish.axes import judge_summary, method_config, method_tags, metric_summary, run_summary
from apm.publish.instances import (
    COLUMNS,
    JUDGEMENT_COLUMNS,
    candidates_of,
    instance_rows,
    judgement_rows,
    plain,
)
from apm.publish.source import Method, default_group, read_methods, run_dirs
from apm.publish.thumbnails import Strip, Thumbnails
from apm.records.atomic import OUTPUT_LOCK, OutputRefused, claim_output, read_marker, write_marker
from apm.records.lock import LockHeld, WriterLock, holder_line, this_process
from apm.reduce.scores import SCORE_COLUMNS
from apm.video.cache import FrameCache

Rows = list[list[Any]]
Tables = dict[str, tuple[Sequence[str], Rows]]
PROG = "apm-publish"
ENTRIES = ("wandb",)
"""What ``apm-publish`` writes into its folder (besides its marker and lock)."""
MAX_ROWS = 10_000
"""wandb.Table silently truncates past this many rows: longer tables are logged in parts."""


@dataclass(frozen=True)
class PublishOptions:
    """Where and how ``apm-publish`` writes, and how it reads (as ``apm-reduce`` does)."""

    project: str = "apm-bench"
    entity: str | None = None
    group: str | None = None
    """The sweep; default: each run dir's output root name."""
    mode: str = "offline"
    """``offline`` (then ``wandb sync``) or ``online``."""
    directory: Path | None = None
    """Offline runs go to ``<directory>/wandb/``; default ``<run dir>/publish``."""
    judge: str | None = None
    rubric: str | None = None
    seed: int = 0
    bootstrap: int = 1000
    all_frames: bool = False
    """Thumbnails for every instance, not only wrong or failed ones."""
    cache_dir: str | None = None
    """Frame cache to read thumbnails from; default: the run's ``frames.cache_dir``."""
    table_rows: int = MAX_ROWS


@dataclass(frozen=True)
class RunSpec:
    """One W&B run to write: identity, config, tags, summary values, tables and images."""

    run_id: str
    name: str
    group: str
    job_type: str
    directory: Path | None
    config: dict[str, Any] = field(default_factory=dict)
    tags: Sequence[str] = ()
    summary: dict[str, Any] = field(default_factory=dict)
    tables: Tables = field(default_factory=dict)
    images: dict[str, Path] = field(default_factory=dict)


@dataclass(frozen=True)
class Published:
    """A W&B run written: its id, stage, name and (offline) folder."""

    run_id: str
    job_type: str
    name: str
    folder: Path | None


def run_id(group: str, config_hash: str, stage: str) -> str:
    """The W&B run id of one method's stage within a group: the same on every publish."""
    return f"{config_hash}-{stage}-{hashlib.sha256(group.encode()).hexdigest()[:8]}"


def chunks(items: Sequence[Any], size: int = MAX_ROWS) -> list[Sequence[Any]]:
    """``items`` (rows, or a DataFrame) cut into consecutive pieces of at most ``size`` (at least one)."""
    return [items[i : i + size] for i in range(0, max(len(items), 1), size)]


def rows_of(df: pd.DataFrame) -> Rows:
    """A DataFrame's rows as table rows (missing values as None)."""
    return [[plain(v) for v in row] for row in df.itertuples(index=False)]


def parts(key: str, columns: Sequence[str], rows: Rows, size: int = MAX_ROWS) -> Tables:
    """A table as ``<key>/part<i>`` pieces of at most ``size`` rows (one W&B table is cut at 10,000)."""
    return {f"{key}/part{i}": (columns, list(part)) for i, part in enumerate(chunks(rows, size))}


@contextmanager
def staging_in(folder: Path | None) -> Iterator[None]:
    """Stage artifact files (tables) inside the offline run folder, not in the user-wide W&B data dir,
    so deleting a superseded folder deletes its files and ``wandb sync`` still finds the current ones."""
    if folder is None:
        yield
        return
    before = os.environ.get("WANDB_DATA_DIR")
    os.environ["WANDB_DATA_DIR"] = str(folder / "staging")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("WANDB_DATA_DIR", None)
        else:
            os.environ["WANDB_DATA_DIR"] = before


@dataclass
class PublishFolder:
    """A publish folder this publish holds: the complete offline folder of each run id, as its marker
    lists them (``runs``: run id → folder name under ``wandb/``)."""

    path: Path
    current: dict[str, str]

    def commit(self, published: Published) -> None:
        """Make ``published``'s folder the one of its id — the marker first (atomically), then the
        folder it replaces is deleted: a kill in between leaves either the old run or the new one."""
        if published.folder is None:
            return
        replaced = self.current.get(published.run_id)
        self.current[published.run_id] = published.folder.name
        write_marker(self.path, PROG, ENTRIES, runs=self.current)
        if replaced not in (None, published.folder.name):
            shutil.rmtree(published.folder.parent / replaced, ignore_errors=True)


@contextmanager
def holding(directory: Path) -> Iterator[PublishFolder]:
    """``directory`` (new, empty or an earlier publish's, :func:`claim_output`) held by this publish
    alone — another publish of it is refused (:class:`OutputRefused`) — with the offline folders that
    no completed publish listed (a killed publish's) deleted first."""
    path = claim_output(directory, PROG)
    path.mkdir(parents=True, exist_ok=True)
    lock = WriterLock(path / OUTPUT_LOCK, this_process())
    try:
        lock.acquire()
    except LockHeld as held:
        raise OutputRefused(f"refusing --dir {directory}: another apm-publish is writing it "
                            f"({holder_line(held.holder)})") from None
    try:
        claim_output(directory, PROG)
        marker = read_marker(path) or {}
        current = {str(k): str(v) for k, v in (marker.get("runs") or {}).items()}
        write_marker(path, PROG, ENTRIES, runs=current)
        for litter in (path / "wandb").glob("offline-run-*"):
            if litter.name not in current.values():
                shutil.rmtree(litter, ignore_errors=True)
        yield PublishFolder(path, current)
    finally:
        lock.release()


def _cell(wandb: Any, value: Any) -> Any:
    return wandb.Image(value.image, caption=value.caption, file_type="jpg") if isinstance(value, Strip) else value


def write_run(spec: RunSpec, project: str, entity: str | None = None, mode: str = "offline") -> Published:
    """Write one W&B run, everything in its summary (offline: into a fresh folder)."""
    wandb = importlib.import_module("wandb")
    if spec.directory is not None:
        spec.directory.mkdir(parents=True, exist_ok=True)
    run = wandb.init(
        mode=mode, project=project, entity=entity, id=spec.run_id, name=spec.name, group=spec.group,
        job_type=spec.job_type, tags=list(spec.tags), dir=str(spec.directory) if spec.directory else None,
        resume="allow" if mode == "online" else None, reinit="finish_previous",
    )
    folder = Path(run.settings.sync_dir) if mode == "offline" else None
    with staging_in(folder):
        run.config.update(spec.config, allow_val_change=True)
        for key, (columns, rows) in spec.tables.items():
            run.summary[key] = wandb.Table(columns=list(columns), data=[[_cell(wandb, v) for v in r] for r in rows])
        for key, path in spec.images.items():
            run.summary[key] = wandb.Image(str(path))
        run.summary.update(spec.summary)
        run.finish()
    return Published(spec.run_id, spec.job_type, spec.name, folder)


def release_of(m: Method, loaded: dict[str, Release | None]) -> Release | None:
    """The method's release (``config.json``'s ``dataset.root``), loaded once per root without
    probing videos; None when the run dir has no config or the release cannot be read."""
    root = ((m.saved.get("config") or {}).get("dataset") or {}).get("root")
    if not root:
        return None
    if root not in loaded:
        try:
            loaded[root] = load_release(root, check_videos=False)
        except (ReleaseError, OSError) as e:
            warnings.warn(f"{root}: release not readable ({str(e).splitlines()[0]}); instance tables of "
                          f"{m.run_dir} have no questions and no frames", stacklevel=2)
            loaded[root] = None
    return loaded[root]


def thumbnails_of(m: Method, release: Release | None, cache_dir: str | None) -> Thumbnails | None:
    """Thumbnails from the frame cache the run used (its sampling settings), or ``cache_dir``."""
    frames = (m.saved.get("config") or {}).get("frames")
    if release is None or not frames:
        return None
    cache = FrameCache(cache_dir or frames.get("cache_dir"), frames["fps"], frames["max_side"], frames["jpeg_quality"])
    videos = {(t.trajectory_id, s.key): s.video for t in release.trajectories for s in t.sessions}
    return Thumbnails(cache, videos)


def publish_dir(m: Method, opts: PublishOptions) -> Path:
    """Where the method's runs go: ``--dir``, else ``<run dir>/publish``."""
    return opts.directory or m.run_dir / "publish"


def method_runs(m: Method, opts: PublishOptions, releases: dict[str, Release | None], directory: Path) -> list[RunSpec]:
    """The W&B runs of one method, into ``directory``: ``run`` and ``reduce``, and ``judge`` when it has
    judgements."""
    group, config = opts.group or default_group(m.run_dir), method_config(m)
    release = release_of(m, releases)
    thumbs = thumbnails_of(m, release, opts.cache_dir)
    common = {"name": config["method"], "group": group, "config": config, "tags": method_tags(config),
              "directory": directory}
    instances = instance_rows(m, candidates_of(release), thumbs, opts.all_frames)
    shown = sum(row[COLUMNS.index("frames")] is not None for row in instances)
    specs = [RunSpec(run_id(group, m.config_hash, "run"), job_type="run",
                     summary={**run_summary(m), "thumbnails": shown},
                     tables=parts("instances", COLUMNS, instances, opts.table_rows), **common)]
    if len(m.judgements):
        specs.append(RunSpec(run_id(group, m.config_hash, "judge"), job_type="judge", summary=judge_summary(m),
                             tables=parts("judgements", JUDGEMENT_COLUMNS, judgement_rows(m), opts.table_rows),
                             **common))
    specs.append(RunSpec(run_id(group, m.config_hash, "reduce"), job_type="reduce", summary=metric_summary(m),
                         tables=parts("scores", SCORE_COLUMNS, rows_of(m.scores[SCORE_COLUMNS]), opts.table_rows),
                         **common))
    return specs


def publish(paths: Iterable[str | Path], opts: PublishOptions) -> list[Published]:
    """Publish every method found at or below ``paths``, holding each publish folder (:func:`holding`)
    throughout; a config hash in two run dirs is refused before anything is written (their W&B runs
    would overwrite each other)."""
    if opts.directory is not None:
        claim_output(opts.directory, PROG)  # before the records are read: a refusal comes at once
    methods = [m for d in run_dirs(paths) for m in read_methods(d, opts.judge, opts.rubric, opts.seed, opts.bootstrap)]
    homes: dict[str, Path] = {}
    for m in methods:
        if homes.setdefault(m.config_hash, m.run_dir) != m.run_dir:
            raise ValueError(f"config {m.config_hash} is in two run dirs: {homes[m.config_hash]} and {m.run_dir}")
    releases: dict[str, Release | None] = {}
    published = []
    with ExitStack() as stack:
        held = {d: stack.enter_context(holding(d)) for d in sorted({publish_dir(m, opts) for m in methods})}
        for m in methods:
            folder = held[publish_dir(m, opts)]
            for spec in method_runs(m, opts, releases, folder.path):
                published.append(write_run(spec, opts.project, opts.entity, opts.mode))
                folder.commit(published[-1])
    return published
