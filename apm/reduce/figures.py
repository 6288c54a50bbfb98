"""The paper's figures from ``scores.csv``: the utility–latency–storage bubble chart (Figure 2) and
the 12-task radar charts of general models (Figure 7) and specialized systems (Figure 8), and from the
memory lines the specialised systems' state size per session by representation, written as
PNG and SVG. Methods are placed by their declared family (docs/scores.md, "Groups and labels"):
baselines and the oracle are in no figure; each figure shows the one SimpleStream method
(:func:`~apm.reduce.tables.paper_simplestream`) for comparison, and a radar panel also the
information ceilings (reference backbones declaring ``ceiling``) under its protocol and under
SimpleStream, dotted.

Figures are built with matplotlib's object API (``Figure``, rendered by Agg on save): no pyplot
state and no global backend switch, so importing this module never changes a notebook's backend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from apm.data.tasks import TASKS
from apm.records.declaration import REPRESENTATIONS
from apm.reduce.names import heading, human_bytes, memory_name
from apm.reduce.tables import ISOLATED, coverage_gaps, method_rows, paper_simplestream
from apm.reduce.units import ALL

DPI = 150
_ZERO_AREA, _MAX_AREA = 20.0, 1600.0
"""Marker area of a method without (or with unknown) storage, and of the largest storage."""


def _wide(scores: pd.DataFrame, cells: dict[str, tuple[str, str]]) -> pd.DataFrame:
    """Per method (rows in the paper's order, with its group and memory name), the named (metric,
    task) values as columns."""
    rows = method_rows(scores)
    out = {
        name: rows[(rows["metric"] == m) & (rows["task"] == t)].groupby("method", observed=True)["value"].last()
        for name, (m, t) in cells.items()
    }
    columns = ["group", "method_family", "ceiling", "memory", "memory_config", "backbone_config", "memory_variant",
               "settings"]
    names = rows.groupby("method", observed=True)[columns].first().astype(str)
    return pd.DataFrame(out).join(names, how="left")


def _simplestream(data: pd.DataFrame) -> pd.DataFrame:
    """The one SimpleStream method a figure shows (:func:`~apm.reduce.tables.paper_simplestream`)."""
    return data.loc[[paper_simplestream(data)]] if paper_simplestream(data) else data.iloc[:0]


def _ceilings(data: pd.DataFrame) -> pd.DataFrame:
    """The information ceilings: reference rows whose backbone declares ``ceiling``."""
    return data[data["ceiling"] == "True"]


def spans_decades(values: np.ndarray) -> bool:
    """True when positive values span at least a factor of 10: such an axis is drawn on a log scale."""
    positive = values[values > 0]
    return positive.size > 1 and positive.max() / positive.min() >= 10.0


def bubble_areas(storage: np.ndarray) -> np.ndarray:
    """Marker areas growing with storage/hr: proportional to it, or when it spans decades, to its
    log10 between a tenth of the largest area and the largest. 0 B/h (and unknown storage) gets the
    smallest marker, below every positive storage."""
    known = np.where(np.isfinite(storage) & (storage > 0), storage, np.nan)
    positive = known[np.isfinite(known)]
    if positive.size == 0:
        return np.full(storage.shape, _ZERO_AREA)
    if spans_decades(positive):
        low, high = np.log10(positive.min()), np.log10(positive.max())
        fraction = 0.1 + 0.9 * (np.log10(known) - low) / (high - low)
    else:
        fraction = known / positive.max()  # ≥ 0.1: the values span less than a factor of 10
    return np.where(np.isfinite(fraction), fraction * _MAX_AREA, _ZERO_AREA)


def _readable_log_axis(ax: Axes, values: np.ndarray) -> None:
    """A log x axis with a few plain-number labels (at 1, 2, 5 × 10^k when ``values`` span at most
    two decades, else at powers of ten) and unlabelled minor ticks."""
    positive = values[values > 0]
    subs = (1.0, 2.0, 5.0) if positive.max() / positive.min() <= 100 else (1.0,)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=subs, numticks=8))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def tradeoff_figure(scores: pd.DataFrame) -> Figure:
    """Figure 2: x mean TTFT (s), y Overall (0–100), bubble area storage per video hour; general models
    under raw video memory, specialized systems and SimpleStream, and the information ceilings (hollow).
    A method's fast weights are named in the key beside its storage, never added to the bubble (B.4)."""
    data = _wide(scores, {"latency": ("ttft_s", ALL), "overall": ("overall", ALL),
                          "storage": ("storage_bytes_per_hour", ALL),
                          "fast": ("peak_fast_weight_bytes_mean", ALL)}).dropna(subset=["latency", "overall"])
    shown = (data["group"] == "raw_video") | (data["method_family"] == "specialised")
    ceilings = _ceilings(data)
    data = pd.concat([_simplestream(data), data[shown], ceilings])
    if data.empty:
        return Figure()
    fig = Figure(figsize=(11, 5.5), dpi=DPI)
    ax = fig.subplots()
    latency, storage = data["latency"].to_numpy(float), data["storage"].to_numpy(float)
    areas, hollow = bubble_areas(storage), data.index.isin(ceilings.index)
    overall = data["overall"].to_numpy(float)
    ax.scatter(latency[~hollow], overall[~hollow], s=areas[~hollow], alpha=0.5, edgecolors="black", linewidths=0.6)
    ax.scatter(latency[hollow], overall[hollow], s=areas[hollow], facecolors="none", edgecolors="tab:red",
               linewidths=1.2, linestyles=":")
    keys = []  # methods are numbered on the plot and named in the key beside it, so labels never collide
    for number, ((label, row), s) in enumerate(zip(data.iterrows(), storage), start=1):
        ax.annotate(str(number), (row["latency"], row["overall"]), fontsize=7, ha="center", va="center")
        sizes = [human_bytes(s, "/h")] if np.isfinite(s) else []
        if row["fast"] > 0:
            sizes.append(f"fast weights {human_bytes(row['fast'])}, apart")
        keys.append(f"{number}. {label}" + (f" ({'; '.join(sizes)})" if sizes else ""))
    ax.text(1.02, 1.0, "\n".join(keys), transform=ax.transAxes, fontsize=6.5, va="top", ha="left")
    if spans_decades(latency):
        _readable_log_axis(ax, latency)
    ax.margins(x=0.12)  # room for the bubbles at the ends of the axis
    ax.set_ylim(-10, 110)
    ax.set_xlabel("Latency: mean time to first token (s)")
    ax.set_ylabel("Overall score")
    ax.set_title("Utility–latency–storage trade-off (bubble area: storage per video hour)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def radar_figure(scores: pd.DataFrame, kind: str = "general") -> Figure:
    """The 12 task scores on a 0–100 radar, one panel per memory protocol of the methods of ``kind``
    (``general``: Figure 7; ``specialised``: Figure 8), each panel with the one SimpleStream method."""
    data = _wide(scores, {t: ("task_score", t) for t in TASKS}).dropna(subset=list(TASKS), how="all")
    groups = list(dict.fromkeys(data.loc[data["method_family"] == kind, "group"]))
    if not groups:
        return Figure()
    simplestream = _simplestream(data)
    ceilings = _ceilings(data)
    angles = np.linspace(0, 2 * np.pi, len(TASKS), endpoint=False)
    closed = np.append(angles, angles[0])
    cols = min(3, len(groups))
    rows = -(-len(groups) // cols)
    fig = Figure(figsize=(5.5 * cols, 6.2 * rows), dpi=DPI)
    axes = fig.subplots(rows, cols, subplot_kw={"projection": "polar"}, squeeze=False)
    for ax, group in zip(axes.flat, groups):
        ceiling = ceilings[ceilings["memory_config"].isin([*simplestream["memory_config"], group])]
        for label, row in pd.concat([simplestream, data[data["group"] == group], ceiling]).iterrows():
            values = row[list(TASKS)].to_numpy(float)
            dashed = label in simplestream.index  # SimpleStream
            style = ":" if label in ceiling.index else "--" if dashed else "-"
            ax.plot(closed, np.append(values, values[0]), style, linewidth=1.2, label=label)
            ax.fill(closed, np.append(values, values[0]), alpha=0.05)
        ax.set_theta_offset(np.pi / 2)
        ax.set_theta_direction(-1)
        ax.set_xticks(angles, TASKS, fontsize=8)
        ax.set_ylim(0, 100)
        ax.set_rlabel_position(15)
        ax.set_title(memory_name(str(data.loc[data["group"] == group, "memory"].iloc[0])), fontsize=10, pad=14)
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.08))
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


