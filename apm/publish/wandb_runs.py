"""W&B runs built from the records, idempotently (docs/publish.md).

Each method (config hash) gets one W&B run per stage — ``run`` (the per-instance table), ``judge``
(the judgements, when there are any) and ``reduce`` (the paper's metrics in its summary) — with a
deterministic id ``<config hash>-<stage>-<group digest>``, named ``<method> · <stage>`` (``reduce``: the
method's row name alone, :func:`run_name`), each logging
its stage's output as an artifact and using the artifacts it was made from (records → judgements →
scores). All of a call's runs go into one folder (:func:`publish_dir`: ``--dir``, else
``$WANDB_DIR/apm-publish``, else the sweep's ``publish/``). Everything goes into the run's summary
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
import shlex
import shutil
import tempfile
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

import pandas as pd

from apm.data.model import Release
from apm.data.problems import ReleaseError
from apm.data.release import load_release
from apm.live.progress import Progress, Unit, stage_progress
from apm.publish.axes import (
    joined,
    judge_summary,
    method_config,
    method_tags,
    metric_summary,
    release_group,
)
from apm.publish.dashboard import REPORT_FILE
from apm.publish.instances import (
    COLUMNS,
    JUDGEMENT_COLUMNS,
    candidates_of,
    column,
    instance_rows,
    judgement_rows,
    plain,
    run_summary,
)
from apm.publish.source import Method, read_methods, sweep_root
from apm.publish.thumbnails import Strip, Thumbnails
from apm.records.atomic import OUTPUT_LOCK, OutputRefused, claim_output, read_marker, write_marker
from apm.records.lock import LockHeld, WriterLock, held_elsewhere, holder_line, read_holder, this_process
from apm.records.redact import redact_data, register_config_secrets
from apm.records.rundir import RunDir
from apm.records.wandb_identity import quiet
from apm.reduce.load import check_preference, run_dirs
from apm.reduce.scores import SCORE_COLUMNS
from apm.video.cache import FrameCache
from apm.video.thumbnails import run_sampling

Rows = list[list[Any]]
Tables = dict[str, tuple[Sequence[str], Rows]]
PROG = "apm-publish"
ENTRIES = ("wandb", REPORT_FILE)
"""What ``apm-publish`` writes into its folder (besides its marker and lock)."""
MAX_ROWS = 10_000
"""wandb.Table silently truncates past this many rows: longer tables are logged in parts."""


@dataclass(frozen=True)
class PublishOptions:
    """Where and how ``apm-publish`` writes, and how it reads (as ``apm-reduce`` does)."""

    project: str = "apm-bench"
    entity: str | None = None
    group: str | None = None
    """The sweep; default: the release the method ran on (:func:`~apm.publish.axes.release_group`)."""
    mode: str = "offline"
    """``offline`` (then ``wandb sync``) or ``online``."""
    directory: Path | None = None
    """Offline runs go to ``<directory>/wandb/``; default :func:`publish_dir`."""
    judge: str | None = None
    rubric: str | None = None
    seed: int = 0
    bootstrap: int = 1000
    all_frames: bool = False
    """Thumbnails for every instance, not only wrong or failed ones."""
    cache_dir: str | None = None
    """Frame cache to read thumbnails from; default: the run's ``frames.cache_dir``."""
    table_rows: int = MAX_ROWS
    verbose: bool = False
    """wandb's own ``wandb:`` lines on the terminal (silent otherwise)."""


@dataclass(frozen=True)
class ArtifactSpec:
    """A W&B artifact: its name and type, files copied in (name in the artifact → file) and texts
    written in (name → content); the same content gives the same digest, so the same version."""

    name: str
    type: str
    files: dict[str, Path] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RunSpec:
    """One W&B run to write: identity, config, tags, summary values, tables and images."""

    run_id: str
    name: str
    group: str
    job_type: str
    directory: Path
    """The publish folder (offline runs go to its ``wandb/``)."""
    config: dict[str, Any] = field(default_factory=dict)
    tags: Sequence[str] = ()
    summary: dict[str, Any] = field(default_factory=dict)
    tables: Tables = field(default_factory=dict)
    images: dict[str, Path] = field(default_factory=dict)
    uses: Sequence[ArtifactSpec] = ()
    """The artifacts this run was made from (its inputs in W&B's lineage)."""
    logs: Sequence[ArtifactSpec] = ()
    """The artifacts this run made."""


