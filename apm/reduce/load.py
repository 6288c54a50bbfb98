"""Read a run's records, judgements and memory lines (JSONL) into typed, de-duplicated DataFrames.

A path may be one run dir or any folder above several (a sweep): every ``records/*.jsonl``,
``judgements/*.jsonl`` and ``memory/*.jsonl`` below it is read, so shards of a config concatenate;
for duplicate keys the newest line wins (greatest ``revision``, then ``written_ns``), whatever file it is in,
chosen by :mod:`apm.records.select` on the integers as written.
"""

from __future__ import annotations

import difflib
import json
import multiprocessing
import operator
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import numpy as np
import orjson
import pandas as pd
from pandas.api.types import union_categoricals

from apm.live.progress import Unit, counted, stage_progress
from apm.records.declaration import Declaration, from_record, method_kind
from apm.records.identity import identity_of
from apm.records.judging import judged, response_digest, sorted_json, verifies
from apm.records.lines import Kind, Skipped, TypedLines, read_typed
from apm.records.model import InstanceRecord, JudgementLine, MemoryLine, RunBlock, named
from apm.records.rundir import RunDir, find_runs
from apm.records.select import REVISION, STAMP, newest_rows, position
from apm.reduce.coverage import PlanFile, read_plans

METHOD = ["dataset", "memory", "backbone", "config_hash"]
"""Columns of a method: its config hash is its identity; the display names ride along (a hash fixes them)."""

RELEASE = "release_fingerprint"
"""Column of the release a line's run answered (its ``run`` block, else the run dir's ``config.json``)."""

CONFIG = ["memory_config", "backbone_config", "memory_variant", "backbone_variant", "settings", "method_family",
          "tag", "ceiling", "streaming", "persistent", "representation"]
"""Per record, the method's config-group choices; the settings differing from their defaults
(``recent_frames=8, …``; the summary writer, ``writer=<choice>``, and its settings, ``writer.…``,
count as the memory's; ``frames.…`` and ``generation.…`` are the run's ``settings``); the method's
``method_family``, ``tag`` and ``ceiling`` (``True``/``False``) from its classes' declarations
(:func:`apm.records.declaration.method_kind`; family empty when undeclared); what its memory
declares it supports (``True``/``False``; empty if undeclared); and the memory representation it
declares (``kv_cache``…, :data:`apm.records.declaration.REPRESENTATIONS`; empty for none)."""

IDENTITY = "identity"
"""Column of what made a line: its run block's code and model (:func:`apm.records.identity.identity_of`)."""

_CATEGORICAL = METHOD + [RELEASE, IDENTITY] + CONFIG + [
    "trajectory_id", "candidate_id", "task", "family", "polarity", "parse_status", "decision", "answer",
    "judge",
]
_BOOLEAN = ["correct", "gate_pass", "evidence_available"]

Run = dict[str, Any]
RunField = tuple[str, Callable[[Run], Any]]
"""A column derived from a line's ``run`` block (computed once per distinct block of a file)."""


class Field(NamedTuple):
    """A column of a typed line (:func:`apm.records.lines.read_typed`) and the line's fields it reads
    (``outer.inner``: a block's field): picked (``at``: a field, or ``(outer, inner)``, the field ``inner``
    of a block, a typed block's attribute or a plain object's key, else None) or computed (``get``, a
    function of the line)."""

    name: str
    reads: tuple[str, ...]
    at: tuple[str, ...] = ()
    get: Callable[[Any], Any] | None = None


def _field(model: type, name: str, column: str | None = None) -> Field:
    """The column of a field of a line model (``outer.inner``: one level down), checked against the model
    (:func:`apm.records.model.named`) when this module loads; named ``column``, else the field's last part."""
    path = named(model, name)[0]
    outer, _, inner = path.partition(".")
    return Field(column or inner or outer, (path,), (outer, inner) if inner else (outer,))


def _response_digest(line: Any) -> str | None:
    """The judge stage's digest of a record it judges (gate-passing adaptive), else None."""
    output = line.output
    digested = isinstance(output, str) and judged(line.task, line.error, line.gate_pass)
    return response_digest(output) if digested else None


def _choice(group: str) -> Callable[[Run], Any]:
    """The run's config-group choice (``none``), else its display name (runs that predate choices)."""
    return lambda run: (run.get("choices") or {}).get(group) or run.get(group)


