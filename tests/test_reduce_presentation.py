"""What the tables and figures show, in which order and under which caption: the paper's split of
Tables 8/9 and 11/12, Table 3's Streaming/Persistent columns, Figure 2 and Figures 7/8's methods,
row order, and the report's README — each placed by what its classes declare, never by config name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text

from apm.backbones.baselines import AlwaysIntervene, AlwaysSilent, RandomBaseline
from apm.backbones.perceiver import PixelPerceiver
from apm.backbones.vllm_server import VLLMServerBackbone
from apm.cli.reduce import main
from apm.memory.simple import OracleEvidence, SimpleStream
from apm.memory.text import Retrieval, TextSummary
from apm.memory.video import RawVideo
from apm.records.declaration import Declaration
from apm.reduce.figures import bubble_areas, radar_figure, tradeoff_figure, write_figures
from apm.reduce.report_index import write_report_index
from apm.reduce.scores import read_scores
from apm.reduce.tables import write_tables
from apm.testing import fixtures

QWEN, SEED, INTERN = "Qwen3-VL-8B-Instruct", "Seed-2.0-Lite", "InternVL3.5-8B"
PERCEIVER = "Perceiver (pixel-perceiver reference)"
BACKBONES = {QWEN: "qwen3_vl_8b", SEED: "seed_2_0_lite", INTERN: "internvl3_5_8b", "Random": "random",
             "Always-Silent": "always_silent", "Always-Intervene": "always_intervene", PERCEIVER: "perceiver"}
EVENTS, MINE, LEGACY = "Event Memory", "My Stream System", "Legacy Memory"
MEMORIES = {"SimpleStream": "none", "Raw Video as Memory": "raw_video", "Text Summary as Memory": "text_summary",
            "BM25 Retrieval Memory": "retrieval_bm25", "Oracle Evidence": "oracle", EVENTS: "event_memory",
            MINE: "my_system", LEGACY: "legacy"}
METHODS = [  # (memory, backbone), shuffled
    ("Oracle Evidence", SEED), ("Raw Video as Memory", "Random"), ("Text Summary as Memory", QWEN),
    ("SimpleStream", "Random"), ("BM25 Retrieval Memory", QWEN), ("SimpleStream", INTERN),
    ("Raw Video as Memory", QWEN), ("SimpleStream", "Always-Intervene"), ("Text Summary as Memory", SEED),
    ("Raw Video as Memory", "Always-Silent"), ("SimpleStream", QWEN), ("Raw Video as Memory", SEED),
    (EVENTS, QWEN), (MINE, QWEN), (LEGACY, QWEN),
]
DECLARED: dict[str, Declaration | None] = {
    "SimpleStream": SimpleStream.declaration, "Raw Video as Memory": RawVideo.declaration,
    "Text Summary as Memory": TextSummary.declaration, "BM25 Retrieval Memory": Retrieval.declaration,
    "Oracle Evidence": OracleEvidence.declaration,
    EVENTS: Declaration("specialised", streaming=True, persistent=True, tag="reference system"),  # EventMemory's
    MINE: Declaration("specialised", streaming=True, persistent=False),  # a user's system: no config name known
    LEGACY: None,  # a run that predates declarations
    QWEN: VLLMServerBackbone.declaration, SEED: VLLMServerBackbone.declaration, INTERN: VLLMServerBackbone.declaration,
    "Random": RandomBaseline.declaration, "Always-Silent": AlwaysSilent.declaration,
    "Always-Intervene": AlwaysIntervene.declaration, PERCEIVER: PixelPerceiver.declaration,
}
"""What each memory and backbone class declares, as its runs record it."""

SIMPLESTREAM = f"SimpleStream · {QWEN}"
SPECIALISED = [f"{EVENTS} · {QWEN} (reference system)", f"{MINE} · {QWEN}"]
MAIN_ORDER = [  # baseline, general (protocols by name), specialised, undeclared
    SIMPLESTREAM, f"SimpleStream · {INTERN}",
    f"BM25 Retrieval Memory · {QWEN}",
    f"Raw Video as Memory · {SEED}", f"Raw Video as Memory · {QWEN}",
    f"Text Summary as Memory · {SEED}", f"Text Summary as Memory · {QWEN}",
    *SPECIALISED, f"{LEGACY} · {QWEN}",
]
REFERENCE_ORDER = [  # by memory, then tag and backbone name
    f"Oracle Evidence · {SEED} (oracle-evidence control)",
    "Raw Video as Memory · Always-Silent (baseline)", "Raw Video as Memory · Random (baseline)",
    "SimpleStream · Always-Intervene (baseline)", "SimpleStream · Random (baseline)",
]


def _run(memory: str, backbone: str) -> fixtures.Line:
    run = fixtures.run_info(memory=memory, backbone=backbone,
                            declarations={"memory": DECLARED[memory], "backbone": DECLARED[backbone]})
    run["choices"] = {"memory": MEMORIES[memory], "backbone": BACKBONES[backbone]}
    return run


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    for i, method in enumerate(METHODS):  # seeds under which every method has all 12 tasks (an Overall)
        run_dir = fixtures.synthetic_run(root / f"m{i}", _run(*method), trajectories=3, seed=40 + i)
        if method[0] == "SimpleStream":  # no persistent state: 0 B/h
            path = run_dir / "memory" / "memory.jsonl"
            lines = [orjson.loads(line) | {"bytes": 0} for line in path.read_bytes().splitlines()]
            fixtures.write_jsonl(path, lines)
    assert main([str(root), "--out", str(root / "out"), "--bootstrap", "0"]) == 0
    return root / "out"


@pytest.fixture(scope="module")
def scores(out: Path) -> pd.DataFrame:
    return read_scores(out / "scores.csv")


def _table(out: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(out / "tables" / f"{name}.csv", index_col=0, keep_default_na=False, na_values=[""])


def _value(scores: pd.DataFrame, memory: str, backbone: str, metric: str) -> float:
    hit = scores[(scores["memory"] == memory) & (scores["backbone"] == backbone) & (scores["metric"] == metric)
                 & (scores["task"] == "all")]
    return float(hit["value"].iloc[0])


def test_rows_follow_the_papers_order_with_references_last(out: Path) -> None:
    for name in ("table3", "table4", "table_latency", "table_format_failures"):
        assert list(_table(out, name).index) == MAIN_ORDER + REFERENCE_ORDER, name


def test_table3_streaming_and_persistent_columns(out: Path) -> None:
    table = _table(out, "table3")
    assert list(table.columns[:4]) == ["Representation", "Streaming", "Persistent", "CS Und."]
    assert table.loc[SIMPLESTREAM, ["Streaming", "Persistent"]].tolist() == [False, False]
    assert table.loc[f"Raw Video as Memory · {QWEN}", ["Streaming", "Persistent"]].tolist() == [False, True]
    assert table.loc[f"{LEGACY} · {QWEN}", ["Streaming", "Persistent"]].isna().all()  # undeclared
    md = (out / "tables" / "table3.md").read_text()
    assert f"| {SIMPLESTREAM} | ✗ | ✗ |" in md and f"| {LEGACY} · {QWEN} | – | – |" in md
    assert "Table 3: Task performance" in md and "Streaming and Persistent" in md
    tex = (out / "tables" / "table3.tex").read_text()
    assert rf"{SIMPLESTREAM} & $\times$ & $\times$ &" in tex
    assert rf"{SPECIALISED[0]} & \checkmark & \checkmark &" in tex


def test_stateless_protocols_are_not_persistent(out: Path) -> None:
    table = _table(out, "table3")
    for memory in ("SimpleStream", "Oracle Evidence"):
        row = table.loc[[label for label in table.index if label.startswith(f"{memory} · ")]]
        assert not row["Persistent"].any(), memory


def test_tables_8_and_11_hold_the_declared_specialised_systems(out: Path, scores: pd.DataFrame) -> None:
    t8, t11 = _table(out, "table8"), _table(out, "table11")  # retrieval (general) and undeclared ones are not
    assert list(t8.index) == SPECIALISED and list(t8.columns) == ["Representation", "RTF"]
    assert t8.iloc[1]["RTF"] == pytest.approx(_value(scores, MINE, QWEN, "rtf"))
    assert list(t11.index) == SPECIALISED and list(t11.columns) == ["Representation", "Failures", "Rate (%)"]


def test_table9_is_end_to_end_latency_per_backbone_under_video_and_text_memory(
    out: Path, scores: pd.DataFrame
) -> None:
    t9 = _table(out, "table9")
    assert t9.index.name == "Model" and list(t9.index) == [SEED, QWEN]
    assert list(t9.columns) == ["Video memory: Total (s)", "Text memory: Total (s)"]
    for backbone in (SEED, QWEN):
        video = _value(scores, "Raw Video as Memory", backbone, "latency_total_s")
        text = _value(scores, "Text Summary as Memory", backbone, "latency_total_s")
        assert t9.loc[backbone].tolist() == pytest.approx([video, text])
    assert "Table 9: Mean end-to-end latency" in (out / "tables" / "table9.md").read_text()


def test_table12_is_format_failures_per_backbone_with_simplestream_once(out: Path, scores: pd.DataFrame) -> None:
    t12 = _table(out, "table12")
    assert list(t12.index) == [SIMPLESTREAM, SEED, QWEN]  # the paper's SimpleStream only (Qwen3-VL-8B)
    settings = ("w/o memory", "Video memory", "Text memory")
    assert list(t12.columns) == [f"{s}: {c}" for s in settings for c in ("Failures", "Rate (%)")]
    assert t12.loc[SIMPLESTREAM, "w/o memory: Rate (%)"] == pytest.approx(
        _value(scores, "SimpleStream", QWEN, "format_failure_rate"))
    assert t12.loc[SIMPLESTREAM, ["Video memory: Failures", "Text memory: Failures"]].isna().all()
    assert t12.loc[QWEN, "Text memory: Failures"] == _value(scores, "Text Summary as Memory", QWEN, "format_failures")
    assert np.isnan(t12.loc[QWEN, "w/o memory: Failures"])


def test_figure2_shows_raw_video_general_models_specialized_systems_and_one_simplestream(
    scores: pd.DataFrame,
) -> None:
    fig = tradeoff_figure(scores)
    ax = fig.axes[0]
    key = [line.split(". ", 1)[1].rsplit(" (", 1)[0] for line in ax.texts[-1].get_text().splitlines()]
    assert key == [SIMPLESTREAM, f"Raw Video as Memory · {SEED}", f"Raw Video as Memory · {QWEN}", *SPECIALISED]
    sizes = ax.collections[0].get_sizes()  # every other method has the same storage/hr
    assert sizes[0] < sizes[1:].min() and np.ptp(sizes[1:]) == 0


def test_figure2_names_fast_weights_in_the_key_and_never_adds_them_to_the_bubble(scores: pd.DataFrame) -> None:
    storage = scores[(scores["metric"] == "storage_bytes_per_hour") & (scores["memory"] == EVENTS)]
    fast = pd.concat([scores, storage.assign(metric="peak_fast_weight_bytes_mean", value=8_404_992.0)])
    before, after = tradeoff_figure(scores).axes[0], tradeoff_figure(fast).axes[0]
    keys = after.texts[-1].get_text().splitlines()
    assert [k for k in keys if "fast weights 8.02 MiB, apart)" in k] == [k for k in keys if EVENTS in k]
    assert (after.collections[0].get_sizes() == before.collections[0].get_sizes()).all()


def test_bubble_area_is_proportional_to_storage_and_zero_is_smallest() -> None:
    zero, video, video_too = bubble_areas(np.array([0.0, 5e9, 5e9]))
    assert zero < video == video_too
    small, large = bubble_areas(np.array([1e9, 2e9]))
    assert large == pytest.approx(2 * small)
    zero, kib, gib, unknown = bubble_areas(np.array([0.0, 1e3, 1e9, np.nan]))
    assert zero == unknown < kib < gib


def _labels_overlap(labels: list[Text]) -> bool:
    boxes = [t.get_window_extent() for t in labels if t.get_visible() and t.get_text()]
    return any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


@pytest.mark.parametrize("factor", [12.0, 150.0, 4000.0])
def test_figure2_log_axis_labels_are_few_and_do_not_overlap(scores: pd.DataFrame, factor: float) -> None:
    slow = (scores["memory"] == "Raw Video as Memory") & (scores["metric"] == "ttft_s")
    wide = scores.assign(value=scores["value"].where(~slow, scores["value"] * factor))
    fig = tradeoff_figure(wide)
    FigureCanvasAgg(fig).draw()
    axis = fig.axes[0].xaxis
    low, high = fig.axes[0].get_xlim()
    labels = [t for t, tick in zip(axis.get_ticklabels(), axis.get_ticklocs()) if low <= tick <= high]
    assert fig.axes[0].get_xscale() == "log" and 1 <= sum(bool(t.get_text()) for t in labels) <= 6
    assert not any(t.get_text() for t in axis.get_ticklabels(minor=True))
    assert not _labels_overlap(labels)


def _legends(fig: Figure) -> dict[str, list[str]]:
    return {ax.get_title(): [t.get_text() for t in ax.get_legend().get_texts()] for ax in fig.axes if ax.get_visible()}


def test_figure7_general_models_under_video_and_text_memory_with_one_simplestream(scores: pd.DataFrame) -> None:
    assert _legends(radar_figure(scores, "general")) == {
        "BM25 Retrieval Memory": [SIMPLESTREAM, f"BM25 Retrieval Memory · {QWEN}"],
        "Raw Video as Memory": [SIMPLESTREAM, f"Raw Video as Memory · {SEED}", f"Raw Video as Memory · {QWEN}"],
        "Text Summary as Memory": [SIMPLESTREAM, f"Text Summary as Memory · {SEED}",
                                   f"Text Summary as Memory · {QWEN}"],
    }


def test_figure8_specialised_systems_with_one_simplestream(scores: pd.DataFrame) -> None:
    assert _legends(radar_figure(scores, "specialised")) == {EVENTS: [SIMPLESTREAM, SPECIALISED[0]],
                                                            MINE: [SIMPLESTREAM, SPECIALISED[1]]}


def test_the_perceivers_ceilings_are_reference_rows_and_dotted_in_the_figures(tmp_path: Path) -> None:
    memories = ("SimpleStream", "Raw Video as Memory", "Text Summary as Memory")
    for i, method in enumerate((m, b) for m in memories for b in (QWEN, PERCEIVER)):
        fixtures.synthetic_run(tmp_path / f"m{i}", _run(*method), trajectories=3, seed=40 + i)
    assert main([str(tmp_path), "--out", str(tmp_path / "out"), "--bootstrap", "0"]) == 0
    ceilings = [f"{m} · {PERCEIVER}" for m in memories]
    references = sorted(ceilings)  # the reference block: by protocol name
    assert list(_table(tmp_path / "out", "table4").index) == [f"{m} · {QWEN}" for m in memories] + references
    scores = read_scores(tmp_path / "out" / "scores.csv")
    radar = radar_figure(scores, "general")
    panels = {m: [SIMPLESTREAM, f"{m} · {QWEN}", *sorted([ceilings[0], f"{m} · {PERCEIVER}"])] for m in memories[1:]}
    assert _legends(radar) == panels  # each panel: its protocol's ceiling and SimpleStream's
    assert all(line.get_linestyle() == ":" for ax in radar.axes for line in ax.get_lines()[2:])
    tradeoff = tradeoff_figure(scores)
    solid, hollow = tradeoff.axes[0].collections
    assert len(solid.get_offsets()) == 2 and len(hollow.get_offsets()) == 3  # SimpleStream, raw video; 3 ceilings
    assert all(f"{n}. {label}" in tradeoff.axes[0].texts[-1].get_text() for n, label in enumerate(references, start=3))


def test_figures_7_and_8_are_separate_files(out: Path) -> None:
    names = {p.name for p in (out / "figures").iterdir()}
    figures = ("figure2_tradeoff", "figure7_radar", "figure8_radar", "figure_state_size")
    assert names == {f"{n}.{s}" for n in figures for s in ("png", "svg")}


def test_figure8_needs_a_specialised_system(tmp_path: Path, scores: pd.DataFrame) -> None:
    general = scores[scores["method_family"] != "specialised"]
    assert {p.stem for p in write_figures(general, tmp_path)} == {"figure2_tradeoff", "figure7_radar"}


def test_report_index_names_every_file_with_its_caption(tmp_path: Path, scores: pd.DataFrame) -> None:
    (tmp_path / "scores.csv").write_text("")
    tables = write_tables(scores, tmp_path / "tables")
    figures = write_figures(scores, tmp_path / "figures")
    readme = write_report_index(tmp_path, tables, figures).read_text()
    assert readme == (tmp_path / "README.md").read_text()
    for path in tables + figures:
        assert f"({path.relative_to(tmp_path).as_posix()})" in readme
    assert "| Table 3 | Task performance and efficiency" in readme
    assert "[md](tables/table3.md), [csv](tables/table3.csv), [tex](tables/table3.tex) |" in readme
    assert "| Figure 7 | Scores on all 12 tasks for general video models" in readme
    assert "[png](figures/figure8_radar.png), [svg](figures/figure8_radar.svg) |" in readme
    assert "[`scores.csv`](scores.csv)" in readme and "compare.csv" not in readme
    assert readme.index("| Table 3 |") < readme.index("| Table 12 |") < readme.index("| Figure 2 |")