STATE_COLUMNS = ["method", "representation", "session", "bytes", "trajectories"]


def state_size_by_session(scores: pd.DataFrame, memory: pd.DataFrame | None) -> pd.DataFrame:
    """Per specialised method (in row order) and session (1 = after the first), the persistent state's
    bytes (memory lines, newest per session), mean over the trajectories that have that session, and
    how many they are."""
    if memory is None or memory.empty or scores.empty:
        return pd.DataFrame(columns=STATE_COLUMNS)
    methods = method_rows(scores).drop_duplicates("config_hash")
    systems = methods[methods["method_family"].astype(str) == "specialised"].set_index("config_hash")
    lines = memory.assign(config_hash=memory["config_hash"].astype(str))
    lines = lines[lines["config_hash"].isin(systems.index.astype(str))]
    if lines.empty:
        return pd.DataFrame(columns=STATE_COLUMNS)
    sizes = lines.groupby(["config_hash", "session_index"], observed=True)["bytes"].agg(["mean", "count"])
    out = sizes.reset_index().rename(columns={"mean": "bytes", "count": "trajectories"})
    out = out.assign(method=out["config_hash"].map(systems["method"].astype(str)),
                     representation=out["config_hash"].map(systems["representation"].astype(str)),
                     session=out["session_index"].astype(int) + 1,
                     order=out["config_hash"].map(systems["method"].cat.codes))
    out = out.sort_values(["order", "session"], kind="stable").reset_index(drop=True)
    return out[STATE_COLUMNS].astype({"trajectories": int, "bytes": float})


