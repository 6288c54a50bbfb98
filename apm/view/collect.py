"""What the page shows, gathered from run dirs as plain JSON values: each method with its scores, and
per instance key the release's prompt fields and every method's record, frames, prompt sent and
judgement — the records streamed one at a time (:meth:`Views.cells`), so a build at the paper's scale
holds only small per-instance summaries (:class:`Row`).

Lines are chosen exactly as ``apm-reduce`` chooses them (:func:`apm.reduce.load_runs`: the newest line per
key by :mod:`apm.records.select`, stale judgements dropped, ``--judge`` preferred); the viewer then finds
each chosen row's line by its :data:`~apm.records.select.LineId` and shows it whole, so it never disagrees
with the scores at the top of the page.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from apm.data import clock
from apm.data.fingerprint import release_fingerprint
from apm.data.instances import Instance, release_instances
from apm.data.model import Release
from apm.data.problems import ReleaseError
from apm.data.release import load_release
from apm.data.tasks import ADAPTIVE, EA, FAMILIES, MCQA_TASKS, TASKS
from apm.records.atomic import read_run_config
from apm.records.lines import Kind, Line, read_lines
from apm.records.model import InstanceRecord, JudgementLine, named
from apm.records.prompts import NOT_KEPT, PromptUnavailable, restore, text_digest, text_path
from apm.records.redact import register_config_secrets
from apm.records.rundir import RunDir, find_runs, not_regular
from apm.records.select import REVISION, STAMP, LineId, line_id, line_ids
from apm.reduce import RunSet, check_preference, load_runs, score_table
from apm.reduce.coverage import PARTIAL, coverage_by_method
from apm.reduce.names import row_label, row_rank
from apm.reduce.scores import judge_names, method_info
from apm.reduce.tables import TABLES
from apm.video.cache import VideoDecodeError
from apm.video.select import uniform_indices
from apm.view.thumbs import Thumbnails

Pick = tuple[str, str]
"""(config hash, instance key): one method's line of one instance."""

PAPER_TABLES = ("table3", "table4")
"""The paper's tables whose score columns head the page, in their order (:data:`apm.reduce.tables.TABLES`)."""
SCORE_METRICS = frozenset({"capability_score", "overall", "task_score", "ea_accuracy", "eu_accuracy"})
"""Of those tables' columns, the utility scores (storage and latency are per run, not per instance)."""


def paper_scores() -> tuple[tuple[str, str, str], ...]:
    """The score columns at the top of the page, (metric, task, heading) as in ``scores.csv``, in the paper's
    order: Table 3's capability scores and Overall, then Table 4's task scores, EA and EU, each once."""
    columns: dict[tuple[str, str], str] = {}
    for table in TABLES:
        if table.name in PAPER_TABLES:
            for c in table.columns:
                if c.metric in SCORE_METRICS:
                    columns.setdefault((c.metric, c.task), c.header)
    return tuple((metric, task, header) for (metric, task), header in columns.items())


SCORES = paper_scores()


def column_filter(task: str) -> dict[str, str]:
    """The instance filter behind a score column of ``task``: its task, its capability family, or none (all)."""
    if task in TASKS or task == EA:
        return {"task": task}
    return {"family": task} if task in FAMILIES else {}


RECORD_FIELDS = named(
    InstanceRecord, "output", "finish_reason", "parse_status", "parse_error", "decision", "answer", "correct",
    "gate_pass", "error", "prompt_version", "prompt_sha256", "tokens", "truncation", "memory_bytes", "attempts",
)
"""What a method cell shows of its record, as the record model names them."""
JUDGEMENT_FIELDS = named(
    JudgementLine, "judge", "judge_model", "rubric_version", "status", "score", "justification", "critical_issues",
    "criterion_checks", "failure", "error",
)
"""What a method cell shows of its judgement, as the judgement line model names them."""
THUMB_ERRORS = (VideoDecodeError, OSError, IndexError, KeyError, ValueError)
"""What a frame without a thumbnail can fail with: no video, an undecodable one, a sample out of range."""