def _variant(*groups: str, chosen: str | None = None, keep_prefix: bool = False) -> Callable[[Run], str]:
    """The run's settings of ``groups`` that differ from their defaults: sorted ``key=value`` pairs,
    the first group's prefix dropped unless ``keep_prefix`` (``memory.recent_frames`` →
    ``recent_frames``), after ``<chosen>=<choice>`` when the config chose that group (the writer)."""
    prefix = "" if keep_prefix else f"{groups[0]}."

    def pairs(run: Run) -> str:
        overrides = run.get("overrides") or {}
        mine = sorted(k for k in overrides if k.split(".", 1)[0] in groups)
        choice = (run.get("choices") or {}).get(chosen) if chosen else None
        picked = [f"{chosen}={choice}"] if choice else []
        return ", ".join(picked + [f"{k.removeprefix(prefix)}={overrides[k]}" for k in mine])

    return pairs


def _declarations(run: Run) -> tuple[Declaration | None, Declaration | None]:
    """What the run's memory and backbone declare (None for either when undeclared or older)."""
    block = run.get("declarations") or {}
    return from_record(block.get("memory")), from_record(block.get("backbone"))


def _kind(field: str) -> Callable[[Run], str]:
    """The method's ``family`` or ``tag`` (:func:`method_kind`)."""
    return lambda run: str(getattr(method_kind(*_declarations(run)), field))


def _capability(name: str) -> Callable[[Run], str]:
    """A capability the run's memory declares (its declaration, else ``run.capabilities`` of older
    runs), as ``True``/``False``/``''``."""

    def capability(run: Run) -> str:
        memory = _declarations(run)[0]
        value = getattr(memory, name) if memory else (run.get("capabilities") or {}).get(name)
        return "" if value is None else str(bool(value))

    return capability


def _representation(run: Run) -> str:
    """The memory representation the run's memory declares ('' when none, undeclared or older)."""
    memory = _declarations(run)[0]
    return memory.representation if memory else ""


RUN_FIELDS: list[RunField] = [(c, operator.itemgetter(c)) for c in named(RunBlock, *METHOD)] + [
    (RELEASE, lambda run: run.get(RELEASE)), (IDENTITY, identity_of),
    ("memory_config", _choice("memory")), ("backbone_config", _choice("backbone")),
    ("memory_variant", _variant("memory", "writer", chosen="writer")), ("backbone_variant", _variant("backbone")),
    ("settings", _variant("frames", "generation", keep_prefix=True)),
    ("method_family", _kind("family")), ("tag", _kind("tag")), ("ceiling", _kind("ceiling")),
    ("streaming", _capability("streaming")), ("persistent", _capability("persistent")),
    ("representation", _representation),
]
"""The columns every kind of line gets from its ``run`` block (checked by :func:`apm.records.lines.read_typed`:
its names are non-empty strings, its parts objects)."""


def _record(*names: str) -> list[Field]:
    return [_field(InstanceRecord, name) for name in names]


_DIGESTED = ("output", "task", "error", "gate_pass")
"""What :func:`_response_digest` reads."""


RECORD_FIELDS: list[Field] = _record(
    "key", "trajectory_id", "candidate_id", "task", "family", "polarity", "evidence_available",
    "original_candidate_id", "parse_status", "decision", "answer", "correct", "gate_pass", "error",
    "written_ns", "revision", "latency.ttft_s", "latency.total_s", "latency.rtf",
) + [_field(InstanceRecord, "latency.mode", "latency_mode"),
     Field("response_sha256", named(InstanceRecord, *_DIGESTED), get=_response_digest)]
"""What scoring needs from a record, after :data:`RUN_FIELDS` (``response_sha256`` is computed, for judged
records only); every field named is checked against the record model
(:class:`apm.records.model.InstanceRecord`) at import."""

DETAIL_FIELDS: list[Field] = _record(
    "day_id", "session_id", "probe_id", "probe_time", "correct_option", "output", "parse_error",
    "frames", "prompt_version", "prompt_sha256", "prompt", "memory_bytes", "attempts", "latency.prep_s",
    "latency.prefix_s",
) + [_field(InstanceRecord, "tokens.prompt", "prompt_tokens"),
     _field(InstanceRecord, "tokens.completion", "completion_tokens")]