def state_size_figure(scores: pd.DataFrame, memory: pd.DataFrame | None) -> Figure:
    """Each specialised method's state bytes after each session (:func:`state_size_by_session`), one
    line per method, coloured by its representation (grey: none declared); log y when sizes span decades."""
    data = state_size_by_session(scores, memory)
    if data.empty:
        return Figure()
    colours = dict(zip(map(str, REPRESENTATIONS), ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")))
    fig = Figure(figsize=(9, 5), dpi=DPI)
    ax = fig.subplots()
    for method, line in data.groupby("method", sort=False):
        representation = str(line["representation"].iloc[0])
        shown = heading("specialised", "", representation)
        ax.plot(line["session"], line["bytes"], "o-", color=colours.get(representation, "tab:gray"),
                linewidth=1.4, markersize=4, label=f"{method} [{shown}]")
    if spans_decades(data["bytes"].to_numpy(float)):
        ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: human_bytes(value)))
    ax.set_xlabel("Session of the trajectory (state after it)")
    ax.set_ylabel("Persistent state (mean over trajectories)")
    ax.set_title("State size per session, by memory representation")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()
    return fig


Draw = Callable[[pd.DataFrame, pd.DataFrame | None], Figure]
"""How a figure is drawn: from the scores and the memory lines (None when not loaded)."""


def _from_scores(draw: Callable[[pd.DataFrame], Figure]) -> Draw:
    """A figure drawn from the scores alone."""
    return lambda scores, _memory: draw(scores)


@dataclass(frozen=True)
class FigureSpec:
    """A figure: its file name, paper number, caption and how it is drawn from the scores and memory lines."""

    name: str
    paper: str
    caption: str
    draw: Draw
    needs: str
    """What a reduction needs for the figure to be drawn (said when it is skipped)."""


FIGURES = (
    FigureSpec(
        "figure2_tradeoff", "Figure 2",
        "Utility-latency-storage trade-off across evaluated methods. Bubble size represents storage cost per "
        "hour. General video models are shown under Raw Video as Memory, with the specialized memory systems "
        "and SimpleStream. Latency: time to first token in isolated mode (one request at a time after a warm-up); "
        "a method without isolated records is not drawn. Fast weights (parametric memory) are named in the key, "
        "not added to the bubble (B.4).",
        _from_scores(tradeoff_figure),
        f"{ISOLATED}, of a general model under raw video, a specialised system or SimpleStream",
    ),
    FigureSpec(
        "figure7_radar", "Figure 7",
        "Scores on all 12 tasks for general video models under video- and text-memory protocols. SimpleStream "
        "is shown in the same figure for comparison. All axes use a 0–100 scale.",
        _from_scores(partial(radar_figure, kind="general")),
        "task scores of a general video model",
    ),
    FigureSpec(
        "figure8_radar", "Figure 8",
        "Scores on all 12 tasks for specialized streaming-memory methods and SimpleStream. All axes use a "
        "0–100 scale.",
        _from_scores(partial(radar_figure, kind="specialised")),
        "task scores of a specialised memory system (a class declaring family 'specialised')",
    ),
    FigureSpec(
        "figure_state_size", "State size by representation",
        "Persistent-state size of each specialised memory system after each session of a trajectory (bytes on "
        "disk, mean over the trajectories having that session), coloured by its memory representation: what grows "
        "with the video and what stays bounded (docs/scores.md).",
        state_size_figure,
        "memory lines of a specialised memory system",
    ),
)


def partial_footnote(fig: Figure, scores: pd.DataFrame) -> str:
    """What each partial method the figure names (its label ends in '(partial)') is missing, one line each."""
    gaps = coverage_gaps(scores)
    labels = method_rows(scores).drop_duplicates("config_hash").set_index("config_hash")["method"].astype(str)
    shown = " ".join(t.get_text() for t in fig.findobj(Text))
    return "\n".join(dict.fromkeys(f"{labels[h]}: {gap}" for h, gap in gaps.items() if labels.get(h, "") in shown))


def write_figures(scores: pd.DataFrame, out: Path, memory: pd.DataFrame | None = None) -> list[Path]:
    """Every figure of :data:`FIGURES` as PNG and SVG under ``out`` (those the data allow: the state
    figure needs the ``memory`` lines); a figure showing partial methods says below it what each is
    missing (docs/scores.md, "Coverage")."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for spec in FIGURES:
        fig = spec.draw(scores, memory)
        if not any(ax.has_data() for ax in fig.axes):
            continue
        footnote = partial_footnote(fig, scores)
        if footnote:
            fig.text(0.0, 0.0, footnote, fontsize=6, ha="left", va="top", wrap=True)
        for suffix in (".png", ".svg"):
            fig.savefig(out / f"{spec.name}{suffix}", dpi=DPI, bbox_inches="tight")
            written.append(out / f"{spec.name}{suffix}")
    return written