ABSOLUTE_PATH = re.compile(r"(?<![\w.~])/(?:[^\s:'\"/]+/)*([^\s:'\"/]+)")
"""An absolute path in a message; the page keeps only its last component."""


def file_names(message: str) -> str:
    """``message`` with each absolute path cut to its last component: a site holds no absolute path."""
    return ABSOLUTE_PATH.sub(r"\1", message)


class ReleaseChanged(ValueError):
    """A run's release is not the one it was run on: its questions would be shown against other answers."""


@dataclass(frozen=True)
class ViewedRun:
    """One run directory and its resolved ``config.json``."""

    path: Path
    config_hash: str
    config: Mapping[str, Any]
    shown: str
    """The run dir as the page names it: relative to the folder above the path it was found under
    (never an absolute path: the site may be shared)."""
    release_fingerprint: str | None
    """The release's fingerprint when the run was made (None: an older run that did not save it)."""

    @property
    def dataset_root(self) -> Path:
        return Path(self.config["dataset"]["root"])

    @property
    def frames(self) -> Mapping[str, Any]:
        """The frame sampling settings the run's cache entries were built with."""
        return self.config.get("frames") or {}


def find_run_dirs(paths: Iterable[str | Path]) -> list[ViewedRun]:
    """The runs with a ``config.json`` at or below ``paths`` (:func:`apm.records.rundir.find_runs`), each
    once, in path order; a path that does not exist raises ``FileNotFoundError``."""
    found: dict[Path, str] = {}
    for root in map(Path, paths):
        for run in find_runs([root], need_config=True).runs:
            found.setdefault(run.path, run.path.relative_to(root.resolve().parent).as_posix())
    return [_run_dir(path, shown) for path, shown in found.items()]


def _run_dir(path: Path, shown: str) -> ViewedRun:
    saved = read_run_config(path)
    register_config_secrets(saved["config"])  # the site masks the keys the run's engines read (site._json)
    return ViewedRun(path, str(saved["config_hash"]), saved["config"], shown, saved.get("release_fingerprint"))


def check_release(run: ViewedRun, release: Release | str) -> None:
    """Refuse (:class:`ReleaseChanged`) a run whose readable release has changed since it was run."""
    if isinstance(release, str) or run.release_fingerprint is None:
        return
    now = release_fingerprint(run.dataset_root)
    if now != run.release_fingerprint:
        raise ReleaseChanged(f"{run.shown}: the release at dataset.root changed since the run (fingerprint "
                             f"{run.release_fingerprint}, now {now}); view it with the release it was run on")


def _files(runs: Sequence[ViewedRun], kind: Kind) -> Iterator[tuple[ViewedRun, Path]]:
    for run in runs:
        for path in RunDir(run.path).files(kind):
            yield run, path


def _lines(runs: Sequence[ViewedRun], kind: Kind) -> dict[LineId, tuple[ViewedRun, Line]]:
    """Every usable ``<kind>/*.jsonl`` line of the runs, with the run dir holding it; of lines that
    the rule cannot tell apart the one read later wins, as in the reducer."""
    return {line_id(line): (run, line) for run, path in _files(runs, kind) for line in read_lines(path, kind)}


def chosen(table: pd.DataFrame, lines: Mapping[LineId, tuple[ViewedRun, Line]]) -> dict[Pick, tuple[ViewedRun, Line]]:
    """The whole line (and its run dir) behind each row the reducer kept in ``table``."""
    picked = ((key[0], key[1], lines.get(key)) for key in kept(table))
    return {(h, key): found for h, key, found in picked if found is not None}


def kept(table: pd.DataFrame) -> list[LineId]:
    """The :data:`~apm.records.select.LineId` of each row the reducer kept in ``table``."""
    return line_ids(*(table[c].tolist() for c in ("config_hash", "key", REVISION, STAMP)))