"""What a person drilling into instances also wants (the notebook, the W&B instance tables); ``prompt``
names the kept text parts (:func:`apm.records.prompts.sent_text` rebuilds what was sent)."""

VERIFIED = "verified"
"""``verified``: the judgement line's content digest matches its fields (:func:`apm.records.judging.verifies`)."""
JUDGEMENT_FIELDS: list[Field] = [
    _field(JudgementLine, c) for c in (
        "key", "judge", "judge_model", "rubric_version", "response_sha256", "status", "failure", "score",
        "written_ns", "revision",
    )
]
"""What scoring needs from a judgement line, after :data:`RUN_FIELDS` (and :data:`VERIFIED`, computed); every
field named is checked against the judgement line model (:class:`apm.records.model.JudgementLine`)."""
MEMORY_FIELDS: list[Field] = [
    _field(MemoryLine, c)
    for c in ("trajectory_id", "session_index", "bytes", "fast_weight_bytes", "prior_hours", "update_s", "error",
              "written_ns", "revision")
]


def _files(paths: Iterable[str | Path], kind: str) -> list[Path]:
    """Every ``<kind>/*.jsonl`` of the runs at or below the given paths (:func:`find_runs`), in order."""
    return [f for run in find_runs(paths).runs for f in run.files(kind)]


def _read_file(path: Path, kind: Kind, fields: Sequence[Field]) -> tuple[pd.DataFrame, list[Skipped]]:
    """One file's typed frame (:func:`_frame`, :func:`_typed`; a run block naming no release names its run
    dir's, :func:`_saved_release`) and the lines :func:`apm.records.lines.read_typed` left out of it."""
    skipped: list[Skipped] = []
    reads = tuple(dict.fromkeys(name for f in fields for name in f.reads))
    typed = read_typed(path, kind, reads, skipped, keep_raw=kind == "judgements")
    return _typed(_frame(typed, fields, lambda: _saved_release(path))), skipped


FileJob = tuple[Path, Kind, Sequence[Field]]
WORKERS = 2
"""Worker processes ``apm-reduce`` reads a large load's files in (:func:`load_runs`' ``workers``)."""
WORKER_START = "forkserver"
"""How the workers start: from a clean server process, never by forking the caller, whose other threads may
hold a lock at the fork that the child then waits on forever (as :data:`apm.video.cache.WORKER_START`)."""
PARALLEL_BYTES = 32 << 20
"""The size of a load's files from which workers read them (below it, starting the workers costs more than
they save)."""


def _read_files(jobs: Sequence[FileJob], workers: int = 1) -> Iterator[tuple[pd.DataFrame, list[Skipped]]]:
    """Each job's :func:`_read_file`, in the jobs' order: in ``workers`` worker processes (at most one per
    CPU, started as :data:`WORKER_START` says) when there are several files of :data:`PARALLEL_BYTES` or
    more in all, else here."""
    workers = min(workers, len(os.sched_getaffinity(0)), len(jobs))
    if workers < 2 or sum(path.stat().st_size for path, _, _ in jobs if path.is_file()) < PARALLEL_BYTES:
        yield from (_read_file(*job) for job in jobs)
        return
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(WORKER_START)) as pool:
        yield from pool.map(_read_file, *zip(*jobs))


def _frame(typed: TypedLines, fields: Sequence[Field], saved_release: Callable[[], str | None]) -> pd.DataFrame:
    """The run block's columns (derived once per distinct block, :func:`_per_block`; a block naming no release
    gets ``saved_release()``) and the fields' columns (:func:`_columns`)."""
    run_of = np.asarray(typed.run_of, dtype=np.intp)
    columns: dict[str, Any] = {}
    for name, get in RUN_FIELDS:
        derived = np.empty(len(typed.runs), dtype=object)
        for i, run in enumerate(typed.runs):
            derived[i] = get(run)  # one by one: a list value is a value, never broadcast
        if name == RELEASE and any(value is None for value in derived):
            saved = saved_release()
            derived[[value is None for value in derived]] = saved
        columns[name] = _per_block(derived, run_of)
    columns |= {name: _order_column(values) if name in (REVISION, STAMP) else values
                for name, values in _columns(typed.lines, fields).items()}
    if typed.raw:
        run_texts = [sorted_json(run) for run in typed.runs]  # each block's once, for every line's digest
        columns[VERIFIED] = [_verifies(raw, run_texts[typed.written_run(i)]) for i, raw in enumerate(typed.raw)]
    return pd.DataFrame(columns)


