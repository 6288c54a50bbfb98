"""apm-reduce end to end: scores.csv, tables (md/csv/tex), figures, paired comparison, W&B skip."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from apm.backbones.baselines import RandomBaseline
from apm.backbones.vllm_server import VLLMServerBackbone
from apm.cli.reduce import main
from apm.memory.simple import SimpleStream
from apm.publish.report import report_run, report_tables, wandb_usable
from apm.publish.wandb_runs import PublishOptions, chunks, read_all
from apm.reduce import bootstrap
from apm.reduce.figures import bubble_areas, spans_decades, write_figures
from apm.reduce.load import load_runs
from apm.reduce.names import human_bytes, method_label
from apm.reduce.scores import SCORE_COLUMNS, TASK_ORDER, read_scores
from apm.testing import fixtures

SIMPLESTREAM = {"memory": SimpleStream.declaration, "backbone": VLLMServerBackbone.declaration}
RANDOM = {"memory": SimpleStream.declaration, "backbone": RandomBaseline.declaration}


@pytest.fixture(scope="module")
def reduced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = fixtures.small_run_set(tmp_path_factory.mktemp("runs"))
    fixtures.synthetic_run(root / "none", fixtures.run_info(memory="none", declarations=SIMPLESTREAM),
                           trajectories=4, seed=1)
    fixtures.synthetic_run(root / "rand", fixtures.run_info(memory="none", backbone="random", declarations=RANDOM),
                           trajectories=4, seed=2)
    out = root / "out"
    assert main([str(root / "main"), str(root / "ea"), str(root / "none"), str(root / "rand"),
                 "--out", str(out), "--bootstrap", "50"]) == 0
    return out


def test_scores_csv(reduced: Path) -> None:
    scores = read_scores(reduced / "scores.csv")
    asked = load_runs(p for p in reduced.parent.iterdir() if p != reduced).records
    per_task = scores[scores["task"].isin(TASK_ORDER)]
    pairs = {tuple(pair) for pair in per_task[["config_hash", "task"]].drop_duplicates().to_numpy()}
    assert pairs == {tuple(pair) for pair in asked[["config_hash", "task"]].drop_duplicates().to_numpy()}
    assert scores["judge"].isin(["judge-x", ""]).all()
    assert set(scores["memory"]) == {"raw_video", "restricted", "none"}


def test_table4_rows_and_names(reduced: Path) -> None:
    table = pd.read_csv(reduced / "tables" / "table4.csv", index_col="Method")
    assert list(table.index) == [
        "SimpleStream · Qwen3-VL-8B-Instruct", "Raw Video as Memory · Qwen3-VL-8B-Instruct",
        "SimpleStream · Random (baseline)",
    ]
    raw = table.loc["Raw Video as Memory · Qwen3-VL-8B-Instruct"]
    assert raw["EST"] == pytest.approx(100.0)
    assert raw["EA"] == pytest.approx(50.0)  # the restricted-memory EA run sits in its main protocol's row
    md = (reduced / "tables" / "table4.md").read_text()
    # ER's errored instance counts as wrong (1 of 4 right) and its cell is marked
    assert "| Method | ER | EST |" in md and "| Raw Video as Memory · Qwen3-VL-8B-Instruct | 25.00† | 100.00 |" in md
    assert "†: the method had backbone errors" in md and "Judge: judge-x" in md


def test_an_ea_run_sharing_the_dataset_name_contributes_only_ea_scores(tmp_path: Path) -> None:
    root = fixtures.small_run_set(tmp_path)
    for f in (root / "ea" / "records").glob("*.jsonl"):  # the shipped ea_restricted preset: same dataset
        f.write_text(f.read_text().replace('"dataset":"apm-ea"', '"dataset":"apm"'))
    assert main([str(root), "--out", str(tmp_path / "out"), "--bootstrap", "0", "--no-figures"]) == 0
    tables = tmp_path / "out" / "tables"
    for name in ("table3", "table_latency", "table_format_failures", "table4", "table13"):
        rows = pd.read_csv(tables / f"{name}.csv", index_col="Method").index
        assert list(rows) == ["Raw Video as Memory · Qwen3-VL-8B-Instruct"], (name, list(rows))
    assert pd.read_csv(tables / "table4.csv", index_col="Method").iloc[0]["EA"] == pytest.approx(50.0)


def test_table3_units_and_latex(reduced: Path) -> None:
    md = (reduced / "tables" / "table3.md").read_text()
    assert "200.00 B/h" in md  # storage per hour of the hand-built run
    tex = (reduced / "tables" / "table3.tex").read_text()
    assert r"\begin{tabular}{lrrrrrrrr}" in tex and r"\toprule" in tex and "Storage/hr" in tex


def test_table7_superscripts(reduced: Path) -> None:
    assert "<sup>50.00</sup>" in (reduced / "tables" / "table7.md").read_text()
    assert "$^{50.00}$" in (reduced / "tables" / "table7.tex").read_text()
    assert "ERA sup" in (reduced / "tables" / "table7.csv").read_text()


def test_table13_and_table10(reduced: Path) -> None:
    t13 = pd.read_csv(reduced / "tables" / "table13.csv", index_col="Method")
    assert t13.loc["Raw Video as Memory · Qwen3-VL-8B-Instruct", "Original Acc."] == pytest.approx(200 / 3)
    assert "175.00 B" in (reduced / "tables" / "table10.md").read_text()


@pytest.mark.parametrize("name", ["figure2_tradeoff", "figure7_radar"])
def test_figures(reduced: Path, name: str) -> None:
    with Image.open(reduced / "figures" / f"{name}.png") as png:
        width, height = png.size
    assert width > 600 and height > 400
    assert (reduced / "figures" / f"{name}.svg").read_text().lstrip().startswith("<?xml")


def test_compare_identical_runs_differ_by_nothing(tmp_path: Path) -> None:
    root = fixtures.small_run_set(tmp_path)
    main(["--compare", str(root / "main"), str(root / "main"), "--out", str(tmp_path / "out"), "--bootstrap", "50"])
    compare = pd.read_csv(tmp_path / "out" / "compare.csv")
    assert (compare["diff"] == 0).all() and (compare["ci_low"] == 0).all() and (compare["p_value"] == 1).all()
    assert {"task_score", "capability_score", "overall"} <= set(compare["metric"])


def test_compare_pairs_shared_keys(tmp_path: Path) -> None:
    a = [fixtures.record("ER", f"C{i}") for i in range(4)] + [fixtures.record("ER", "C9")]
    b_run = fixtures.run_info(memory="text_summary")
    b = [fixtures.record("ER", f"C{i}", run=b_run, correct=i < 2, answer="A" if i < 2 else "B") for i in range(4)]
    fixtures.write_run(tmp_path / "a", a)
    fixtures.write_run(tmp_path / "b", b)
    main(["--compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "out"), "--bootstrap", "200"])
    row = pd.read_csv(tmp_path / "out" / "compare.csv").query("metric == 'task_score' and task == 'ER'").iloc[0]
    assert (row["value_a"], row["value_b"], row["diff"], row["n"]) == (100.0, 50.0, -50.0, 4)  # C9 not shared
    assert row["ci_high"] <= 0 and row["p_value"] < 0.2


def test_replicate_sums_resample_every_unit_count() -> None:
    matrix = np.column_stack([np.ones(7), np.arange(7.0)])
    sums = bootstrap.replicate_sums(matrix, 300, bootstrap.task_rng(0, "ER"))
    assert sums.shape == (300, 2) and (sums[:, 0] == 7).all()
    assert 0 < sums[:, 1].min() and sums[:, 1].max() < 42 and sums[:, 1].std() > 0


def test_two_sided_p() -> None:
    assert bootstrap.two_sided_p(np.array([1.0, 2.0, 3.0, -1.0])) == 0.5
    assert bootstrap.two_sided_p(np.zeros(5)) == 1.0


def test_names_and_units() -> None:
    assert method_label("raw_video", "Qwen3-VL-8B-Instruct") == "Raw Video as Memory · Qwen3-VL-8B-Instruct"
    assert method_label("none", "Always-Silent", tag="baseline") == "SimpleStream · Always-Silent (baseline)"
    assert method_label("none", "Always-Silent") == "SimpleStream · Always-Silent"  # a name alone tags nothing
    oracle = method_label("raw_video", "Oracle (annotation upper bound)", tag="oracle upper bound")
    assert oracle == "Raw Video as Memory · Oracle (oracle upper bound)"  # the tag is given once
    assert method_label("none", "random", "recent_frames=8", tag="baseline") == \
        "SimpleStream (recent_frames=8) · Random (baseline)"
    assert method_label("oracle", "Seed-2.0-Lite", tag="oracle-evidence control") == \
        "Oracle · Seed-2.0-Lite (oracle-evidence control)"
    assert method_label("kv_cache", "X") == "Kv Cache · X"
    assert method_label("Raw Video as Memory", "X") == "Raw Video as Memory · X"  # display names kept
    assert method_label("text_summary", "X", "writer=perceiver", settings="frames.layout=session_stable") == \
        "Text Summary as Memory (writer=perceiver) · X [frames.layout=session_stable]"
    assert human_bytes(2316.01 * 2**20) == "2.26 GiB" and human_bytes(512) == "512.00 B"
    assert human_bytes(3 * 2**10, "/h") == "3.00 KiB/h" and human_bytes(float("nan")) == "–"


def test_bubbles_log_scale_across_decades() -> None:
    assert spans_decades(np.array([1e3, 1e9])) and not spans_decades(np.array([2.0, 3.0]))
    areas = bubble_areas(np.array([1e3, 1e6, 1e9, np.nan]))
    assert areas[1] - areas[0] == pytest.approx(areas[2] - areas[1]) and areas[3] == areas.min()


def test_wandb_skips_cleanly(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not wandb_usable("disabled")
    monkeypatch.setitem(sys.modules, "wandb", None)  # import fails as if not installed
    with pytest.warns(UserWarning, match="not installed"):
        assert not wandb_usable("offline")


def fixtures_of(reduced: Path) -> list[Path]:
    """The run dirs ``reduced`` was made from."""
    return [reduced.parent / name for name in ("main", "ea", "none", "rand")]


def test_report_tables_keep_numbers_as_numbers(reduced: Path) -> None:
    tables = report_tables(reduced)
    columns, rows = tables["tables/table4"]
    csv = pd.read_csv(reduced / "tables" / "table4.csv")
    assert list(columns) == list(csv.columns) and len(rows) == len(csv)
    numeric = [i for i, c in enumerate(columns) if pd.api.types.is_numeric_dtype(csv[c])]
    assert numeric and all(isinstance(r[i], float | int) or r[i] is None for r in rows for i in numeric)
    assert any(isinstance(r[i], float) for r in rows for i in numeric)  # not '16.666666666666668'
    spec = report_run(reduced, read_all(fixtures_of(reduced), PublishOptions(bootstrap=0)),
                      PublishOptions(directory=reduced.parent / "publish"), {"seed": 0})
    assert spec.tables == tables and "figures/figure2_tradeoff" in spec.images and spec.config["seed"] == 0
    assert spec.config["methods"] == len(spec.config["config_hashes"]) == 4 and spec.job_type == "report"
    scores_columns, scores_rows = tables["scores/part0"]
    value = list(scores_columns).index("value")
    assert len(scores_rows) == len(read_scores(reduced / "scores.csv"))
    assert all(isinstance(r[value], float) or r[value] is None for r in scores_rows)


def test_wandb_tables_are_chunked_below_its_row_limit() -> None:
    parts = chunks(pd.DataFrame({"x": range(25_001)}))
    assert [len(p) for p in parts] == [10_000, 10_000, 5_001]


def test_no_figures_without_data(tmp_path: Path) -> None:
    assert write_figures(pd.DataFrame(columns=SCORE_COLUMNS), tmp_path) == []


def test_compare_without_replicates_has_values_but_no_intervals(tmp_path: Path) -> None:
    root = fixtures.small_run_set(tmp_path)
    main(["--compare", str(root / "main"), str(root / "main"), "--out", str(tmp_path / "out"), "--bootstrap", "0"])
    compare = pd.read_csv(tmp_path / "out" / "compare.csv")
    assert len(compare) > 20 and compare["ci_low"].isna().all() and (compare["diff"] == 0).all()
    assert not {"errors", "format_failures", "judge_failures"} & set(compare["metric"])


def test_reduce_refuses_unjudged_probes_unless_allowed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = fixtures.small_run_set(tmp_path / "runs")
    for f in root.rglob("judgements/*.jsonl"):
        f.unlink()  # as if apm-judge never ran
    out = tmp_path / "out"
    assert main([str(root), "--out", str(out), "--bootstrap", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "10 gate-passing adaptive probe(s) have no judgement" in err[0] and "apm-judge" in err[0]
    assert not out.exists()  # nothing half-written
    assert main([str(root), "--out", str(out), "--bootstrap", "0", "--allow-unjudged", "--no-figures"]) == 0
    table3 = pd.read_csv(out / "tables" / "table3.csv", index_col="Method").iloc[0]
    assert np.isnan(table3["Adaptive"]) and np.isnan(table3["Overall"]) and table3["CS Und."] > 0
    md = (out / "tables" / "table3.md").read_text()
    assert "Judge: none" in md
    header, row = (line.split(" | ") for line in (md.splitlines()[2], md.splitlines()[-1]))
    assert row[header.index("Adaptive")] == "–" and row[header.index("Overall")] == "–"  # withheld, never 0.00


def test_table7_shows_judge_failures(tmp_path: Path) -> None:
    root = fixtures.small_run_set(tmp_path / "runs")
    probe = fixtures.record("TPG", "T1", "n", polarity="negative", decision="SILENT", gate_pass=True)
    fixtures.write_jsonl(root / "main" / "records" / "shard-2.jsonl", [probe])
    fixtures.write_jsonl(root / "main" / "judgements" / "shard-2.jsonl", [fixtures.judgement(probe, None, "failed")])
    out = tmp_path / "out"
    assert main([str(root / "main"), "--out", str(out), "--bootstrap", "0", "--no-figures", "--allow-unjudged"]) == 0
    t7 = pd.read_csv(out / "tables" / "table7.csv", index_col="Method")
    assert t7.loc["Raw Video as Memory · Qwen3-VL-8B-Instruct", "Judge failures"] == 1
    assert np.isnan(t7.loc["Raw Video as Memory · Qwen3-VL-8B-Instruct", "TPG"])


def test_report_manifest_names_inputs_judges_and_bootstrap(reduced: Path) -> None:
    manifest = json.loads((reduced / "manifest.json").read_text())
    assert manifest["bootstrap"] == {"seed": 0, "replicates": 50}
    assert [Path(i["run_dir"]).name for i in manifest["inputs"]] == ["ea", "main", "none", "rand"]
    assert {"judge": "judge-x", "judge_model": None, "rubric_version": "1"} in manifest["judges"]
    assert len(manifest["config_hashes"]) == 4 and manifest["apm_version"]


def test_a_failed_reduce_leaves_the_previous_report_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    root = fixtures.small_run_set(tmp_path / "runs")
    out = tmp_path / "report"
    assert main([str(root), "--out", str(out), "--bootstrap", "0", "--no-figures"]) == 0
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def full_disk(*_: object) -> list[Path]:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("apm.api.reduce.write_figures", full_disk)
    capsys.readouterr()
    assert main([str(root), "--out", str(out), "--bootstrap", "0"]) == 2
    said = capsys.readouterr().err.strip().splitlines()  # after a coverage line per method (no plans here)
    assert said[-1] == f"apm-reduce: cannot write {out}: No space left on device"
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before and sorted(p.name for p in tmp_path.iterdir()) == ["report", "runs"]


def test_a_missing_run_dir_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "nope"), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip() == f"apm-reduce: no such run directory: {tmp_path / 'nope'}"


def test_reduce_says_which_tables_and_figures_it_skipped_and_why(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture) -> None:
    """Issue 36 item 5: one general method whose latency was measured loaded (no isolated sample): every
    table or figure left out, and Table 3's latency column left empty, is one line saying why."""
    run = fixtures.synthetic_run(tmp_path / "raw", fixtures.run_info(), trajectories=2, seed=3)
    for path in (run / "records").glob("*.jsonl"):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        for line in lines:
            line["latency"]["mode"] = "loaded"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main([str(run), "--out", str(tmp_path / "out"), "--bootstrap", "0"]) == 0
    said = capsys.readouterr()
    skipped = [line for line in said.err.splitlines() if "skipped" in line]
    assert any(line.startswith("apm-reduce: skipped Figure 2 ") and "latency.sample" in line for line in skipped)
    assert any(line.startswith("apm-reduce: skipped Table 8 ") and "specialised" in line for line in skipped)
    empty = "apm-reduce: Table 3: Latency (s) is – for every method"
    assert any(line.startswith(empty) for line in said.err.splitlines())
    drawn = {p.stem for p in (tmp_path / "out" / "figures").glob("*.png")}
    assert f"{len(drawn)} figures" in said.out and "figure2_tradeoff" not in drawn


