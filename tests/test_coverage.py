"""Coverage is part of every number (issue 19, item 1): a method whose records do not cover its plan
(a subset, missing or unfinished shards, truncated records, failed memory updates) is marked in every
table, figure, W&B summary and the viewer, ``apm-reduce`` warns once per method and ``--complete``
refuses; ``apm-status`` shows memory-update errors, missing shards and the whole plan. And the
paper's populations (item 9): EA instances never pool into the 12-task metrics."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.runner import compose_run, release_instance_count, run

from apm.cli import reduce as apm_reduce
from apm.cli import status as apm_status
from apm.publish.axes import coverage_summary
from apm.reduce import load_runs, read_scores, score_table
from apm.reduce.figures import partial_footnote, radar_figure
from apm.scale import scheduler, status
from apm.synth import generate
from apm.testing import fixtures
from apm.view.collect import methods

BASE = ["memory=none", "backbone=random"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("rel") / "tiny", seed=2, scale="tiny")


@pytest.fixture(scope="module")
def planned(tiny: Path) -> int:
    """The instances of the tiny release with EA, all in one shard's plan."""
    return release_instance_count(tiny)


@pytest.fixture(autouse=True)
def no_scheduler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scheduler, "available", lambda: False)


@pytest.fixture(scope="module")
def full_run(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete run of a baseline (every planned instance on record)."""
    out = tmp_path_factory.mktemp("full")
    return run(compose_run(tiny, out / "runs", out / "cache", BASE))


def reduce(runs: Path, out: Path, *extra: str) -> int:
    return apm_reduce.main([str(runs), "--out", str(out), "--bootstrap", "0", "--allow-unjudged", "--no-figures",
                            *extra])


def scores_of(runs: Path) -> "object":
    found = load_runs([runs])
    return score_table(found.records, found.judgements, found.memory, reps=0, plans=found.plans)


def one(values) -> object:
    (value,) = set(values)
    return value


def test_a_limited_try_is_partial_in_every_table_and_complete_refuses(tiny, planned, tmp_path, capsys):
    run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", [*BASE, "dataset.limit=13"]))
    assert reduce(tmp_path / "runs", tmp_path / "report") == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "planned instances" in line]
    assert len(warned) == 1 and "SimpleStream · Random (baseline) (partial)" in warned[0]
    assert f"13 of {planned} planned instances on record" in warned[0] and "ran a subset" in warned[0]

    scores = read_scores(tmp_path / "report" / "scores.csv")
    assert one(scores["n_planned"]) == planned
    assert one(scores["coverage"]) == pytest.approx(13 / planned)
    for table in ("table3", "table4", "table_latency"):
        md = (tmp_path / "report" / "tables" / f"{table}.md").read_text()
        assert "SimpleStream · Random (baseline) (partial)" in md
        assert f"13 of {planned} planned instances on record" in md  # the footnote says what is missing

    assert reduce(tmp_path / "runs", tmp_path / "strict", "--complete") == 2
    err = capsys.readouterr().err
    assert "(partial)" in err and "--complete: 1 method(s) do not cover their plan" in err
    assert not (tmp_path / "strict").exists()  # refused: nothing written


def test_a_complete_run_is_unmarked_and_passes_complete(full_run, planned, tmp_path, capsys):
    assert reduce(full_run, tmp_path / "report", "--complete") == 0
    scores = read_scores(tmp_path / "report" / "scores.csv")
    assert one(scores["n_planned"]) == planned and one(scores["coverage"]) == 1.0
    assert one(scores["coverage_gap"]) == ""
    assert "(partial)" not in (tmp_path / "report" / "tables" / "table3.md").read_text()
    assert "planned instances" not in capsys.readouterr().err


def test_a_truncated_records_file_is_a_gap(full_run, planned, tmp_path):
    copy = shutil.copytree(full_run, tmp_path / "run")
    (records,) = (copy / "records").glob("*.jsonl")
    records.write_text("".join(records.read_text().splitlines(keepends=True)[:60]))
    scores = scores_of(copy)
    assert one(scores["coverage"]) == pytest.approx(60 / planned)
    assert f"{planned - 60} of {planned} without a record" in one(scores["coverage_gap"])


def test_missing_shards_are_gaps_and_status_shows_the_whole_plan(tiny, planned, tmp_path, capsys):
    run_dir = run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache",
                              [*BASE, "shard.count=3", "shard.index=0"]))
    plan = json.loads((run_dir / "jobs" / "shard-0-of-3" / "plan.json").read_text())
    assert plan["population"] == planned and plan["instances"] < planned
    scores = scores_of(run_dir)
    assert one(scores["n_planned"]) == planned
    assert one(scores["coverage"]) == pytest.approx(plan["instances"] / planned)
    assert "shard-1-of-3, shard-2-of-3 never started" in one(scores["coverage_gap"])

    rows = {r.shard: r for r in status.sweep_status(tmp_path / "runs")}
    assert rows["shard-0-of-3"].state == "done"
    assert [rows[f"shard-{i}-of-3"].state for i in (1, 2)] == ["missing", "missing"]
    assert apm_status.main([str(tmp_path / "runs")]) == 1  # missing shards need submitting
    summary = capsys.readouterr().out.splitlines()[-1]
    assert "2 missing" in summary and f"whole plan {plan['instances']}/{planned}" in summary


def test_failed_memory_updates_are_counted_and_marked(tiny, tmp_path, capsys):
    run_dir = run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", ["memory=text_summary", "backbone=random"]))
    memory = [json.loads(line) for p in (run_dir / "memory").glob("*.jsonl") for line in p.read_text().splitlines()]
    assert memory and all(m["error"] for m in memory)  # the random baseline writes no summary

    (row,) = status.sweep_status(tmp_path / "runs")
    assert row.memory_errors == len(memory) and row.state == "done with errors"
    assert apm_status.main([str(tmp_path / "runs")]) == 0
    assert f"{len(memory)} memory-update errors" in capsys.readouterr().out

    assert reduce(tmp_path / "runs", tmp_path / "report") == 0
    scores = read_scores(tmp_path / "report" / "scores.csv")
    assert f"{len(memory)} of {len(memory)} memory updates failed" in one(scores["coverage_gap"])
    table3 = (tmp_path / "report" / "tables" / "table3.md").read_text()
    assert "Text Summary as Memory · Random (baseline) (partial)" in table3 and "memory updates failed" in table3
    assert coverage_summary(scores)["partial"] is True

    shown = methods(load_runs([run_dir]), [])
    assert shown[0]["label"].endswith("(partial)") and "memory updates failed" in shown[0]["coverage"]["gap"]


def test_records_without_a_plan_have_unknown_coverage(tmp_path, capsys):
    root = fixtures.small_run_set(tmp_path / "runs")
    scores = scores_of(root)
    assert scores["n_planned"].isna().all() and scores["coverage"].isna().all()
    assert reduce(root, tmp_path / "report", "--complete") == 2  # unknown is not complete
    assert "coverage unknown" in capsys.readouterr().err


def test_ea_never_pools_into_the_twelve_task_metrics(tmp_path):
    root = fixtures.synthetic_run(tmp_path / "run", fixtures.run_info(), trajectories=6, seed=3)
    found = load_runs([root])
    scores = score_table(found.records, found.judgements, found.memory, reps=0)
    tasks = found.records["task"].astype(str)
    assert (tasks == "EA").any()
    probes = int((tasks != "EA").sum())
    pooled = scores[scores["task"] == "all"].set_index("metric")
    for metric in ("format_failure_rate", "errors", "format_failures"):
        assert pooled.at[metric, "n"] == probes
    ttft = found.records["ttft_s"].notna() & (tasks != "EA")
    assert pooled.at["ttft_s", "n"] == int(ttft.sum())


def test_figures_name_what_their_partial_methods_miss(tmp_path):
    info = fixtures.run_info()
    root = fixtures.synthetic_run(tmp_path / "run", info, trajectories=4, seed=5)
    keys = [json.loads(line)["key"] for line in (root / "records" / "shard-0.jsonl").read_text().splitlines()]
    (root / "config.json").write_text(json.dumps({"config_hash": info["config_hash"]}))
    plan = {"keys": keys + ["T9/never/run"], "instances": len(keys) + 1, "trajectories": [], "selected": len(keys) + 1,
            "population": len(keys) + 1}
    (root / "jobs" / "shard-0-of-1").mkdir(parents=True)
    (root / "jobs" / "shard-0-of-1" / "plan.json").write_text(json.dumps(plan))
    scores = scores_of(root)
    assert keys and f"1 of {len(keys) + 1} without a record" in one(scores["coverage_gap"])
    fig = radar_figure(scores)
    footnote = partial_footnote(fig, scores)
    assert f"Raw Video as Memory · Qwen3-VL-8B-Instruct (partial): {len(keys)} of {len(keys) + 1}" in footnote