def _order_column(values: Sequence[int | None]) -> np.ndarray:
    """A ``revision`` or ``written_ns`` column as the integers :mod:`apm.records.select` compares (null: 0),
    never through float64 (a column of integers and nulls would become one)."""
    return np.fromiter(map(position, values), dtype=np.uint64, count=len(values))


def _columns(lines: list[Any], fields: Sequence[Field]) -> dict[str, list[Any]]:
    """Each field's column over ``lines``, in the fields' order: a picked one by one attribute read per line
    (:func:`_inner` for a block's field; fast on 1M rows), a computed one by its function."""
    outers = dict.fromkeys(f.at[0] for f in fields if f.at)
    picked: dict[tuple[str, ...], list[Any]] = {(o,): list(map(operator.attrgetter(o), lines)) for o in outers}
    for f in fields:
        if len(f.at) == 2:
            picked[f.at] = _inner(picked[f.at[:1]], f.at[1])
    computed = {f.name: list(map(f.get, lines)) for f in fields if f.get is not None}
    return {f.name: picked[f.at] if f.at else computed[f.name] for f in fields}


def _inner(blocks: list[Any], name: str) -> list[Any]:
    """The field ``name`` of each block: a typed block's attribute, a plain object's key, else None (read
    as an attribute of every block at once when each is a typed block that has it)."""
    if all(issubclass(kind, msgspec.Struct) and name in kind.__struct_fields__ for kind in set(map(type, blocks))):
        return list(map(operator.attrgetter(name), blocks))
    return [getattr(block, name, None) if isinstance(block, msgspec.Struct)
            else block.get(name) if isinstance(block, dict) else None for block in blocks]


def _verifies(raw: bytes, run_text: str) -> bool:
    """Whether a judgement line verifies (:func:`apm.records.judging.verifies`) as written: given its run
    block's ``run_text`` as written, else (a line without ``format_version`` the dict path read, whose block
    read is the migrated one) from the line alone; a line orjson cannot read does not (read_typed leaves every
    line orjson refuses to the dict path, which skips it; a reducer never raises on a line)."""
    try:
        line = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    return verifies(line, run_text) or verifies(line)


def _per_block(values: np.ndarray, run_of: np.ndarray) -> pd.Categorical:
    """The column whose line ``i`` holds ``values[run_of[i]]``, as ``astype("category")`` makes it (the values
    seen, sorted, as categories), coded from the blocks' codes instead of hashing a value per line."""
    blocks = pd.Categorical(values)
    return pd.Categorical.from_codes(blocks.codes[run_of], dtype=blocks.dtype).remove_unused_categories()


def _saved_release(path: Path) -> str | None:
    """The release its run dir's ``config.json`` (beside the ``<kind>/`` folder of ``path``) names, for lines
    whose ``run`` block names none (written before it did); None where it names none or is damaged."""
    try:
        saved = json.loads(RunDir(path.parent.parent).config.read_text()).get(RELEASE)
    except (OSError, ValueError, AttributeError):
        return None
    return saved if isinstance(saved, str) and saved else None


class MixedReleases(ValueError):
    """Runs of different releases asked to be compared; the message names each release's methods."""


def one_release(records: pd.DataFrame, what: str = "the runs") -> None:
    """Refuse (``MixedReleases``) records of more than one release fingerprint: their keys name
    different questions, so no table or pairing of them means anything. Lines whose release is
    unknown (no fingerprint on the line or in ``config.json``) are not checked."""
    known = records.dropna(subset=[RELEASE])
    methods = known.groupby(RELEASE, observed=True)["config_hash"].unique()
    if len(methods) < 2:
        return
    named = "; ".join(f"release {release}: {', '.join(sorted(map(str, hashes))[:3])}"
                      + (f" and {len(hashes) - 3} more" if len(hashes) > 3 else "")
                      for release, hashes in methods.items())
    raise MixedReleases(f"{what} answered {len(methods)} different releases ({named}; methods by config hash); "
                        "reduce or compare the runs of one release at a time")


class MixedIdentities(ValueError):
    """A method's lines were made by other code or another model: one row of them would pool two methods."""