def chosen_records(table: pd.DataFrame, runs: Sequence[ViewedRun]) -> Iterator[tuple[ViewedRun, Line]]:
    """The record line (and its run dir) behind each row the reducer kept, read file by file so that no
    more than one line is held at a time; of lines the reducer cannot tell apart the one read later
    wins (a first pass notes where each wanted line last occurs)."""
    wanted = set(kept(table))
    last: dict[LineId, tuple[Path, int]] = {}
    for _, path in _files(runs, "records"):
        for i, line in enumerate(read_lines(path, "records")):
            if (found := line_id(line)) in wanted:
                last[found] = (path, i)
    for run, path in _files(runs, "records"):
        for i, line in enumerate(read_lines(path, "records")):
            if last.get(line_id(line)) == (path, i):
                yield run, line


def _plain(value: Any) -> float | int | None:
    """A pandas number as JSON: NaN and NA become None."""
    return None if pd.isna(value) else value.item() if hasattr(value, "item") else value


def method_scores(runs: RunSet) -> dict[str, dict[str, dict[str, Any]]]:
    """Per config hash, the page's score columns: ``metric/task`` → value (None: withheld), n, errors
    and unjudged probes (point estimates of ``apm.reduce.score_table``; intervals are in ``apm-reduce``)."""
    table = score_table(runs.records, runs.judgements, runs.memory, reps=0, plans=runs.plans)
    wanted = {(metric, task) for metric, task, _ in SCORES}
    table = table[[(m, t) in wanted for m, t in zip(table["metric"], table["task"])]]
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for row in table.itertuples(index=False):
        out.setdefault(str(row.config_hash), {})[f"{row.metric}/{row.task}"] = {
            "value": _plain(row.value), "n": _plain(row.n), "n_error": _plain(row.n_error),
            "n_unjudged": _plain(row.n_unjudged),
        }
    return out


def methods(runs: RunSet, dirs: Sequence[ViewedRun]) -> list[dict[str, Any]]:
    """Every method (config hash) of the records, in the paper's row order, with label, scores and
    coverage (a partial method's label ends in '(partial)'; ``coverage.gap`` says what is missing)."""
    info = method_info(runs.records)
    scores = method_scores(runs)
    judges = judge_names(runs.judgements)
    covered = coverage_by_method(runs.plans, runs.records, runs.memory)
    folders = {h: [d.shown for d in dirs if d.config_hash == h] for h in info.index}
    out = [
        {
            "id": h,
            "label": row_label(r) + (f" ({PARTIAL})" if covered[h].note else ""),
            "dataset": r.dataset, "memory": r.memory, "backbone": r.backbone, "config_hash": h,
            "judge": judges.get(h, ""), "run_dirs": folders[h], "scores": scores.get(h, {}),
            "coverage": {"n_planned": covered[h].planned, "on_record": covered[h].on_record, "gap": covered[h].note},
        }
        for h, r in info.iterrows()
    ]
    rank = {h: row_rank(r) for h, r in info.iterrows()}
    return sorted(out, key=lambda m: (rank[m["id"]], m["label"], m["id"]))


