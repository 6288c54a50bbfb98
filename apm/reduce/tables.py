"""The paper's tables (3, 4, 6–13) built from ``scores.csv``, and two supplements over every method.

Each table is a spec (columns = (metric, task) cells of the long score table), pivoted to one row per
method: numeric for CSV, formatted for Markdown and LaTeX.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from apm.data.tasks import ADAPTIVE, EA, TASKS
from apm.reduce import render
from apm.reduce.coverage import PARTIAL
from apm.reduce.load import CONFIG, METHOD
from apm.reduce.metrics import CAPABILITIES
from apm.reduce.names import (
    SIMPLESTREAM_BACKBONE,
    human_bytes,
    is_reference,
    method_label,
    method_rank,
    row_heading,
    row_label,
    row_rank,
)
from apm.reduce.scores import ANSWERED
from apm.reduce.units import ALL, EA_ORIGINAL_MEMORY

Format = Callable[[float], str]


def two_decimals(value: float) -> str:
    return f"{value:.2f}"


def integer(value: float) -> str:
    return f"{value:,.0f}"


def bytes_per_hour(value: float) -> str:
    return human_bytes(value, "/h")


@dataclass(frozen=True)
class Column:
    """A table column: the score (metric, task), its format, and an optional superscript score.

    In a table by backbone, ``memory`` names the memory config whose method fills the column."""

    header: str
    metric: str
    task: str
    fmt: Format = two_decimals
    sup: tuple[str, str] | None = None
    memory: str | None = None


@dataclass(frozen=True)
class Table:
    """A table: its file name, paper number, caption and columns.

    ``attributes`` are per-method columns of ``scores.csv`` (``streaming``) shown first as ✓/✗;
    ``kinds`` keeps only methods of those declared families (all when empty; docs/scores.md);
    ``by_backbone`` makes one row per backbone of the general models (a SimpleStream method keeps
    its own row), its columns picking a memory config; ``headed`` sets the rows under the paper's
    block headings (:func:`~apm.reduce.names.heading`: the specialised systems by representation)
    and gives the CSV a ``Representation`` column."""

    name: str
    paper: str
    caption: str
    columns: tuple[Column, ...]
    attributes: tuple[tuple[str, str], ...] = ()
    kinds: frozenset[str] = frozenset()
    by_backbone: bool = False
    headed: bool = False
    needs: str = "records of the methods it shows"
    """What a reduction needs for the table to be written (said when it is skipped)."""


ISOLATED = ("records timed in isolated mode (apm-run latency.sample=N, as the +experiment presets set, "
            "or latency_mode=true; docs/records.md, \"Latency\")")
"""What every latency cell needs."""
_SPECIALIZED = frozenset({"specialised"})
_GENERAL = frozenset({"general"})
_OVERALL = Column("Overall", "overall", ALL)
_FAILURES = (Column("Failures", "format_failures", ALL, integer), Column("Rate (%)", "format_failure_rate", ALL))
_SETTINGS = {"none": "w/o memory", "raw_video": "Video memory", "text_summary": "Text memory"}
"""The memory settings of the tables by backbone (Tables 9 and 12), as their column headers say."""


def _per_setting(columns: tuple[Column, ...], memories: tuple[str, ...]) -> tuple[Column, ...]:
    """``columns`` once per memory setting, headed '<setting>: <header>'."""
    return tuple(
        replace(c, header=f"{_SETTINGS[m]}: {c.header}", memory=m) for m in memories for c in columns
    )


TABLES = (
    Table(
        "table3", "Table 3",
        "Task performance and efficiency of the evaluated memory methods. Streaming and Persistent indicate "
        "support for streaming input and persistent memory (✓/✗; –: not declared). CS Und.: Cross-session "
        "Understanding; Perception: Real-time Perception; Adaptive: Adaptive Response. Storage cost is reported "
        "per video hour (Eq. 2), latency is the mean time to first token, and Overall is the mean of the three "
        "capability scores.",
        tuple(Column(h, "capability_score", f) for f, h in CAPABILITIES.items())
        + (_OVERALL, Column("Storage/hr", "storage_bytes_per_hour", ALL, bytes_per_hour),
           Column("Latency (s)", "ttft_s", ALL)),
        attributes=(("Streaming", "streaming"), ("Persistent", "persistent")), headed=True,
    ),
    Table(
        "table4", "Table 4",
        "Task-level results across the three capability families and Evidence Availability-Aware "
        "evaluation. EA: evidence available in accessible session. EU: evidence unavailable detection.",
        tuple(Column(t, "task_score", t) for t in TASKS)
        + (_OVERALL, Column("EA", "ea_accuracy", EA), Column("EU", "eu_accuracy", EA)),
        headed=True,
    ),
    Table(
        "table6", "Table 6",
        "Adaptive decision accuracy (%): per-task balanced accuracy of the correct INTERVENE rate on positive "
        "probes and the correct SILENT rate on negative probes; Overall pools probes across the five tasks "
        "(P: positive rate, N: negative rate, BA: balanced).",
        tuple(Column(t, "decision_ba", t) for t in ADAPTIVE)
        + (Column("P", "decision_positive_rate", "adaptive"), Column("N", "decision_negative_rate", "adaptive"),
           Column("BA", "decision_ba", "adaptive")),
        needs="adaptive-task records",
    ),
    Table(
        "table7", "Table 7",
        "Response quality after the gate (%) (Eq. 3); superscripts: balanced gate pass rate. "
        "Judge failures: gate-passing probes whose judgement failed (an invalid reply after the retries, or "
        "the judge unreachable); they are unjudged, so the scores over them are withheld (–).",
        tuple(Column(t, "response_quality", t, sup=("gate_pass_balanced", t)) for t in ADAPTIVE)
        + (Column("Average", "response_quality", "adaptive"),
           Column("Judge failures", "judge_failures", "adaptive", integer)),
        needs="judged adaptive-task records",
    ),
    Table(
        "table8", "Table 8",
        "Offline replay real-time factor (RTF) for specialized memory methods: processing time to the first "
        "output token divided by the duration of the causal video prefix, mean over evaluated probes. Values "
        "above 1 cannot keep pace with a live 1-FPS video stream. Lower is faster.",
        (Column("RTF", "rtf", ALL),),
        kinds=_SPECIALIZED, headed=True,
        needs="a specialised memory system (a class declaring family 'specialised') timed in isolated mode",
    ),
    Table(
        "table9", "Table 9",
        "Mean end-to-end latency (seconds) for general video models, from request submission to the complete "
        "response. Video memory replays prior sessions; text memory supplies saved summaries and the current "
        "causal prefix.",
        _per_setting((Column("Total (s)", "latency_total_s", ALL),), ("raw_video", "text_summary")),
        kinds=_GENERAL, by_backbone=True,
        needs="a general video model under raw video or text summary, timed in isolated mode",
    ),
    Table(
        "table10", "Table 10",
        "Peak persistent-memory size within each trajectory, after completed sessions. Mean and maximum are "
        "over trajectories. Fast weights (parametric memory's test-time-trained parameters) are reported apart "
        "and not added to the per-video storage (B.4); –: the method keeps none.",
        (Column("Mean", "peak_storage_bytes_mean", ALL, human_bytes),
         Column("Max", "peak_storage_bytes_max", ALL, human_bytes),
         Column("Fast weights (mean)", "peak_fast_weight_bytes_mean", ALL, human_bytes),
         Column("Fast weights (max)", "peak_fast_weight_bytes_max", ALL, human_bytes)),
        headed=True,
        needs="memory lines of a method whose later sessions read its state",
    ),
    Table(
        "table11", "Table 11",
        "Unrecoverable output-format failures for specialized memory methods: count, and rate over the "
        "method's evaluated probes. Recoverable formatting errors are excluded.",
        _FAILURES, kinds=_SPECIALIZED, headed=True,
        needs="a specialised memory system (a class declaring family 'specialised')",
    ),
    Table(
        "table12", "Table 12",
        "Unrecoverable output-format failures for general video models under video and text memory: count, and "
        "rate over the probes of each setting. SimpleStream uses only the four most recent frames and is "
        "reported once.",
        _per_setting(_FAILURES, tuple(_SETTINGS)), kinds=_GENERAL | {"baseline"}, by_backbone=True,
        needs="a general video model or SimpleStream",
    ),
    Table(
        "table13", "Table 13",
        "Evidence Availability-Aware accuracy (%). Original Accuracy is the accuracy on the original four-option "
        "questions under each system's main evaluation protocol; the restricted-history setting retains the two "
        "most recent completed sessions; Balanced averages EA accuracy and EU detection.",
        (Column("Original Acc.", "ea_original_accuracy", EA), Column("EA Acc.", "ea_accuracy", EA),
         Column("EU Det.", "eu_accuracy", EA), Column("Balanced", "ea_balanced", EA)),
        headed=True,
        needs="records of the EA set (dataset.include_ea=true)",
    ),
    Table(
        "table_latency", "Latency, all methods",
        "Mean latency of every method (supplements Tables 3, 8 and 9): time to first token, end-to-end time (s), "
        "and offline replay RTF.",
        (Column("TTFT (s)", "ttft_s", ALL), Column("Total (s)", "latency_total_s", ALL), Column("RTF", "rtf", ALL)),
        needs=ISOLATED,
    ),
    Table(
        "table_format_failures", "Format failures, all methods",
        "Unrecoverable output-format failures of every method (supplements Tables 11 and 12): count, and rate "
        "over evaluated probes.",
        _FAILURES,
    ),
)


def _ea_only(scores: pd.DataFrame) -> set[str]:
    """Config hashes holding only the EA set (none of the 12 tasks): they contribute only EA scores."""
    main = scores.loc[scores["task"].isin(TASKS), "config_hash"]
    return set(scores["config_hash"]) - set(main)


def _disambiguated(labels: dict[str, str], info: pd.DataFrame) -> dict[str, str]:
    """Labels that collide name their dataset, then (if still equal) their config hash."""
    out = dict(labels)
    for suffix in (lambda h: str(info.at[h, "dataset"]), lambda h: h):
        taken = pd.Series(out).value_counts()
        out = {h: f"{label} [{suffix(h)}]" if taken[label] > 1 else label for h, label in out.items()}
    return out


def _labels(info: pd.DataFrame, ea_only: set[str]) -> dict[str, str]:
    """Per config hash, its row label. An EA-only config takes the label of its main protocol's
    method (``EA_ORIGINAL_MEMORY``, same backbone config and settings), so its EA scores fill that
    row; without one it gets a row of its own, under the main protocol's name."""
    main = info.loc[[h for h in info.index if h not in ea_only]]
    labels = _disambiguated({h: row_label(r) for h, r in main.iterrows()}, info)
    for h in sorted(ea_only):
        r = info.loc[h]
        target = EA_ORIGINAL_MEMORY.get(r.memory_config, r.memory_config)
        found = main[(main["memory_config"] == target) & (main["backbone_config"] == r.backbone_config)
                     & (main["backbone_variant"] == r.backbone_variant) & (main["settings"] == r.settings)]
        shown = target if target != r.memory_config else r.memory
        own = method_label(shown, r.backbone, "", r.backbone_variant, r.tag, r.settings)
        labels[h] = labels[found.index[0]] if len(found) else own
    return labels


