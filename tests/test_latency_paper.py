"""Latency as the paper measures it: paper latency cells come from isolated-mode records only, a method
without any prints "–", ``latency.sample=N`` times N isolated probes per task after the main run, and
every caption with a latency says the mode."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.runner import compose_run, records, release_instance_count, run, served

from apm.cli.reduce import main as reduce_main
from apm.reduce import load_runs, score_table
from apm.synth import generate
from apm.testing import fixtures

LATENCY_TABLES = ("table3", "table8", "table9", "table_latency")


def latest(recs: list[dict]) -> dict[str, dict]:
    return {r["key"]: r for r in sorted(recs, key=lambda r: r["written_ns"])}


def test_a_method_timed_only_under_load_has_no_paper_latency(tmp_path: Path) -> None:
    loaded = {**fixtures.latency(9.0, 9.0, 0.09), "mode": "loaded", "in_flight": 8}
    alone = {**fixtures.latency(1.0, 2.0, 0.01), "mode": "isolated", "in_flight": 1, "concurrency": 1}
    fixtures.write_run(tmp_path / "a", [fixtures.record("ER", "C1", latency=loaded),
                                        fixtures.record("ER", "C2", latency=alone)])
    fixtures.write_run(tmp_path / "b", [fixtures.record("ER", "C1", run=fixtures.run_info(memory="none"),
                                                        latency=loaded)])
    runs = load_runs([tmp_path])
    scores = score_table(runs.records, runs.judgements, runs.memory, reps=0)
    ttft = scores[(scores["metric"] == "ttft_s") & (scores["task"] == "all")].set_index("memory")["value"]
    assert ttft["raw_video"] == 1.0 and np.isnan(ttft["none"])  # isolated records only; the loaded-only method: NaN
    out = tmp_path / "out"
    assert reduce_main([str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out), "--bootstrap", "0",
                        "--no-figures"]) == 0
    table = pd.read_csv(out / "tables" / "table_latency.csv", index_col="Method")
    assert np.isnan(table.loc["SimpleStream · Qwen3-VL-8B-Instruct", "TTFT (s)"])
    assert table.loc["Raw Video as Memory · Qwen3-VL-8B-Instruct", "TTFT (s)"] == 1.0
    md = (out / "tables" / "table_latency.md").read_text()
    assert "| SimpleStream · Qwen3-VL-8B-Instruct | – |" in md
    for name in ("table3", "table_latency"):
        assert "Latency is measured in isolated mode" in (out / "tables" / f"{name}.md").read_text()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("rel") / "tiny", seed=2, scale="tiny")


def test_latency_sample_times_n_isolated_probes_per_task_after_the_main_run(tiny: Path, tmp_path: Path) -> None:
    with served(latency_s=0.05) as srv:
        cfg = compose_run(tiny, tmp_path / "runs", tmp_path / "cache", [
            "backbone=openai_compatible", f"backbone.base_url={srv.base_url}", "backbone.model=fake", "memory=none",
            "dataset.tasks=[ER,OCR,CT]", "latency.sample=2"])
        run_dir = run(cfg)
    now = latest(records(run_dir)).values()
    isolated = [r for r in now if r["latency"]["mode"] == "isolated"]
    tasks = cfg.dataset.tasks
    assert Counter(r["task"] for r in isolated) == {t: cfg.latency.sample for t in tasks}
    assert {(r["latency"]["in_flight"], r["latency"]["concurrency"]) for r in isolated} == {(1, 1)}
    assert {r["latency"]["mode"] for r in now} == {"isolated", "loaded"}
    assert len(now) == release_instance_count(tiny, tasks)
    out = tmp_path / "out"
    assert reduce_main([str(run_dir), "--out", str(out), "--bootstrap", "0", "--no-figures"]) == 0
    scores = pd.read_csv(out / "scores.csv")
    ttft = scores[(scores["metric"] == "ttft_s") & (scores["task"] == "all")].iloc[0]
    assert ttft["n"] == len(isolated) and ttft["value"] > 0.04  # the isolated probes alone
