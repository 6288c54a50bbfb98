"""Table 3 by memory representation (issue 22, item 6): the specialised systems sit under the paper's
representation headings in its order, whatever their names, in Markdown, LaTeX and CSV; ``scores.csv``
carries each method's declared representation; the state-size figure's data is each method's bytes
per session index, mean over trajectories."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from apm.records.declaration import REPRESENTATIONS, Declaration
from apm.reduce.figures import state_size_by_session, write_figures
from apm.reduce.load import load_runs
from apm.reduce.names import OTHER_SYSTEMS
from apm.reduce.scores import score_table
from apm.reduce.tables import method_rows, write_tables
from apm.testing.fixtures import (
    GENERAL_METHOD,
    memory_line,
    record,
    run_info,
    synthetic_run,
    write_jsonl,
    write_run,
)

SYSTEM_BACKBONE = Declaration("general")

SYSTEMS = {  # memory name → representation; names sort against the paper's order on purpose
    "zeta_kv": "kv_cache", "yak_features": "visual_features", "xeno_tree": "event_tree",
    "wisp_weights": "parametric", "vole_thoughts": "reasoning_thoughts", "aardvark_system": "",
}
"""Every representation, one system each (and one that declares none), named so that alphabetical order
is the paper's order reversed: the rows' order can only come from the declarations."""


def _system(name: str, representation: str) -> dict:
    memory = Declaration("specialised", streaming=True, persistent=True, representation=representation)  # type: ignore[arg-type]
    return run_info(memory=name, backbone="Tiny", declarations={"memory": memory, "backbone": SYSTEM_BACKBONE})


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, Path]:
    root = tmp_path_factory.mktemp("representations")
    runs = {name: _system(name, rep) for name, rep in SYSTEMS.items()}
    runs["raw_video"] = run_info(declarations=GENERAL_METHOD)
    for seed, (name, run) in enumerate(runs.items()):
        synthetic_run(root / name, run, trajectories=2, seed=seed)
    loaded = load_runs([root])
    scores = score_table(loaded.records, loaded.judgements, loaded.memory, reps=0)
    write_tables(scores, root / "tables")
    return scores, root / "tables"


def test_scores_carry_the_declared_representation(report: tuple[pd.DataFrame, Path]) -> None:
    scores, _ = report
    declared = scores.groupby("memory", observed=True)["representation"].agg(set).to_dict()
    assert declared == {**{name: {rep} for name, rep in SYSTEMS.items()}, "raw_video": {""}}


def _markdown_blocks(path: Path) -> list[tuple[str, list[str]]]:
    """(heading, row labels below it) of a Markdown table, in order."""
    blocks: list[tuple[str, list[str]]] = []
    for line in path.read_text().splitlines()[4:]:
        first = line.split(" | ")[0].removeprefix("| ")
        if first.startswith("**"):
            blocks.append((first.strip("*"), []))
        else:
            blocks[-1][1].append(first.split(" · ")[0])
    return blocks


PAPER_BLOCKS = [*REPRESENTATIONS.values(), OTHER_SYSTEMS]
SYSTEM_ROWS = [["Zeta Kv"], ["Yak Features"], ["Xeno Tree"], ["Wisp Weights"], ["Vole Thoughts"], ["Aardvark System"]]


@pytest.mark.parametrize("table", ["table3", "table4", "table10"])
def test_all_method_tables_group_the_systems_by_representation_in_the_papers_order(
    report: tuple[pd.DataFrame, Path], table: str
) -> None:
    blocks = _markdown_blocks(report[1] / f"{table}.md")
    assert blocks == [("Raw Video as Memory", ["Raw Video as Memory"]),
                      *zip(PAPER_BLOCKS, SYSTEM_ROWS)]


@pytest.mark.parametrize("table", ["table8", "table11"])
def test_system_tables_group_by_representation(report: tuple[pd.DataFrame, Path], table: str) -> None:
    assert _markdown_blocks(report[1] / f"{table}.md") == list(zip(PAPER_BLOCKS, SYSTEM_ROWS))


def test_latex_spans_each_heading_above_its_block(report: tuple[pd.DataFrame, Path]) -> None:
    lines = (report[1] / "table8.tex").read_text().splitlines()
    body = lines[lines.index(r"\midrule") + 1: lines.index(r"\bottomrule")]
    assert body[0] == r"\multicolumn{2}{l}{\textit{KV Cache}} \\"
    assert body[1].startswith("Zeta Kv")
    assert body[2:4] == [r"\midrule", r"\multicolumn{2}{l}{\textit{Visual Tokens / Features}} \\"]
    headings = [line for line in body if line.startswith(r"\multicolumn")]
    assert len(headings) == len(PAPER_BLOCKS)


def test_csv_names_each_rows_representation_in_row_order(report: tuple[pd.DataFrame, Path]) -> None:
    table = pd.read_csv(report[1] / "table3.csv", keep_default_na=False)
    assert list(table.columns[:4]) == ["Method", "Representation", "Streaming", "Persistent"]
    assert list(table["Representation"]) == ["", *SYSTEMS.values()]


def test_a_scores_csv_from_before_representations_puts_its_systems_under_the_generic_heading(
    report: tuple[pd.DataFrame, Path],
) -> None:
    older = report[0].drop(columns="representation")
    rows = method_rows(older).drop_duplicates("config_hash")
    headings = dict(zip(rows["memory"].astype(str), rows["heading"]))
    assert headings == {**dict.fromkeys(SYSTEMS, OTHER_SYSTEMS), "raw_video": "Raw Video as Memory"}


def test_tables_without_headings_are_unchanged(report: tuple[pd.DataFrame, Path]) -> None:
    text = (report[1] / "table6.md").read_text()
    assert "**KV Cache**" not in text
    assert "Representation" not in pd.read_csv(report[1] / "table6.csv").columns


def _memory_run(root: Path, name: str, representation: str, sizes: dict[str, list[int]]) -> dict:
    """A system's run dir: one MCQA record per trajectory and the given state bytes per session."""
    run = _system(name, representation)
    records = [record("ER", "C1", trajectory=t, run=run) for t in sizes]
    memory = [memory_line(t, i, size, 0.5 * (i + 1), run)
              for t, states in sizes.items() for i, size in enumerate(states)]
    write_run(root / name, records, memory=memory)
    return run