def _per_identity(lines: pd.DataFrame, what: str) -> pd.DataFrame:
    """How many of ``lines`` (named ``what``) each method and identity has: columns ``config_hash``,
    ``identity``, ``label`` (the method's display names), ``said`` (``50 records``)."""
    counted = lines.groupby(["config_hash", IDENTITY, "memory", "backbone"], observed=True).size()
    rows = counted[counted > 0].reset_index(name="n")
    return rows.assign(label=rows["memory"].astype(str) + " · " + rows["backbone"].astype(str),
                       said=rows["n"].astype(str) + f" {what}")


def one_identity(records: pd.DataFrame, memory: pd.DataFrame) -> None:
    """Refuse (:class:`MixedIdentities`, naming the first such method's identities and their lines) a
    method whose records and memory lines on record carry more than one identity (docs/records.md,
    "Identity"): its shards or resumes ran other code or another model, and one row of them would pool
    two methods' answers."""
    counts = pd.concat([_per_identity(records, "records"), _per_identity(memory, "memory lines")])
    mixed = counts.groupby("config_hash")[IDENTITY].nunique()
    mixed = mixed[mixed > 1]
    if mixed.empty:
        return
    first = str(mixed.index[0])
    mine = counts[counts["config_hash"] == first]
    each = "; ".join(f"{identity}: {', '.join(rows['said'])}" for identity, rows in mine.groupby(IDENTITY, sort=True))
    more = f" (and {len(mixed) - 1} more methods)" if len(mixed) > 1 else ""
    raise MixedIdentities(
        f"{mine['label'].iloc[0]} [{first}]: its lines carry {int(mixed.iloc[0])} identities ({each}){more}: one row "
        "would pool other code or another model; rerun=all the shards made by the other, or reduce them "
        "apart; nothing written")


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    """Categorical keys, nullable booleans and float timings: compact and fast to group."""
    out = df.copy(deep=False)  # copy-on-write (pandas 3): replacing its columns leaves the caller's frame as it is
    for c in out.columns.intersection(_CATEGORICAL):
        out[c] = out[c].astype("category")
    for c in out.columns.intersection(_BOOLEAN):
        out[c] = out[c].astype("boolean")
    timings = ["ttft_s", "total_s", "rtf", "score", "bytes", "fast_weight_bytes", "prior_hours"]
    for c in out.columns.intersection(timings):
        out[c] = pd.to_numeric(out[c], errors="coerce").astype("float64")
    for c in out.columns.intersection([REVISION, STAMP]):  # integers, as the rule compares them (never float64)
        out[c] = out[c] if out[c].dtype == np.uint64 else _order_column(out[c].tolist())
    return out


def _newest_rows(df: pd.DataFrame, keys: Sequence[str], preferred: pd.Series | None = None) -> np.ndarray:
    """The positions of the rows :func:`apm.records.select.newest_rows` chooses, one per ``keys``."""
    codes = df.groupby(list(keys), observed=True, sort=False, dropna=False).ngroup().to_numpy()
    wanted = None if preferred is None else preferred.to_numpy(dtype=bool)
    return newest_rows(codes, df[REVISION].to_numpy(dtype=np.uint64), df[STAMP].to_numpy(dtype=np.uint64), wanted)