def test_latex_captions_leave_the_number_to_latex_and_hold_no_raw_symbols(reduced: Path) -> None:
    """Issue 36 item 9: ``\\caption`` numbers a table itself ("Table 1: Table 3: …" otherwise), and pdfLaTeX
    cannot typeset a raw ✓ or ✗; the Markdown caption keeps the paper's number."""
    tex = (reduced / "tables" / "table3.tex").read_text()
    (caption,) = [line for line in tex.splitlines() if line.startswith(r"\caption{")]
    assert not caption.startswith(r"\caption{Table 3") and r"\checkmark" in caption
    assert not set("✓✗–†‡") & set(tex)
    assert tex.splitlines()[0] == "% Table 3 of the paper"
    assert (reduced / "tables" / "table3.md").read_text().startswith("**Table 3: ")


def test_compare_prints_its_headline(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Issue 36 item 9: ``--compare`` says its result, not only where the CSV went."""
    root = fixtures.small_run_set(tmp_path)
    assert main(["--compare", str(root / "main"), str(root / "main"), "--out", str(tmp_path / "out"),
                 "--bootstrap", "50"]) == 0
    overall = pd.read_csv(tmp_path / "out" / "compare.csv").query("metric == 'overall'").iloc[0]
    (headline,) = [line for line in capsys.readouterr().out.splitlines() if "Overall" in line]
    assert f"{overall['value_a']:.1f} → {overall['value_b']:.1f}" in headline
    assert f"{overall['diff']:+.1f}" in headline and "95% CI" in headline and f"{int(overall['n'])}" in headline