def coverage_gaps(scores: pd.DataFrame) -> dict[str, str]:
    """Per config hash whose records do not cover its plan, what is missing (``coverage_gap``)."""
    if "coverage_gap" not in scores:  # a scores.csv from before coverage
        return {}
    gaps = scores.loc[:, ["config_hash", "coverage_gap"]].fillna("").astype(str).drop_duplicates("config_hash")
    return {h: gap for h, gap in zip(gaps["config_hash"], gaps["coverage_gap"]) if gap}


def _marked(labels: dict[str, str], partial: set[str]) -> dict[str, str]:
    """Labels of rows holding a partial method end in '(partial)' (an EA-only config's gap marks its row)."""
    rows = {labels[h] for h in partial}
    return {h: f"{label} ({PARTIAL})" if label in rows else label for h, label in labels.items()}


def method_rows(scores: pd.DataFrame) -> pd.DataFrame:
    """Scores with a ``method`` label, ``group`` and ``heading``, in the paper's row order (an ordered
    categorical).

    Methods are config hashes; ``group`` is the memory config a by-backbone column picks
    (``reference`` for reference rows, which fill none). Of a config holding only the EA set, only EA
    scores are kept (its latency or storage would otherwise stand for the main run's), in its main
    protocol's row, under its heading (:func:`~apm.reduce.names.heading`). The
    row of a method that does not cover its plan is labelled '(partial)' (:func:`coverage_gaps`).
    """
    if "representation" not in scores:  # a scores.csv from before representations
        scores = scores.assign(representation="")
    ea_only = _ea_only(scores)
    scores = scores[~scores["config_hash"].isin(ea_only) | (scores["task"] == EA)]
    info = scores.loc[:, [*METHOD, *CONFIG]].astype(str).drop_duplicates("config_hash").set_index("config_hash")
    labels = _marked(_labels(info, ea_only), set(coverage_gaps(scores)))
    main = info.loc[[h for h in info.index if h not in ea_only]]
    rank = {labels[h]: (row_rank(r), row_heading(r)) for h, r in main.iterrows()}
    rank.update({labels[h]: (row_rank(r), row_heading(r)) for h, r in info.iterrows() if labels[h] not in rank})
    group = {h: "reference" if is_reference(r.method_family)
             else EA_ORIGINAL_MEMORY.get(r.memory_config, r.memory_config) for h, r in info.iterrows()}
    hashes = scores["config_hash"].astype(str)
    labelled = scores.assign(method=hashes.map(labels), group=hashes.map(group))
    labelled = labelled.assign(heading=labelled["method"].map(lambda label: rank[label][1]))
    order = sorted(set(labels.values()), key=lambda label: (rank[label][0], label))
    return labelled.assign(method=pd.Categorical(labelled["method"], order, ordered=True))


