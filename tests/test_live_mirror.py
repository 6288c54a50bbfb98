"""The live W&B mirror of ``apm-run`` shows progress while a job runs: it logs a history step at least
every ``logging.wandb.flush_s`` seconds (as rows arrive), not only every ``table_chunk_rows`` rows —
read back from the real offline run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.runner import compose_run, records, run
from test_publish import read_offline

from apm.publish import PublishOptions, publish
from apm.synth import generate

WANDB = Path(sys.executable).parent / "wandb"
SLOW = ["backbone=random", "backbone._target_=support.backbones.SlowRandom", "memory=none", "concurrency=1",
        "logging.wandb.mode=offline"]
"""A job of a few seconds: 30 ms an answer, one at a time."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("rel") / "tiny", seed=2, scale="tiny")


@pytest.fixture()
def wandb_env(tmp_path, monkeypatch):
    for var in ("WANDB_DIR", "WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    monkeypatch.setenv("WANDB_SILENT", "true")
    return tmp_path


def history(run_dir: Path) -> list[dict[str, Any]]:
    """The history steps of the job's one offline live run, read back from its transaction log."""
    (offline,) = (run_dir / "wandb").glob("offline-run-*")
    out = subprocess.run([str(WANDB), "leet", "inspect", "--json", str(offline)], capture_output=True, text=True,
                         env={**os.environ, "WANDB_SILENT": "true"})
    assert out.returncode == 0, out.stderr
    log = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    return [rec["history"]["item"] for rec in log if rec["type"] == "history"]


@pytest.mark.slow
def test_a_run_longer_than_the_timer_gets_a_step_per_period(tiny, tmp_path, wandb_env):
    started = time.monotonic()
    run_dir = run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", [*SLOW, "logging.wandb.flush_s=0.5"]))
    took, n = time.monotonic() - started, len(records(run_dir))
    steps = history(run_dir)
    assert took > 1.5 and len(steps) >= 2  # a step while it ran, not only at its end
    counts = [s["progress/instances"] for s in steps]
    assert counts == sorted(counts) and counts[-1] == n and counts[0] < n  # progress grows to the whole job


@pytest.mark.slow
def test_rows_still_flush_by_count_and_the_default_timer_is_30_s(tiny, tmp_path, wandb_env):
    cfg = compose_run(tiny, tmp_path / "runs", tmp_path / "cache", [*SLOW, "logging.wandb.table_chunk_rows=10"])
    assert cfg.logging.wandb.flush_s == 30.0
    run_dir = run(cfg)
    n = len(records(run_dir))
    assert [s["progress/instances"] for s in history(run_dir)] == [*range(10, n, 10), n]


@pytest.mark.slow
def test_the_live_mirror_is_quiet_and_shares_the_published_group_and_config(tiny, tmp_path, wandb_env, monkeypatch,
                                                                             capfd):
    """Issue 36.7: the live mirror printed ~20 ``wandb:`` lines per job (terminal and SLURM log alike), grouped
    by the output folder's name and logged the nested resolved config; it is silent now, in the release's
    group with the published runs' flat keys (the keys only records give are the publish's own)."""
    monkeypatch.delenv("WANDB_SILENT")
    run_dir = run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", SLOW))
    said = capfd.readouterr()
    assert [line for line in (said.out + said.err).splitlines() if line.startswith("wandb:")] == []
    (live,) = map(read_offline, (run_dir / "wandb").glob("offline-run-*"))
    published = publish([run_dir], PublishOptions(bootstrap=0, directory=tmp_path / "publish"))
    reduce = read_offline(next(p.folder for p in published if p.job_type == "reduce"))
    assert live.group == reduce.group == f"{reduce.config['dataset_name']}-{reduce.config['release_fingerprint'][:8]}"
    shared = set(live.config) - {"resolved"}
    assert {"config_hash", "memory", "backbone", "streaming", "persistent", "run_dir"} <= shared <= set(reduce.config)
    assert {k: live.config[k] for k in shared} == {k: reduce.config[k] for k in shared}
    assert set(live.config["resolved"]) == set(reduce.config["resolved"])
