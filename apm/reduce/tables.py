"""The paper's tables (3, 4, 6, 7, 8/9, 10, 11/12, 13) built from ``scores.csv``.

Each table is a spec (columns = (metric, task) cells of the long score table), pivoted to one row per
method: numeric for CSV, formatted for Markdown and LaTeX.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from apm.data.tasks import ADAPTIVE, EA, TASKS
from apm.reduce import render
from apm.reduce.load import CONFIG, METHOD
from apm.reduce.metrics import CAPABILITIES
from apm.reduce.names import human_bytes, method_group, method_label, method_rank
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
    """A table column: the score (metric, task), its format, and an optional superscript score."""

    header: str
    metric: str
    task: str
    fmt: Format = two_decimals
    sup: tuple[str, str] | None = None


@dataclass(frozen=True)
class Table:
    name: str
    caption: str
    columns: tuple[Column, ...]


_OVERALL = Column("Overall", "overall", ALL)
TABLES = (
    Table(
        "table3",
        "Task performance and efficiency of the evaluated memory methods (Table 3). "
        "Latency: mean time to first token; storage per video hour (Eq. 2).",
        tuple(Column(h, "capability_score", f) for f, h in CAPABILITIES.items())
        + (_OVERALL, Column("Storage/hr", "storage_bytes_per_hour", ALL, bytes_per_hour),
           Column("Latency (s)", "ttft_s", ALL)),
    ),
    Table(
        "table4",
        "Task-level results across the three capability families and Evidence Availability-Aware "
        "evaluation (Table 4). EA: evidence available; EU: evidence unavailable detection.",
        tuple(Column(t, "task_score", t) for t in TASKS)
        + (_OVERALL, Column("EA", "ea_accuracy", EA), Column("EU", "eu_accuracy", EA)),
    ),
    Table(
        "table6",
        "Adaptive decision accuracy (%) (Table 6): per-task balanced accuracy; Overall pools probes "
        "across the five tasks (P: positive rate, N: negative rate, BA: balanced).",
        tuple(Column(t, "decision_ba", t) for t in ADAPTIVE)
        + (Column("P", "decision_positive_rate", "adaptive"), Column("N", "decision_negative_rate", "adaptive"),
           Column("BA", "decision_ba", "adaptive")),
    ),
    Table(
        "table7",
        "Response quality after the gate (%) (Table 7, Eq. 3); superscripts: balanced gate pass rate. "
        "Judge failures: gate-passing probes whose judge reply stayed invalid (left out of the means).",
        tuple(Column(t, "response_quality", t, sup=("gate_pass_balanced", t)) for t in ADAPTIVE)
        + (Column("Average", "response_quality", "adaptive"),
           Column("Judge failures", "judge_failures", "adaptive", integer)),
    ),
    Table(
        "table8_9",
        "Mean latency (Tables 8 and 9): time to first token, end-to-end time (s), and offline replay RTF.",
        (Column("TTFT (s)", "ttft_s", ALL), Column("Total (s)", "latency_total_s", ALL), Column("RTF", "rtf", ALL)),
    ),
    Table(
        "table10",
        "Peak persistent-memory size within each trajectory, after completed sessions (Table 10).",
        (Column("Mean", "peak_storage_bytes_mean", ALL, human_bytes),
         Column("Max", "peak_storage_bytes_max", ALL, human_bytes)),
    ),
    Table(
        "table11_12",
        "Unrecoverable output-format failures (Tables 11 and 12): count and rate over evaluated probes.",
        (Column("Failures", "format_failures", ALL, integer), Column("Rate (%)", "format_failure_rate", ALL)),
    ),
    Table(
        "table13",
        "Evidence Availability-Aware accuracy (%) (Table 13).",
        (Column("Original Acc.", "ea_original_accuracy", EA), Column("EA Acc.", "ea_accuracy", EA),
         Column("EU Det.", "eu_accuracy", EA), Column("Balanced", "ea_balanced", EA)),
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
    labels = _disambiguated(
        {h: method_label(r.memory, r.backbone, r.memory_variant, r.backbone_variant) for h, r in main.iterrows()},
        info,
    )
    for h in sorted(ea_only):
        r = info.loc[h]
        target = EA_ORIGINAL_MEMORY.get(r.memory_config, r.memory_config)
        found = main[(main["memory_config"] == target) & (main["backbone_config"] == r.backbone_config)
                     & (main["backbone_variant"] == r.backbone_variant)]
        shown = target if target != r.memory_config else r.memory
        labels[h] = labels[found.index[0]] if len(found) else method_label(shown, r.backbone, "", r.backbone_variant)
    return labels


def method_rows(scores: pd.DataFrame) -> pd.DataFrame:
    """Scores with a ``method`` label and ``group``, in the paper's row order (an ordered categorical).

    Methods are config hashes. Of a config holding only the EA set, only EA scores are kept (its
    latency or storage would otherwise stand for the main run's), in its main protocol's row.
    """
    ea_only = _ea_only(scores)
    scores = scores[~scores["config_hash"].isin(ea_only) | (scores["task"] == EA)]
    info = scores.loc[:, [*METHOD, *CONFIG]].astype(str).drop_duplicates("config_hash").set_index("config_hash")
    labels = _labels(info, ea_only)
    main = info.loc[[h for h in info.index if h not in ea_only]]
    rank = {labels[h]: method_rank(r.memory_config, r.backbone_config) for h, r in main.iterrows()}
    rank.update({labels[h]: (99, 0, "", "") for h in ea_only if labels[h] not in rank})
    group = {h: method_group(EA_ORIGINAL_MEMORY.get(r.memory_config, r.memory_config), r.backbone_config)
             for h, r in info.iterrows()}
    hashes = scores["config_hash"].astype(str)
    labelled = scores.assign(method=hashes.map(labels), group=hashes.map(group))
    order = sorted(set(labels.values()), key=lambda label: (rank[label], label))
    return labelled.assign(method=pd.Categorical(labelled["method"], order, ordered=True))


def _pivot(table: Table, rows: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per method, ``column`` of each of the table's cells (and superscripts, as '<h> sup')."""
    cells = {}
    for c in table.columns:
        cells[c.header] = _cell(rows, c.metric, c.task, column)
        if c.sup:
            cells[f"{c.header} sup"] = _cell(rows, *c.sup, column)
    return pd.DataFrame(cells, index=rows["method"].cat.categories)


def _cell(rows: pd.DataFrame, metric: str, task: str, column: str = "value") -> pd.Series:
    hit = rows[(rows["metric"] == metric) & (rows["task"] == task)]
    return hit.groupby("method", observed=True)[column].last()


def numeric(table: Table, scores: pd.DataFrame) -> pd.DataFrame:
    """One row per method having any of the table's cells (a withheld one, NaN, counts); columns
    as headers (+ '<h> sup')."""
    rows = method_rows(scores)
    present = _pivot(table, rows, "metric").notna()
    out = _pivot(table, rows, "value")[present.any(axis=1)]
    out.index.name = "Method"
    return out


def error_marks(table: Table, scores: pd.DataFrame) -> pd.DataFrame:
    """Per method and column, whether the cell's instances include backbone errors (counted wrong)."""
    errors = _pivot(table, method_rows(scores), "n_error")
    return errors.apply(pd.to_numeric, errors="coerce").fillna(0) > 0


ERROR_MARK = "†"
ERROR_NOTE = f"{ERROR_MARK}: the method had backbone errors on these instances; they count as wrong (docs/scores.md)."


def formatted(table: Table, values: pd.DataFrame, latex: bool, marks: pd.DataFrame | None = None) -> pd.DataFrame:
    """Cells as strings: the column format, '–' (LaTeX: '--') when missing or withheld,
    superscripts, and :data:`ERROR_MARK` on cells whose instances include errors."""
    missing = "--" if latex else "–"
    mark = r"$^\dagger$" if latex else ERROR_MARK

    def show(value: float, fmt: Format) -> str:
        if not np.isfinite(value):
            return missing
        text = fmt(value)
        return render.latex_escape(text) if latex else text

    out = pd.DataFrame(index=values.index)
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


def write_tables(scores: pd.DataFrame, out: Path, judge_note: str = "") -> list[Path]:
    """Every table as ``<name>.md``, ``.csv`` (numeric) and ``.tex`` under ``out``; skips empty ones.

    ``judge_note`` (which judge and rubric produced the judgements) ends every caption.
    """
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for table in TABLES:
        values = numeric(table, scores)
        if values.empty:
            continue
        marks = error_marks(table, scores).reindex(values.index, fill_value=False)
        caption = " ".join(filter(None, [table.caption, ERROR_NOTE if marks.to_numpy().any() else "", judge_note]))
        stem = out / table.name
        values.to_csv(stem.with_suffix(".csv"))
        stem.with_suffix(".md").write_text(render.markdown(formatted(table, values, False, marks), caption))
        stem.with_suffix(".tex").write_text(
            render.latex(formatted(table, values, True, marks), caption, f"tab:{table.name}")
        )
        written += [stem.with_suffix(s) for s in (".md", ".csv", ".tex")]
    return written