def paper_simplestream(methods: pd.DataFrame) -> str | None:
    """The one SimpleStream (``baseline``-family) method of ``methods`` (indexed by label, in row
    order) that figures and Table 12 show: the paper's (:data:`SIMPLESTREAM_BACKBONE`, default
    settings), else the first; None when there is none."""
    baselines = methods[methods["method_family"].astype(str) == "baseline"]
    paper = baselines[(baselines["backbone_config"].astype(str) == SIMPLESTREAM_BACKBONE)
                      & (baselines["memory_variant"].astype(str) == "") & (baselines["settings"].astype(str) == "")]
    chosen = paper if len(paper) else baselines
    return str(chosen.index[0]) if len(chosen) else None


def table_rows(table: Table, scores: pd.DataFrame) -> pd.DataFrame:
    """The score rows of the methods ``table`` shows, each with its table ``row`` (an ordered
    categorical): the method's label, or in a table by backbone, for a general model under a
    protocol's default settings, its backbone's part of the label (rows by family, then backbone)."""
    rows = method_rows(scores)
    if table.kinds:
        rows = rows[rows["method_family"].astype(str).isin(table.kinds)]
    if "baseline" in table.kinds:  # the one SimpleStream
        columns = ["method_family", "backbone_config", "memory_variant", "settings"]
        info = rows.groupby("method", observed=True)[columns].first()
        one = paper_simplestream(info)
        rows = rows[(rows["method_family"].astype(str) != "baseline") | (rows["method"].astype(str) == one)]
    if not table.by_backbone:
        return rows.assign(row=rows["method"])
    label = rows["method"].astype(str)
    plain = (rows["method_family"].astype(str) == "general") & (rows["memory_variant"].astype(str) == "")
    row = label.where(~plain, label.str.split(" · ", n=1).str[1])
    rank = {r: (method_rank(f, "" if p else m, b, t, n), r) for r, f, m, b, t, n, p in zip(
        row, rows["method_family"].astype(str), rows["memory"].astype(str), rows["backbone_config"].astype(str),
        rows["tag"].astype(str), rows["backbone"].astype(str), plain)}
    return rows.assign(row=pd.Categorical(row, sorted(rank, key=rank.__getitem__), ordered=True))


