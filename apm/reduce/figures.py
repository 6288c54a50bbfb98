"""The paper's figures from ``scores.csv``: the utility–latency–storage bubble chart (Figure 2) and
per-task radar charts (Figures 7–8), written as PNG and SVG.

Figures are built with matplotlib's object API (``Figure``, rendered by Agg on save): no pyplot
state and no global backend switch, so importing this module never changes a notebook's backend.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from apm.data.tasks import TASKS
from apm.reduce.names import MEMORY_NAMES, group_name, human_bytes
from apm.reduce.tables import method_rows
from apm.reduce.units import ALL

DPI = 150
_MIN_AREA, _MAX_AREA = 40.0, 1600.0


def _wide(scores: pd.DataFrame, cells: dict[str, tuple[str, str]]) -> pd.DataFrame:
    """Per method (rows, with its group), the named (metric, task) values as columns."""
    rows = method_rows(scores)
    out = {
        name: rows[(rows["metric"] == m) & (rows["task"] == t)].groupby("method", observed=True)["value"].last()
        for name, (m, t) in cells.items()
    }
    group = rows.groupby("method", observed=True)["group"].first()
    return pd.DataFrame(out).join(group, how="left")


def spans_decades(values: np.ndarray) -> bool:
    """True when positive values span at least a factor of 10: such an axis is drawn on a log scale."""
    positive = values[values > 0]
    return positive.size > 1 and positive.max() / positive.min() >= 10.0


def bubble_areas(storage: np.ndarray) -> np.ndarray:
    """Marker areas growing with storage/hr; log-scaled when storage spans decades."""
    known = np.where(np.isfinite(storage) & (storage > 0), storage, np.nan)
    scaled = np.log10(known) if spans_decades(known[np.isfinite(known)]) else known
    low, high = np.nanmin(scaled, initial=np.inf), np.nanmax(scaled, initial=-np.inf)
    fraction = (scaled - low) / (high - low) if high > low else np.full_like(scaled, 0.5)
    return np.where(np.isfinite(fraction), _MIN_AREA + fraction * (_MAX_AREA - _MIN_AREA), _MIN_AREA)


def tradeoff_figure(scores: pd.DataFrame) -> Figure:
    """Figure 2: x mean TTFT (s), y Overall, bubble area storage per video hour."""
    data = _wide(scores, {"latency": ("ttft_s", ALL), "overall": ("overall", ALL),
                          "storage": ("storage_bytes_per_hour", ALL)}).dropna(subset=["latency", "overall"])
    if data.empty:
        return Figure()
    fig = Figure(figsize=(11, 5.5), dpi=DPI)
    ax = fig.subplots()
    latency, storage = data["latency"].to_numpy(float), data["storage"].to_numpy(float)
    ax.scatter(latency, data["overall"], s=bubble_areas(storage), alpha=0.5, edgecolors="black", linewidths=0.6)
    keys = []  # methods are numbered on the plot and named in the key beside it, so labels never collide
    for number, ((label, row), s) in enumerate(zip(data.iterrows(), storage), start=1):
        ax.annotate(str(number), (row["latency"], row["overall"]), fontsize=7, ha="center", va="center")
        keys.append(f"{number}. {label}" + (f" ({human_bytes(s, '/h')})" if np.isfinite(s) else ""))
    ax.text(1.02, 1.0, "\n".join(keys), transform=ax.transAxes, fontsize=6.5, va="top", ha="left")
    if spans_decades(latency):
        ax.set_xscale("log")
    ax.set_xlabel("Latency: mean time to first token (s)")
    ax.set_ylabel("Overall score")
    ax.set_title("Utility–latency–storage trade-off (bubble area: storage per video hour)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def radar_figure(scores: pd.DataFrame) -> Figure:
    """Figures 7–8: the 12 task scores on a 0–100 radar, one panel per memory protocol (reference
    methods in their own panel); SimpleStream, when present, is drawn in every panel for comparison."""
    data = _wide(scores, {t: ("task_score", t) for t in TASKS}).dropna(subset=list(TASKS), how="all")
    if data.empty:
        return Figure()
    is_simple = data["group"].map(lambda g: group_name(g) == MEMORY_NAMES["none"]).astype(bool)
    simple_stream = data[is_simple]
    groups = list(dict.fromkeys(data.loc[~is_simple, "group"])) or list(dict.fromkeys(data["group"]))
    angles = np.linspace(0, 2 * np.pi, len(TASKS), endpoint=False)
    closed = np.append(angles, angles[0])
    cols = min(3, len(groups))
    rows = -(-len(groups) // cols)
    fig = Figure(figsize=(5.5 * cols, 6.2 * rows), dpi=DPI)
    axes = fig.subplots(rows, cols, subplot_kw={"projection": "polar"}, squeeze=False)
    for ax, group in zip(axes.flat, groups):
        shown = pd.concat([data[data["group"] == group], simple_stream])
        shown = shown[~shown.index.duplicated()]
        for label, row in shown.iterrows():
            values = row[list(TASKS)].to_numpy(float)
            ax.plot(closed, np.append(values, values[0]), linewidth=1.2, label=label)
            ax.fill(closed, np.append(values, values[0]), alpha=0.05)
        ax.set_theta_offset(np.pi / 2)
        ax.set_theta_direction(-1)
        ax.set_xticks(angles, TASKS, fontsize=8)
        ax.set_ylim(0, 100)
        ax.set_rlabel_position(15)
        ax.set_title(group_name(group), fontsize=10, pad=14)
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.08))
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


def write_figures(scores: pd.DataFrame, out: Path) -> list[Path]:
    """``figure2_tradeoff`` and ``figure7_8_radar`` as PNG and SVG under ``out`` (when data allow)."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw in (("figure2_tradeoff", tradeoff_figure), ("figure7_8_radar", radar_figure)):
        fig = draw(scores)
        if not any(ax.has_data() for ax in fig.axes):
            continue
        for suffix in (".png", ".svg"):
            fig.savefig(out / f"{name}{suffix}", dpi=DPI, bbox_inches="tight")
            written.append(out / f"{name}{suffix}")
    return written