def score_columns(found: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The :data:`SCORES` columns that some method has, each with the filter of its instances (a click on a
    score cell shows them)."""
    have = {name for m in found for name in m["scores"]}
    return [{"id": f"{m}/{t}", "label": label, "filter": column_filter(t)} for m, t, label in SCORES
            if f"{m}/{t}" in have]


def outcome(record: Line) -> str:
    """``right``/``wrong``: the answer (MCQA, EA) or the gate (adaptive); an errored or unparsed
    instance is wrong, as the scores count it."""
    passed = record.get("gate_pass") if record.get("task") in ADAPTIVE else record.get("correct")
    return "right" if passed is True else "wrong"


def fault(record: Line) -> str | None:
    """``errored`` (a backbone error), ``parse_failed`` (an output no answer or decision could be read from),
    or None: the instances the scores count as ``n_error`` and as format failures."""
    if record.get("error") is not None:
        return "errored"
    return "parse_failed" if record.get("parse_status") == "failed" else None


def prompt_parts(instance: Instance) -> list[dict[str, Any]]:
    """The turns the instance's request held, in order, as the release fields that fill the Appendix E
    templates (records keep only the prompt's digest, not its text)."""
    fields = instance.candidate.fields
    options = [{"id": c["option_id"], "text": c["text"], "correct": c["option_id"] == instance.correct_option}
               for c in fields.get("choices") or []]
    names = {"question": "question (registered at session start)", "registration": "registration",
             "interval_marker": "interval marker"}
    parts = [{"time": clock.label(t.time), "label": names[t.kind], "text": t.text,
              "options": options if t.kind == "question" else []} for t in instance.turns]
    if instance.task in MCQA_TASKS or instance.task == EA:
        probe = {"label": "question", "text": fields.get("question", ""), "options": options}
    elif instance.window_start is not None:
        window = f"[{clock.label(instance.window_start)}, {clock.label(instance.probe_time)})"
        probe = {"label": "probe (interval template)", "text": f"window {window}", "options": []}
    else:
        probe = {"label": "probe (heartbeat template)", "text": "", "options": []}
    return [*parts, {"time": instance.probe_label, **probe}]


class Releases:
    """The releases the runs were made on, loaded once per dataset root (without checking videos)."""

    def __init__(self) -> None:
        self._loaded: dict[Path, Release | str] = {}
        self.instances: dict[str, Instance] = {}
        """Every loaded release's instances by key, in release order."""

    def get(self, root: Path) -> Release | str:
        """The release at ``root``, or why it cannot be read."""
        if root not in self._loaded:
            try:
                release = load_release(root, check_videos=False)
            except (ReleaseError, OSError) as e:
                self._loaded[root] = file_names(f"release at {root} unreadable: {str(e).splitlines()[0]}")
            else:
                self._loaded[root] = release
                for instance in release_instances(release):
                    self.instances.setdefault(instance.key, instance)
        return self._loaded[root]

    @property
    def problems(self) -> list[str]:
        return [v for v in self._loaded.values() if isinstance(v, str)]


def on_grid(frame: Mapping[str, Any], grid: int) -> bool:
    """Whether a recorded frame's offset is an exact multiple of ``grid`` seconds from its session's start."""
    return _offset_on_grid(frame["offset"], grid)


@lru_cache(maxsize=1 << 16)
def _offset_on_grid(offset: float, grid: int) -> bool:
    """:func:`on_grid` of one offset, its decimal text taken exactly; cached, as :func:`_sample` is."""
    return Fraction(str(offset)) % grid == 0


@lru_cache(maxsize=1 << 16)
def _sample(offset: float, rate_numerator: int, rate_denominator: int) -> int | None:
    """The sample ``offset × rate`` of a recorded offset (its decimal text taken exactly), None when it is off
    the sample grid. Cached (keyed on integers: a ``Fraction``'s hash is slow): a sweep's records send the same
    seconds of a session again and again, and exact arithmetic on every frame of 1,024-frame records was
    most of the viewer's time."""
    rate = Fraction(rate_numerator, rate_denominator)
    sample = Fraction(str(offset)) * rate
    if sample.denominator != 1 or float(sample / rate) != offset:
        return None
    return int(sample)


def thumbed(frames: Sequence[Mapping[str, Any]], cap: int, grid: int = 0) -> list[int]:
    """The places among ``frames`` that get a thumbnail. ``cap`` 0: every frame. Else without a ``grid``:
    ``cap`` of them evenly spread with the first and the last (:func:`uniform_indices`); with a ``grid``
    (seconds): the first and the last, and of the frames between them only those on the grid
    (:func:`on_grid`), evenly spread up to ``cap`` in all; so every thumbnail of a site but the cells' own
    first and last frames is one of the grid's, shared by every probe and method that sent that frame."""
    n = len(frames)
    if not cap:
        return list(range(n))
    if not grid or n <= 2:
        return uniform_indices(n, cap)
    inner = [i for i in range(1, n - 1) if on_grid(frames[i], grid)]
    ends = [0, n - 1] if cap > 1 else [n - 1]
    return sorted([*ends, *(inner[j] for j in uniform_indices(len(inner), max(0, cap - 2)))])


def frame_views(record: Line, run: ViewedRun, release: Release | str, thumbs: Thumbnails,
                cap: int = 0, grid: int = 0) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The record's frames with thumbnails (:func:`thumbed`: up to ``cap``, 0: all; on a ``grid`` of seconds
    between the first and the last, 0: evenly spread), each with its thumbnail's path (or why there is
    none) and its place ``i`` in the record; and the full strip, every frame (:func:`strip`)."""
    frames = record.get("frames") or []
    out = []
    for i in thumbed(frames, cap, grid):
        frame = frames[i]
        view: dict[str, Any] = {"i": i, **{k: frame.get(k) for k in ("session", "offset", "wall_clock")}}
        try:
            if isinstance(release, str):
                raise OSError(release)
            video = release.trajectory(record["trajectory_id"]).session(frame["session"]).video
            view["src"] = thumbs.src(run.frames, video, float(frame["offset"]))
        except THUMB_ERRORS as e:
            view["problem"] = f"no thumbnail: {file_names(str(e))}"
        out.append(view)
    return out, strip(frames, Fraction(str(run.frames.get("fps", 1.0))))


def strip(frames: Sequence[Mapping[str, Any]], rate: Fraction) -> dict[str, Any]:
    """Every frame sent, compactly and exactly: ``{"count", "rate", "runs": [[session, first sample, bits], …]}``,
    a run per stretch of rising samples (``offset × rate``) of one session, ``bits`` (base64, bit ``j``
    of byte ``j // 8`` from the high end) marking sample ``first + j``; ``{"count", "frames": [[session, offset], …]}``
    when an offset is off the sample grid. A 1,024-frame record takes under a kilobyte."""
    runs: list[tuple[str, list[int]]] = []
    numerator, denominator = rate.numerator, rate.denominator
    for f in frames:
        sample = _sample(f["offset"], numerator, denominator)
        if sample is None:
            return {"count": len(frames), "frames": [[g.get("session"), g.get("offset")] for g in frames]}
        if runs and runs[-1][0] == f["session"] and sample > runs[-1][1][-1]:
            runs[-1][1].append(sample)
        else:
            runs.append((f["session"], [sample]))
    coded = [[session, samples[0], _bits(samples)] for session, samples in runs]
    return {"count": len(frames), "rate": str(rate), "runs": coded}


def _bits(samples: Sequence[int]) -> str:
    marks = bytearray((samples[-1] - samples[0]) // 8 + 1)
    for sample in samples:
        j = sample - samples[0]
        marks[j // 8] |= 0x80 >> (j % 8)
    return base64.b64encode(bytes(marks)).decode()


@lru_cache(maxsize=4096)
def _kept_text(path: Path) -> str:
    """A kept prompt text; one that is not a regular file (a FIFO would block) is never opened, an ``OSError``
    that makes the prompt unavailable."""
    if (what := not_regular(path)) is not None:
        raise OSError(f"{path.name} is {what}, not a regular file")
    return path.read_text(encoding="utf-8")


def sent_prompt(record: Line, run: ViewedRun) -> tuple[dict[str, Any], dict[str, str]]:
    """What the record says its backbone was sent: its kept ``prompt`` (texts by digest, frames by
    count) once it reproduces ``prompt_sha256``, and the texts by digest; or why it cannot be shown."""
    refs = record.get("prompt")
    if not refs:
        return {"problem": NOT_KEPT}, {}
    try:
        canon = restore(refs, record.get("frames") or [], record.get("prompt_sha256"),
                        lambda digest: _kept_text(text_path(run.path, digest)))
    except PromptUnavailable as e:
        return {"problem": file_names(str(e))}, {}
    texts = {text_digest(part): part for _, parts in canon for part in parts if isinstance(part, str)}
    return {"messages": refs}, texts


def record_view(record: Line, judgement: Line | None, frames: list[dict[str, Any]], every: dict[str, Any],
                sent: dict[str, Any]) -> dict[str, Any]:
    """What the page shows of one method's record of an instance."""
    latency = record.get("latency") or {}
    return {
        **{k: record.get(k) for k in RECORD_FIELDS}, "outcome": outcome(record), "fault": fault(record),
        "frames": frames, "strip": every,
        "sent": sent, "ttft_s": latency.get("ttft_s"), "total_s": latency.get("total_s"),
        "judgement": None if judgement is None else {k: judgement.get(k) for k in JUDGEMENT_FIELDS},
    }


INSTANCE_FIELDS = ("task", "family", "polarity", "probe_id", "trajectory_id", "candidate_id", "probe_time",
                   "window_start", "correct_option", "evidence_available")


@dataclass
class Row:
    """What the page keeps of one instance key while its records stream past: where and when it is
    probed (from its first record), each method's answer, decision, outcome and chunk, and the prompt
    texts its methods were sent (by digest: a text sent by several methods is held, and written, once)."""

    fields: dict[str, Any]
    answers: dict[str, tuple[Any, Any, str]] = field(default_factory=dict)
    faults: dict[str, str | None] = field(default_factory=dict)
    chunks: dict[str, int] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, record: Line) -> Row:
        return cls({**{k: record.get(k) for k in INSTANCE_FIELDS},
                    "session": f"{record.get('day_id')}/{record.get('session_id')}"})

    def add(self, config_hash: str, view: Mapping[str, Any], chunk: int, texts: Mapping[str, str]) -> None:
        self.answers[config_hash] = (view["answer"], view["decision"], view["outcome"])
        self.faults[config_hash] = view["fault"]
        self.chunks[config_hash] = chunk
        self.texts.update(texts)

    @property
    def differs(self) -> bool:
        """Whether the methods holding the instance disagree: on the answer, the decision or right/wrong."""
        return len(set(self.answers.values())) > 1