@dataclass(frozen=True)
class Published:
    """A W&B run written: its id, stage, name, (offline) folder, group and publish folder."""

    run_id: str
    job_type: str
    name: str
    folder: Path | None
    group: str
    home: Path


def run_id(group: str, config_hash: str, stage: str) -> str:
    """The W&B run id of one method's stage within a group: the same on every publish."""
    return f"{config_hash}-{stage}-{hashlib.sha256(group.encode()).hexdigest()[:8]}"


def run_name(method: str, stage: str) -> str:
    """A stage run's name: the ``reduce`` run, the one the Report's tables show, is named as the paper
    names the method's row; the others ``<method> · <stage>``."""
    return method if stage == "reduce" else f"{method} · {stage}"


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
    lock_path = Path(directory).expanduser().resolve() / OUTPUT_LOCK
    try:
        path = claim_output(directory, PROG)
    except OutputRefused:
        if held_elsewhere(lock_path):  # a publish writing it (its marker or a file half written): say so
            raise _busy(directory, read_holder(lock_path)) from None
        raise
    path.mkdir(parents=True, exist_ok=True)
    lock = WriterLock(path / OUTPUT_LOCK, this_process())
    try:
        lock.acquire()
    except LockHeld as held:
        raise _busy(directory, held.holder) from None
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


def _busy(directory: Path, holder: dict[str, Any] | None) -> OutputRefused:
    """The refusal of a publish folder another apm-publish holds."""
    return OutputRefused(f"refusing --dir {directory}: another apm-publish is writing it ({holder_line(holder)})")


def _cell(wandb: Any, value: Any, folder: Path) -> Any:
    """A table cell for W&B: a strip as a ``wandb.Image`` of its JPEG as it is (written to ``folder``,
    copied by W&B; its pixels not kept in memory), any other value as it is."""
    if not isinstance(value, Strip):
        return value
    path = folder / f"{hashlib.sha256(value.jpeg).hexdigest()}.jpg"
    path.write_bytes(value.jpeg)
    image = wandb.Image(str(path), caption=value.caption)
    image._free_ram()  # wandb.Image keeps the decoded pixels otherwise (wandb 0.31): thousands per table
    return image


Staged = dict[str, dict[str, Path]]
"""The files of each artifact a publish has staged: artifact name → (name in it → its staged copy)."""


def artifact_of(wandb: Any, spec: ArtifactSpec, staged: Staged, folder: Path) -> Any:
    """The ``wandb.Artifact`` of ``spec``, its files and texts in it. Files of an artifact this publish
    has already staged (a method's records, used by its judge and reduce runs) are not copied again:
    each is a hard link, in ``folder``, to its staged copy (same bytes, same digest, written once), so
    every run folder stays whole on its own."""
    artifact = wandb.Artifact(spec.name, type=spec.type)
    earlier = staged.get(spec.name, {})
    for name, path in spec.files.items():
        if name in earlier:
            artifact.add_file(str(linked(earlier[name], folder / spec.name / name)), name=name, policy="immutable")
        else:
            artifact.add_file(str(path), name=name)
    for name, text in spec.texts.items():
        with artifact.new_file(name, encoding="utf-8") as f:
            f.write(text)
    if spec.files and spec.name not in staged:
        staged[spec.name] = {
            e.path: Path(e.local_path)
            for e in artifact.manifest.entries.values()
            if e.path in spec.files and e.local_path
        }
    return artifact


def linked(source: Path, link: Path) -> Path:
    """``link``, a hard link to ``source`` (a copy where the file system has none)."""
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    try:
        os.link(source, link)
    except OSError:
        shutil.copyfile(source, link)
    return link


def use(run: Any, artifact: Any, mode: str) -> None:
    """Declare ``artifact`` an input of ``run``. Online that is ``use_artifact``; offline wandb refuses
    it, so the same record ``use_artifact`` writes for a new artifact is written (log it, used after
    commit: ``wandb sync`` then records the use; wandb 0.31, pinned in setup.cfg)."""
    if mode == "online":
        run.use_artifact(artifact)
    else:
        run._log_artifact(artifact, is_user_created=True, use_after_commit=True)


