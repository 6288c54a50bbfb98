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
from apm.reduce.metrics import CAPABILITIES
from apm.reduce.names import human_bytes, method_group, method_label, method_rank, table_memory
from apm.reduce.units import ALL

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
        "Response quality after the gate (%) (Table 7, Eq. 3); superscripts: balanced gate pass rate.",
        tuple(Column(t, "response_quality", t, sup=("gate_pass_balanced", t)) for t in ADAPTIVE)
        + (Column("Average", "response_quality", "adaptive"),),
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


def method_rows(scores: pd.DataFrame) -> pd.DataFrame:
    """Scores with a ``method`` label (EA scores under their main protocol's row), in paper order.

    Of a dataset holding only the EA set, only EA scores are kept (its latency or storage would
    otherwise stand for the main run's). Where several main datasets remain, labels name them.
    """
    by_dataset = scores.groupby("dataset")["task"]
    ea_only = [d for d, tasks in by_dataset if EA in set(tasks) and not set(tasks) & set(TASKS)]
    scores = scores[~scores["dataset"].isin(ea_only) | (scores["task"] == EA)]
    memory = [table_memory(m, t) for m, t in zip(scores["memory"].astype(str), scores["task"].astype(str))]
    backbone = scores["backbone"].astype(str)
    labelled = scores.assign(
        table_memory=memory,
        group=[method_group(m, b) for m, b in zip(memory, backbone)],
        method=[method_label(m, b) for m, b in zip(memory, backbone)],
    )
    main = labelled.loc[labelled["task"] != EA, "dataset"].unique()
    if len(main) > 1:
        tagged = labelled["method"] + " [" + labelled["dataset"].astype(str) + "]"
        labelled["method"] = labelled["method"].where(labelled["task"] == EA, tagged)
    order = sorted(
        labelled.drop_duplicates("method").itertuples(), key=lambda r: method_rank(r.table_memory, str(r.backbone))
    )
    return labelled.assign(method=pd.Categorical(labelled["method"], [r.method for r in order], ordered=True))


def numeric(table: Table, scores: pd.DataFrame) -> pd.DataFrame:
    """One row per method having any of the table's values; columns as headers (+ '<h> sup')."""
    rows = method_rows(scores)
    cells = {}
    for c in table.columns:
        cells[c.header] = _cell(rows, c.metric, c.task)
        if c.sup:
            cells[f"{c.header} sup"] = _cell(rows, *c.sup)
    out = pd.DataFrame(cells, index=rows["method"].cat.categories)
    out = out.dropna(how="all", subset=[c.header for c in table.columns])
    out.index.name = "Method"
    return out


def _cell(rows: pd.DataFrame, metric: str, task: str) -> pd.Series:
    hit = rows[(rows["metric"] == metric) & (rows["task"] == task)]
    return hit.groupby("method", observed=True)["value"].last()


def formatted(table: Table, values: pd.DataFrame, latex: bool) -> pd.DataFrame:
    """Cells as strings: the column format, '–' (LaTeX: '--') when missing, superscripts."""
    missing = "--" if latex else "–"

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
        out[c.header] = cells
    return out


def write_tables(scores: pd.DataFrame, out: Path) -> list[Path]:
    """Every table as ``<name>.md``, ``.csv`` (numeric) and ``.tex`` under ``out``; skips empty ones."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for table in TABLES:
        values = numeric(table, scores)
        if values.empty:
            continue
        stem = out / table.name
        values.to_csv(stem.with_suffix(".csv"))
        stem.with_suffix(".md").write_text(render.markdown(formatted(table, values, False), table.caption))
        stem.with_suffix(".tex").write_text(
            render.latex(formatted(table, values, True), table.caption, f"tab:{table.name}")
        )
        written += [stem.with_suffix(s) for s in (".md", ".csv", ".tex")]
    return written