def latest(df: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """One row per ``keys``: the newest line (docs/records.md, "Which line of a key wins") wins."""
    return df.iloc[_newest_rows(df, keys)].reset_index(drop=True)


def _concat(kind: Kind, fields: Sequence[Field], files: Sequence[Path],
            read: Iterator[tuple[pd.DataFrame, list[Skipped]]], skipped: list[Skipped] | None) -> pd.DataFrame:
    """The ``kind`` files' frames (the next ``len(files)`` of ``read``) as one typed DataFrame (empty, with
    columns, if none); their unusable lines go to ``skipped``, and a warning names each file with any and
    its first reason."""
    frames = []
    for path in files:
        frame, lost = next(read)
        if lost:
            warnings.warn(f"{path}: skipped {len(lost)} line(s); first: {lost[0]}", stacklevel=3)
        if skipped is not None:
            skipped += lost
        if len(frame):
            frames.append(frame)
    empty = [n for n, _ in RUN_FIELDS] + [f.name for f in fields] + ([VERIFIED] if kind == "judgements" else [])
    return _joined(frames) if frames else _typed(pd.DataFrame(columns=empty))


def _joined(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Typed frames (:func:`_typed`) as one, row after row, as typed as the concatenation of their untyped
    frames: a column categorical in every frame joined by its categories' union (:func:`_union`)."""
    if len(frames) == 1:
        return frames[0]
    columns = frames[0].columns
    categorical = [c for c in columns if all(isinstance(f[c].dtype, pd.CategoricalDtype) for f in frames)]
    joined = pd.concat([f.drop(columns=categorical) for f in frames], ignore_index=True)
    return joined.assign(**{c: _union([f[c] for f in frames]) for c in categorical})[columns]


def _union(parts: Sequence[pd.Series]) -> pd.Categorical | pd.Series:
    """Categorical columns as one, row after row, with the categories ``astype("category")`` would give the
    joined values (those seen, sorted); a part of no values (all null) takes the others' categories. Where
    the parts' categories differ in type or do not sort, the values are joined and typed again."""
    seen = [p for p in parts if len(p.cat.categories)]
    if not seen:  # null throughout
        return pd.concat(parts, ignore_index=True).astype("category")
    like = seen[0].dtype
    try:
        return union_categoricals([p if len(p.cat.categories) else p.astype(like) for p in parts],
                                  sort_categories=True)
    except TypeError:  # categories of different types, or unorderable ones
        return pd.concat(parts, ignore_index=True).astype("object").astype("category")


def _read(
    paths: Iterable[str | Path], kind: Kind, fields: Sequence[Field], skipped: list[Skipped] | None = None
) -> pd.DataFrame:
    """All lines of one kind under ``paths`` as one typed DataFrame (empty, with columns, if none)."""
    files = _files(paths, kind)
    return _concat(kind, fields, files, _read_files([(f, kind, fields) for f in files]), skipped)


def load_records(
    paths: Iterable[str | Path], detail: bool = False, skipped: list[Skipped] | None = None
) -> pd.DataFrame:
    """Records of the runs under ``paths``; the newest line per (config_hash, key) wins.

    ``detail`` adds the raw output, frames, prompt and timing fields (for drilling into instances);
    unusable lines are appended to ``skipped``.
    """
    return _latest_records(_read(paths, "records", _record_fields(detail), skipped))


def _record_fields(detail: bool) -> list[Field]:
    return RECORD_FIELDS + (DETAIL_FIELDS if detail else [])


def _latest_records(df: pd.DataFrame) -> pd.DataFrame:
    return latest(df, ["config_hash", "key"])


def load_judgements(
    paths: Iterable[str | Path],
    judge: str | None = None,
    rubric_version: str | None = None,
    records: pd.DataFrame | None = None,
    skipped: list[Skipped] | None = None,
) -> pd.DataFrame:
    """One judgement per (config_hash, key): the last one by ``judge``/``rubric_version``, else the last.

    A judgement whose content does not verify (edited, or written before judgements carried a digest)
    is dropped first, with a warning: its probe is unjudged, and ``apm-judge`` judges it again. Given
    ``records``, so is a judgement of another response than the record's current output (a stale one,
    after a rerun).
    """
    return _selected(_read(paths, "judgements", JUDGEMENT_FIELDS, skipped), judge, rubric_version, records)


def _selected(df: pd.DataFrame, judge: str | None, rubric_version: str | None,
              records: pd.DataFrame | None) -> pd.DataFrame:
    """The judgements :func:`load_judgements` selects from all judgement lines read."""
    forged = ~df[VERIFIED].astype("bool")
    if forged.any():
        warnings.warn(f"{int(forged.sum())} judgement line(s) do not verify (edited, or without a content digest): "
                      "left out; apm-judge judges those probes again", stacklevel=3)
    df = df[~forged].drop(columns=VERIFIED)
    if records is not None:
        df = df[_current(df, records)]
    wanted = pd.Series(True, index=df.index)
    if judge is not None:
        wanted &= df["judge"].astype("str") == judge
    if rubric_version is not None:
        wanted &= df["rubric_version"].astype("str") == str(rubric_version)
    return df.iloc[_newest_rows(df, ["config_hash", "key"], wanted.fillna(False))].reset_index(drop=True)


class UnmatchedPreference(ValueError):
    """``--judge`` / ``--rubric`` names what no judgement on record has: a typo would silently select the others
    (raised before a command writes anything, so its message says so)."""


def check_preference(judgements: pd.DataFrame, judge: str | None, rubric: str | None) -> None:
    """Refuse (:class:`UnmatchedPreference`, naming what is on record and the nearest) a ``--judge`` or
    ``--rubric`` that no judgement in ``judgements`` has; the one check of apm-reduce, apm-publish, apm-view."""
    for flag, column, wanted in (("--judge", "judge", judge), ("--rubric", "rubric_version", rubric)):
        present = sorted({str(v) for v in judgements[column].dropna()}) if column in judgements else []
        if wanted is not None and str(wanted) not in present:
            near = difflib.get_close_matches(str(wanted), present, n=1)
            hint = f"; did you mean {near[0]}?" if near else ""
            raise UnmatchedPreference(f"{flag} {wanted}: no judgement on record has it (on record: "
                                      f"{', '.join(present) or 'none'}{hint}); nothing written")


def _current(judgements: pd.DataFrame, records: pd.DataFrame) -> pd.Series:
    """Which judgements judged the response now on record (true where either digest is unknown)."""
    ids = ["config_hash", "key"]
    digested = records["response_sha256"].notna()  # a record without one keeps its judgements: leave it out
    now = records.loc[digested, ids + ["response_sha256"]].astype({"config_hash": "str"})
    seen = judgements.loc[:, ids + ["response_sha256"]].astype({"config_hash": "str"})
    joined = seen.merge(now, how="left", on=ids, suffixes=("", "_now"))  # one record per key: else too long below
    then, now_digest = joined["response_sha256"], joined["response_sha256_now"]
    keep = then.isna() | now_digest.isna() | (then == now_digest)
    return pd.Series(keep.to_numpy(dtype=bool), index=judgements.index)


def load_memory(paths: Iterable[str | Path], skipped: list[Skipped] | None = None) -> pd.DataFrame:
    """Per-session persistent-state lines; the newest per (config_hash, trajectory, session) wins."""
    return _latest_memory(_read(paths, "memory", MEMORY_FIELDS, skipped))


def _latest_memory(df: pd.DataFrame) -> pd.DataFrame:
    return latest(df, ["config_hash", "trajectory_id", "session_index"])


def run_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Every run directory at or below ``paths`` (:func:`apm.records.rundir.find_runs`), sorted."""
    return sorted(find_runs(paths).paths)


@dataclass(frozen=True)
class RunSet:
    """Everything one reduction reads: records, the selected judgements and memory lines, the
    lines it left out (with ``file:line: reason``) and the shards' plans (what coverage is measured against)."""

    records: pd.DataFrame
    judgements: pd.DataFrame
    memory: pd.DataFrame
    skipped: tuple[Skipped, ...] = ()
    plans: tuple[PlanFile, ...] = ()


def load_runs(
    paths: Iterable[str | Path], judge: str | None = None, rubric_version: str | None = None, detail: bool = False,
    workers: int = 1, progress: bool = True,
) -> RunSet:
    """Records, judgements (selected as in :func:`load_judgements`), memory lines and plans under ``paths``;
    ``workers`` > 1 reads a large load's files in that many worker processes (:func:`_read_files`; the
    same frames, warnings and skipped lines as read here: the caller's main module must guard its entry
    point, ``if __name__ == "__main__"``, as a console script's does); ``progress``: the files read, on stderr
    (:func:`apm.live.progress.stage_progress`)."""
    paths = list(paths)
    skipped: list[Skipped] = []
    kinds: list[tuple[Kind, Sequence[Field]]] = [
        ("records", _record_fields(detail)), ("judgements", JUDGEMENT_FIELDS), ("memory", MEMORY_FIELDS)]
    files = [_files(paths, kind) for kind, _ in kinds]
    jobs: list[FileJob] = [(f, kind, fields) for (kind, fields), of_kind in zip(kinds, files) for f in of_kind]
    reading = stage_progress(len(jobs), "reading run files", Unit("files"), enabled=progress)
    read = counted(_read_files(jobs, workers), reading)
    frames = (_concat(kind, fields, of_kind, read, skipped) for (kind, fields), of_kind in zip(kinds, files))
    records = _latest_records(next(frames))  # each kind reduced as it comes, while the workers read the next
    judgements = _selected(next(frames), judge, rubric_version, records)
    memory = _latest_memory(next(frames))
    reading.close()
    return RunSet(records, judgements, memory, tuple(skipped), read_plans(run_dirs(paths)))