def write_run(spec: RunSpec, opts: PublishOptions, staged: Staged) -> Published:
    """Write one W&B run, everything in its summary (offline: into a fresh folder), silently unless
    ``opts.verbose``; artifacts a run of this publish staged before (``staged``) are linked, not copied
    (:func:`artifact_of`)."""
    wandb, mode = importlib.import_module("wandb"), opts.mode
    spec.directory.mkdir(parents=True, exist_ok=True)
    run = wandb.init(
        mode=mode,
        project=opts.project,
        entity=opts.entity,
        id=spec.run_id,
        name=spec.name,
        group=spec.group,
        job_type=spec.job_type,
        tags=list(spec.tags),
        dir=str(spec.directory),
        resume="allow" if mode == "online" else None,
        reinit="finish_previous",
        settings=quiet(wandb, opts.verbose),
    )
    folder = Path(run.settings.sync_dir) if mode == "offline" else None
    register_config_secrets(spec.config)  # the keys its engines read, masked in every value below
    local = folder or Path(run.settings.files_dir).parent  # where this run's own files go
    with staging_in(folder), tempfile.TemporaryDirectory(dir=local) as strips:
        run.config.update(redact_data(spec.config), allow_val_change=True)
        for key, (columns, rows) in spec.tables.items():
            run.summary[key] = wandb.Table(
                columns=list(columns), data=[[_cell(wandb, v, Path(strips)) for v in redact_data(r)] for r in rows]
            )
        for key, path in spec.images.items():
            run.summary[key] = wandb.Image(str(path))
        run.summary.update(redact_data(spec.summary))
        for used in spec.uses:
            use(run, artifact_of(wandb, used, staged, local / "linked"), mode)
        for made in spec.logs:
            run.log_artifact(artifact_of(wandb, made, staged, local / "linked"))
        run.finish()
    return Published(spec.run_id, spec.job_type, spec.name, folder, spec.group, spec.directory)


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
            warnings.warn(
                f"{root}: release not readable ({str(e).splitlines()[0]}); instance tables of "
                f"{m.run_dir} have no questions and no frames",
                stacklevel=2,
            )
            loaded[root] = None
    return loaded[root]


def thumbnails_of(m: Method, release: Release | None, cache_dir: str | None) -> Thumbnails | None:
    """Thumbnails from the frame cache the run used (its sampling settings), or ``cache_dir``."""
    frames = (m.saved.get("config") or {}).get("frames")
    if release is None or not frames:
        return None
    cache = FrameCache(*run_sampling(frames, cache_dir or None))
    videos = {(t.trajectory_id, s.key): s.video for t in release.trajectories for s in t.sessions}
    return Thumbnails(cache, videos)


def publish_dir(run_dir: Path, opts: PublishOptions) -> Path:
    """Where a run dir's W&B runs go: ``--dir``, else ``$WANDB_DIR/apm-publish``, else the ``publish``
    folder of its sweep's root (:func:`~apm.publish.source.sweep_root`: the output root it was run into,
    or the run dir itself)."""
    if opts.directory is not None:
        return opts.directory
    home = os.environ.get("WANDB_DIR")
    return Path(home) / "apm-publish" if home else RunDir(sweep_root(run_dir)).publish


def sync_command(published: Iterable[Published]) -> str | None:
    """The one ``wandb sync`` command that uploads exactly the offline folders written (None: none)."""
    folders = sorted(str(p.folder) for p in published if p.folder is not None)
    return " ".join(["wandb", "sync", *map(shlex.quote, folders)]) if folders else None


def files_in(folder: Path, pattern: str) -> dict[str, Path]:
    """The files of ``folder`` matching ``pattern``, by their path below it."""
    return {p.relative_to(folder).as_posix(): p for p in sorted(folder.glob(pattern)) if p.is_file()}


def line_files(run_dir: Path, kind: str) -> dict[str, Path]:
    """The run dir's ``<kind>/*.jsonl`` files (:meth:`RunDir.files`), by their path below it."""
    run = RunDir(run_dir)
    return {p.relative_to(run.path).as_posix(): p for p in run.files(kind) if p.is_file()}


def records_artifact(m: Method) -> ArtifactSpec:
    """The method's records: its run dir's ``records/*.jsonl`` as they are (the source of truth)."""
    return ArtifactSpec(f"records-{m.config_hash}", "records", line_files(m.run_dir, "records"))


def judgements_artifact(m: Method) -> ArtifactSpec:
    """The method's judgements: its run dir's ``judgements/*.jsonl`` as they are."""
    return ArtifactSpec(f"judgements-{m.config_hash}", "judgements", line_files(m.run_dir, "judgements"))


def inputs_of(m: Method) -> list[ArtifactSpec]:
    """What the method's scores are made from: its records, and its judgements when it has any."""
    return [records_artifact(m), *([judgements_artifact(m)] if len(m.judgements) else [])]