def _pivot(table: Table, rows: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per table row, ``column`` of each of the table's cells (and superscripts, as '<h> sup')."""
    cells = {}
    for c in table.columns:
        cells[c.header] = _cell(rows, c.metric, c.task, column, c.memory)
        if c.sup:
            cells[f"{c.header} sup"] = _cell(rows, *c.sup, column, c.memory)
    return pd.DataFrame(cells, index=rows["row"].cat.categories)


def _cell(rows: pd.DataFrame, metric: str, task: str, column: str, memory: str | None) -> pd.Series:
    hit = rows[(rows["metric"] == metric) & (rows["task"] == task)]
    if memory:
        hit = hit[hit["group"] == memory]
    return hit.groupby("row", observed=True)[column].last()


def _declared(rows: pd.DataFrame, column: str) -> pd.Series:
    """Per table row, what its method declares in ``column``: ``True``, ``False`` or '' (unknown);
    a main config's declaration over that of an EA-only config sharing its row."""
    main_first = rows.sort_values("task", key=lambda task: task == EA, kind="stable")
    value = main_first.groupby("row", observed=True)[column].first().astype(str)
    return value.where(value.isin(["True", "False"]), "")


def headings(table: Table, scores: pd.DataFrame) -> pd.Series:
    """Per table row, the heading of its block (:func:`~apm.reduce.names.heading`)."""
    rows = table_rows(table, scores)
    return rows.groupby("row", observed=True)["heading"].first().astype(str)


def numeric(table: Table, scores: pd.DataFrame) -> pd.DataFrame:
    """One row per method (or backbone) having any of the table's cells (a withheld one, NaN,
    counts); columns: a headed table's ``Representation`` (the declared one, '' for none), the
    attributes (``True``/``False``/''), then the headers (+ '<h> sup')."""
    rows = table_rows(table, scores)
    present = _pivot(table, rows, "metric").notna().any(axis=1)
    kept = (("Representation", "representation"),) if table.headed else ()
    declared = pd.DataFrame({h: _declared(rows, c) for h, c in table.attributes}, index=present.index)
    kinds = pd.DataFrame({h: rows.groupby("row", observed=True)[c].first().astype(str) for h, c in kept},
                         index=present.index)
    out = pd.concat([kinds, declared, _pivot(table, rows, "value")], axis=1)[present]
    out.index.name = "Model" if table.by_backbone else "Method"
    return out


COUNTS_ERRORS_AS_WRONG = ANSWERED - {"format_failure_rate"}
"""Scores whose instances include errored ones, each counted wrong (their ``_answered`` view leaves
them out); latency, storage and failure counts leave errors out, so their cells are never marked."""


def error_marks(table: Table, scores: pd.DataFrame) -> pd.DataFrame:
    """Per row and column, whether the cell is a score (:data:`COUNTS_ERRORS_AS_WRONG`) whose
    instances include backbone errors: :data:`ERROR_MARK` means that in every cell."""
    errors = _pivot(table, table_rows(table, scores), "n_error")
    marked = errors.apply(pd.to_numeric, errors="coerce").fillna(0) > 0
    scored = [c.header for c in table.columns if c.metric in COUNTS_ERRORS_AS_WRONG]
    return marked & marked.columns.isin(scored)


ERROR_MARK = "†"
ERROR_NOTE = f"{ERROR_MARK}: the method had backbone errors on these instances; they count as wrong (docs/scores.md)."
EMPTY_MARK = "‡"
EMPTY_NOTE = (f"{EMPTY_MARK}: declared persistent, but every state it exported for a later session to read held "
              "0 bytes, fast weights included: it exported nothing (docs/scores.md).")


def exported_nothing(table: Table, scores: pd.DataFrame) -> pd.Series:
    """Per table row, whether its method declares Persistent yet exported nothing: the largest state any
    later session reads (``peak_storage_bytes_max``) held 0 bytes and it kept no fast weights (no
    ``peak_fast_weight_bytes_max`` above 0). A row without storage rows (no session read another's
    state) is not marked: nothing says it exported nothing."""
    rows = table_rows(table, scores)
    index = rows["row"].cat.categories
    peak = pd.to_numeric(_cell(rows, "peak_storage_bytes_max", ALL, "value", None), errors="coerce").reindex(index)
    fast = pd.to_numeric(_cell(rows, "peak_fast_weight_bytes_max", ALL, "value", None), errors="coerce")
    persistent = _declared(rows, "persistent").reindex(index, fill_value="") == "True"
    return persistent & peak.eq(0) & fast.reindex(index).fillna(0).eq(0)
LATENCY_METRICS = frozenset({"ttft_s", "latency_total_s", "rtf"})
LATENCY_NOTE = ("Latency is measured in isolated mode: one request at a time after a warm-up (apm-run "
                "latency_mode=true, or latency.sample=N probes per task after the main run); – : the method has no "
                "isolated record (docs/scores.md).")
"""Ends the caption of every table with a latency column: the mode its cells were measured in."""
DECLARED = {False: {"True": "✓", "False": "✗"}, True: {"True": r"\checkmark", "False": r"$\times$"}}
"""How an attribute's ``True``/``False`` is shown, in Markdown (False) and LaTeX (True)."""


def formatted(table: Table, values: pd.DataFrame, latex: bool, marks: pd.DataFrame | None = None,
              empty: pd.Series | None = None) -> pd.DataFrame:
    """Cells as strings: ✓/✗ for attributes, the column format, '–' (LaTeX: '--') when missing or
    withheld, superscripts, :data:`ERROR_MARK` on cells whose instances include errors, and
    :data:`EMPTY_MARK` on the Persistent ✓ of a row that exported nothing (``empty``: :func:`exported_nothing`)."""
    missing = "--" if latex else "–"
    mark = r"$^\dagger$" if latex else ERROR_MARK
    hollow = r"$^\ddagger$" if latex else EMPTY_MARK

    def show(value: float, fmt: Format) -> str:
        if not np.isfinite(value):
            return missing
        text = fmt(value)
        return render.latex_escape(text) if latex else text

    out = pd.DataFrame(index=values.index)
    for header, column in table.attributes:
        out[header] = [DECLARED[latex].get(str(v), missing) for v in values[header]]
        if column == "persistent" and empty is not None:
            flagged = empty.reindex(values.index, fill_value=False)
            out[header] = [f"{v}{hollow}" if f and str(d) == "True" else v
                           for v, f, d in zip(out[header], flagged, values[header])]
    for c in table.columns:
        cells = [show(v, c.fmt) for v in values[c.header]]
        if c.sup:
            sups = [show(v, c.fmt) for v in values[f"{c.header} sup"]]
            cells = [
                v if s == missing else (f"{v}$^{{{s}}}$" if latex else f"{v}<sup>{s}</sup>")
                for v, s in zip(cells, sups)
            ]
        if marks is not None and c.header in marks:
            flagged = marks[c.header].reindex(values.index, fill_value=False)
            cells = [f"{v}{mark}" if f and v != missing else v for v, f in zip(cells, flagged)]
        out[c.header] = cells
    return out


def coverage_note(table: Table, scores: pd.DataFrame) -> str:
    """The caption's footnote naming what each partial row of ``table`` is missing ('' if none is partial)."""
    rows = table_rows(table, scores)
    gaps = coverage_gaps(rows)
    if not gaps:
        return ""
    hashes = rows.loc[rows["config_hash"].astype(str).isin(gaps), ["row", "config_hash"]].astype(str)
    named = dict.fromkeys(f"{row}: {gaps[h]}" for row, h in zip(hashes["row"], hashes["config_hash"]))
    head = f"({PARTIAL.capitalize()}: the records do not cover the method's plan; docs/scores.md)"
    return f"{head} {'. '.join(named)}."


def judges_by_row(table: Table, scores: pd.DataFrame) -> str:
    """Which judge produced each row's judged cells, when the table's rows were judged by more than one
    (one judge for all: the caption's "Judge: …" already names it)."""
    rows = table_rows(table, scores)
    named = rows[rows["judge"].astype(str) != ""].groupby("row", observed=True)["judge"].first().astype(str)
    if named.nunique() < 2:
        return ""
    parts = [f"{judge}: {', '.join(labels)}" for judge, labels in named.groupby(named).groups.items()]
    return f"Judged by {'; '.join(sorted(parts))}."


def latency_gaps(scores: pd.DataFrame, written: list[Path]) -> list[str]:
    """One line per written table whose latency columns are – for every row (no method has a record timed
    in isolated mode), saying what they need: the cells are empty for a reason a reader cannot see. (A
    column of a table by backbone that picks a memory setting no method ran is empty for that reason.)"""
    stems = {p.stem for p in written}
    lines = []
    for table in TABLES:
        timed = [c.header for c in table.columns if c.metric in LATENCY_METRICS and c.memory is None]
        if table.name not in stems or not timed:
            continue
        values = numeric(table, scores)
        empty = [h for h in timed if values[h].isna().all()]
        if empty:
            verb = "is" if len(empty) == 1 else "are"
            lines.append(f"{table.paper}: {', '.join(empty)} {verb} – for every method: it needs {ISOLATED}")
    return lines


def write_tables(scores: pd.DataFrame, out: Path, judge_note: str = "") -> list[Path]:
    """Every table as ``<name>.md``, ``.csv`` (numeric) and ``.tex`` under ``out``; skips empty ones.

    Captions start with the paper's table number; a footnote names what each partial row misses;
    ``judge_note`` (which judge and rubric produced the judgements) ends every caption.
    """
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for table in TABLES:
        values = numeric(table, scores)
        if values.empty:
            continue
        marks = error_marks(table, scores).reindex(values.index, fill_value=False)
        persistence = "persistent" in (c for _, c in table.attributes)
        empty = exported_nothing(table, scores).reindex(values.index, fill_value=False) if persistence else None
        timed = any(c.metric in LATENCY_METRICS for c in table.columns)
        notes = [ERROR_NOTE if marks.to_numpy().any() else "", EMPTY_NOTE if empty is not None and empty.any() else "",
                 coverage_note(table, scores), LATENCY_NOTE if timed else "", judge_note, judges_by_row(table, scores)]
        caption = " ".join(filter(None, [table.caption, *notes]))
        numbered = table.paper.startswith("Table ")  # LaTeX's \caption numbers it; Markdown names the paper's
        stem = out / table.name
        blocks = list(headings(table, scores).reindex(values.index)) if table.headed else None
        values.to_csv(stem.with_suffix(".csv"))
        stem.with_suffix(".md").write_text(
            render.markdown(formatted(table, values, False, marks, empty), f"{table.paper}: {caption}", blocks)
        )
        stem.with_suffix(".tex").write_text(render.latex(
            formatted(table, values, True, marks, empty), caption if numbered else f"{table.paper}: {caption}",
            f"tab:{table.name}", blocks, f"{table.paper} of the paper" if numbered else "",
        ))
        written += [stem.with_suffix(s) for s in (".md", ".csv", ".tex")]
    return written