def instance_view(key: str, row: Row, instance: Instance | None) -> dict[str, Any]:
    """One instance as its chunk holds it: where and when it is probed, its prompt fields, its annotation."""
    return {"key": key, **row.fields, "prompt": None if instance is None else prompt_parts(instance),
            "annotation": None if instance is None else dict(instance.candidate.fields)}


@dataclass
class Views:
    """The run dirs under the paths, read as ``apm-reduce`` reads them: methods with their scores, the
    judgements, the releases (checked unchanged); the records are streamed by :meth:`cells`."""

    dirs: list[ViewedRun]
    runs: RunSet
    judgements: dict[Pick, Line]
    releases: Releases
    methods: list[dict[str, Any]]
    judge: str | None

    @classmethod
    def read(cls, paths: Iterable[str | Path], judge: str | None = None) -> Views:
        paths = list(paths)
        dirs = find_run_dirs(paths)
        if not dirs:
            raise FileNotFoundError(2, "no run dir (config.json beside records/) at or below",
                                    " ".join(map(str, paths)))
        runs = load_runs([d.path for d in dirs], judge)
        check_preference(runs.judgements, judge, None)
        judgements = {pick: line for pick, (_, line) in chosen(runs.judgements, _lines(dirs, "judgements")).items()}
        releases = Releases()
        for run in dirs:
            check_release(run, releases.get(run.dataset_root))
        return cls(dirs, runs, judgements, releases, methods(runs, dirs), judge)

    def cells(self, thumbs: Thumbnails, cap: int,
              grid: int = 0) -> Iterator[tuple[Line, dict[str, Any], dict[str, str]]]:
        """Each chosen record with its view (thumbnails as :func:`thumbed` picks them) and its prompt's texts."""
        for run, record in chosen_records(self.runs.records, self.dirs):
            frames, every = frame_views(record, run, self.releases.get(run.dataset_root), thumbs, cap, grid)
            sent, texts = sent_prompt(record, run)
            judgement = self.judgements.get((str(record["run"]["config_hash"]), record["key"]))
            yield record, record_view(record, judgement, frames, every, sent), texts

    def in_release_order(self, keys: Iterable[str]) -> list[str]:
        """``keys`` in release order (trajectory, probe time, key); keys no release holds last."""
        order = {key: i for i, key in enumerate(self.releases.instances)}
        return sorted(keys, key=lambda k: (order.get(k, len(order)), k))

    def head(self) -> dict[str, Any]:
        """The page's data without its instances: methods with scores, score columns, notes."""
        return {"methods": self.methods, "score_columns": score_columns(self.methods),
                "notes": {"skipped_lines": [str(s) for s in self.runs.skipped], "releases": self.releases.problems,
                          "judge": self.judge}}