def method_runs(m: Method, opts: PublishOptions, releases: dict[str, Release | None], directory: Path) -> list[RunSpec]:
    """The W&B runs of one method, into ``directory``: ``run`` and ``reduce``, and ``judge`` when it has
    judgements."""
    release = release_of(m, releases)
    instances = instance_rows(m, candidates_of(release), thumbnails_of(m, release, opts.cache_dir), opts.all_frames)
    group, config = opts.group or release_group(m), method_config(m, joined(column(instances, "prompt_version")))

    def stage(job_type: str, **parts_of_it: Any) -> RunSpec:
        return RunSpec(
            run_id(group, m.config_hash, job_type),
            run_name(config["method"], job_type),
            group,
            job_type,
            directory,
            config,
            method_tags(config),
            **parts_of_it,
        )

    records = records_artifact(m)
    specs = [
        stage(
            "run",
            summary=run_summary(instances),
            tables=parts("instances", COLUMNS, instances, opts.table_rows),
            logs=[records],
        )
    ]
    if len(m.judgements):
        specs.append(
            stage(
                "judge",
                summary=judge_summary(m),
                tables=parts("judgements", JUDGEMENT_COLUMNS, judgement_rows(m), opts.table_rows),
                uses=[records],
                logs=[judgements_artifact(m)],
            )
        )
    scores = ArtifactSpec(
        f"scores-{m.config_hash}", "scores", texts={"scores.csv": m.scores[SCORE_COLUMNS].to_csv(index=False)}
    )
    specs.append(
        stage(
            "reduce",
            summary=metric_summary(m),
            tables=parts("scores", SCORE_COLUMNS, rows_of(m.scores[SCORE_COLUMNS]), opts.table_rows),
            uses=inputs_of(m),
            logs=[scores],
        )
    )
    return specs


def read_all(paths: Iterable[str | Path], opts: PublishOptions) -> list[Method]:
    """Every method found at or below ``paths``; the publish folders are claimed first (a refusal comes
    before any record is read) and a config hash in two run dirs is refused (their W&B runs would
    overwrite each other), as is a ``--judge`` / ``--rubric`` no judgement has (:func:`check_preference`)."""
    found = run_dirs(paths)
    for directory in sorted({publish_dir(d, opts) for d in found}):
        claim_output(directory, PROG)
    methods = [m for d in found for m in read_methods(d, opts.judge, opts.rubric, opts.seed, opts.bootstrap)]
    homes: dict[str, Path] = {}
    for m in methods:
        if homes.setdefault(m.config_hash, m.run_dir) != m.run_dir:
            raise ValueError(f"config {m.config_hash} is in two run dirs: {homes[m.config_hash]} and {m.run_dir}")
    if methods:
        check_preference(pd.concat([m.judgements for m in methods], ignore_index=True), opts.judge, opts.rubric)
    return methods


def publish_methods(methods: Sequence[Method], opts: PublishOptions, extra: Sequence[RunSpec] = ()) -> list[Published]:
    """Write the W&B runs of ``methods`` and then ``extra`` (each into its ``directory``), holding every
    publish folder (:func:`holding`) throughout."""
    releases: dict[str, Release | None] = {}
    published: list[Published] = []
    staged: Staged = {}
    with ExitStack() as stack:
        wanted = {publish_dir(m.run_dir, opts) for m in methods} | {s.directory for s in extra}
        held = {d.resolve(): stack.enter_context(holding(d)) for d in sorted(wanted)}
        homes = {m.run_dir: held[publish_dir(m.run_dir, opts).resolve()].path for m in methods}
        progress = stack.enter_context(closing(stage_progress(len(methods), PROG, Unit("methods"))))
        specs = _counted_runs(methods, opts, releases, homes, progress)
        for spec in chain(specs, extra):
            published.append(write_run(spec, opts, staged))
            held[spec.directory.resolve()].commit(published[-1])
    return published


def _counted_runs(methods: Sequence[Method], opts: PublishOptions, releases: dict[str, Release | None],
                  homes: dict[Path, Path], progress: Progress) -> Iterator[RunSpec]:
    """Each method's W&B runs (:func:`method_runs`, into its home folder), the method counted done in
    ``progress`` once the last of them is written."""
    for m in methods:
        yield from method_runs(m, opts, releases, homes[m.run_dir])
        progress.update(1)


def publish(paths: Iterable[str | Path], opts: PublishOptions) -> list[Published]:
    """Publish every method found at or below ``paths`` (:func:`read_all`, :func:`publish_methods`)."""
    return publish_methods(read_all(paths, opts), opts)