def test_state_size_is_the_mean_over_trajectories_per_session_index(tmp_path: Path) -> None:
    _memory_run(tmp_path, "growing_kv", "kv_cache", {"T1": [100, 300, 500], "T2": [300, 500]})
    _memory_run(tmp_path, "bounded_features", "visual_features", {"T1": [64, 64, 64], "T2": [64, 64]})
    general = run_info(declarations=GENERAL_METHOD)
    write_jsonl(tmp_path / "general" / "memory" / "m.jsonl", [memory_line("T1", 0, 10**6, 0.5, general)])
    loaded = load_runs([tmp_path])
    scores = score_table(loaded.records, loaded.judgements, loaded.memory, reps=0)
    data = state_size_by_session(scores, loaded.memory)
    assert list(data.columns) == ["method", "representation", "session", "bytes", "trajectories"]
    got = {(r.method.split(" · ")[0], r.session): (r.bytes, r.trajectories) for r in data.itertuples()}
    assert got == {("Growing Kv", 1): (200.0, 2), ("Growing Kv", 2): (400.0, 2), ("Growing Kv", 3): (500.0, 1),
                   ("Bounded Features", 1): (64.0, 2), ("Bounded Features", 2): (64.0, 2),
                   ("Bounded Features", 3): (64.0, 1)}
    assert list(dict.fromkeys(data["representation"])) == ["kv_cache", "visual_features"]
    written = write_figures(scores, tmp_path / "figures", loaded.memory)
    assert tmp_path / "figures" / "figure_state_size.png" in written


def test_no_state_figure_without_a_systems_memory_lines(tmp_path: Path) -> None:
    synthetic_run(tmp_path / "general", run_info(declarations=GENERAL_METHOD), trajectories=1)
    loaded = load_runs([tmp_path])
    scores = score_table(loaded.records, loaded.judgements, loaded.memory, reps=0)
    assert state_size_by_session(scores, loaded.memory).empty
    names = {p.name for p in write_figures(scores, tmp_path / "figures", loaded.memory)}
    assert "figure_state_size.png" not in names


def _bench_streaming():  # type: ignore[no-untyped-def]
    path = Path(__file__).resolve().parents[1] / "bench" / "bench_streaming.py"
    spec = importlib.util.spec_from_file_location("bench_streaming", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_measures_every_streaming_reference_conf_memory_declares() -> None:
    """bench/bench_streaming.py finds its systems by declaration: the two built-in references today,
    any new one once its config lands, never a general protocol."""
    bench = _bench_streaming()
    found = bench.streaming_references()
    assert {"kv_cache", "event_memory"} <= set(found)
    assert not {"none", "raw_video", "text_summary", "retrieval_bm25", "oracle"} & set(found)
    assert bench.system_overrides("event_memory") == ["memory.max_tokens=16"]  # it writes descriptions
    assert bench.system_overrides("kv_cache") == []
