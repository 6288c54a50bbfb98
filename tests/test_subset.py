"""Try before the sweep: ``dataset.limit`` / ``dataset.trajectories`` run part of a shard into the
full run's folder (same config hash), writing exactly the records the full run would; and
``print_request=KEY`` prints one instance's request without calling a model."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from support.runner import compose_run, records, release_instance_count, run

from apm.runner import ledger
from apm.runner.app import run_dir_of
from apm.runner.config import config_hash
from apm.scale import scheduler, status
from apm.synth import generate

TIMING = {"latency", "written_ns"}
"""What two runs of the same instance may differ in."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("rel") / "tiny", seed=2, scale="tiny")


def answers(recs: list[dict]) -> dict[str, dict]:
    return {r["key"]: {k: v for k, v in r.items() if k not in TIMING} for r in recs}


def test_a_limited_try_writes_the_full_runs_records_and_counts_toward_it(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(scheduler, "available", lambda: False)
    base = ["memory=raw_video", "backbone=oracle"]
    tried = compose_run(tiny, tmp_path / "runs", tmp_path / "cache", base + ["dataset.limit=13"])
    full = compose_run(tiny, tmp_path / "runs", tmp_path / "cache", base)
    assert config_hash(tried) == config_hash(full) and run_dir_of(tried) == run_dir_of(full)
    run_dir = run(tried)
    subset = records(run_dir)
    assert len(subset) == 13 and len({r["task"] for r in subset}) == 13  # task by task: every task once
    (row,) = status.sweep_status(run_dir)
    planned = release_instance_count(tiny)
    assert row.state == "partial" and (row.done, row.total) == (13, planned)  # the plan is the whole shard

    elsewhere = tmp_path / "alone"
    reference = answers(records(run(compose_run(tiny, elsewhere, tmp_path / "cache", base))))
    assert answers(subset) == {k: reference[k] for k in answers(subset)}

    run(full)
    assert len(records(run_dir)) == planned  # the try's 13 were skipped, not run again
    assert ledger.read_events(run_dir, "shard-0-of-1")[-1]["new"] == planned - 13


def test_a_trajectory_filter_runs_only_those_trajectories(tiny, tmp_path):
    run_dir = run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache",
                              ["memory=none", "backbone=random", "dataset.trajectories=[syn002]"]))
    recs = records(run_dir)
    assert recs and {r["trajectory_id"] for r in recs} == {"syn002"}
    plan = json.loads((run_dir / "jobs" / "shard-0-of-1" / "plan.json").read_text())
    assert plan["instances"] == release_instance_count(tiny)


def test_print_request_lists_exactly_what_the_run_sends(tiny, tmp_path):
    key = "syn002/syn002-ER-02/query"
    out = tmp_path / "runs"
    args = [f"dataset.root={tiny}", f"output_root={out}", f"frames.cache_dir={tmp_path / 'cache'}",
            "memory=raw_video", "backbone=qwen3_vl_8b", "backbone.max_frames=32"]
    printed = subprocess.run([sys.executable, "-m", "apm.cli.run", *args, f"print_request={key}"],
                             capture_output=True, text=True, timeout=120)
    assert printed.returncode == 0, printed.stderr
    assert not out.exists()  # no model called, nothing written

    shown = compose_run(tiny, out, tmp_path / "cache",
                        ["memory=raw_video", "backbone=oracle", "backbone.max_frames=32"])
    (record,) = [r for r in records(run(shown)) if r["key"] == key]
    head, *body = printed.stdout.splitlines()
    assert head.startswith(f"# {key} · ER · probe {record['probe_time']} · 32 frames · prompt sha256 ")
    assert head.endswith(record["prompt_sha256"])  # the oracle saw the very same request
    frames = [re.fullmatch(r"\[frame (\S+) \+(\S+)s (.+)\]", line) for line in body]
    listed = [{"session": m[1], "offset": float(m[2]), "wall_clock": m[3]} for m in frames if m]
    assert listed == record["frames"]
    assert body[0] == "--- system" and any(line.startswith("--- user @ ") for line in body)
