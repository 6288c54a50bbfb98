"""A real sweep on a real SLURM cluster (``bash .ci/slurm.sh start``): 2 protocols × 2 baselines × 3
shards = 12 array tasks through ``hydra/launcher=slurm_ci``. One task is cancelled mid-run, one is
preempted (USR2: it requeues itself and resumes); ``apm-submit`` then finishes only what is missing,
and the merged records equal an unsharded local run's, record for record (timing aside).

Skips where SLURM is absent; with ``APM_REQUIRE_SLURM=1`` (CI) it fails instead.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from support.runner import compose_run, memory_records, records, run

from apm.backbones.baselines import Oracle, RandomBaseline
from apm.cli import status as apm_status
from apm.scale import status
from apm.synth import generate

REPO = Path(__file__).resolve().parents[1]
CI_CONF = REPO / ".ci" / ".slurm-state" / "etc" / "slurm.conf"
PACE_S = "0.25"
TIMING = {"latency", "shard", "written_ns"}
"""Fields that differ between two runs of the same work: when and where it ran, and when each line was written."""
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _same_work(record: dict) -> dict:
    """A record without what differs between two runs of the same work: timing, shard, write stamp, and
    the config-group names, which only a Hydra app knows (the reference run is composed in process)."""
    run = {k: v for k, v in record["run"].items() if k not in ("choices", "overrides")}
    return {k: v for k, v in record.items() if k not in TIMING} | {"run": run}


class Paced:
    """A baseline that waits ``$APM_TEST_PACE_S`` per answer (outside the config: same config hash)."""

    async def answer_instance(self, request, instance):
        await asyncio.sleep(float(os.environ.get("APM_TEST_PACE_S", "0")))
        return await super().answer_instance(request, instance)


class PacedRandom(Paced, RandomBaseline):
    pass


class PacedOracle(Paced, Oracle):
    pass


def _cluster_problem() -> str | None:
    if shutil.which("sinfo") is None:
        return "SLURM is not installed (no sinfo); start one with: bash .ci/slurm.sh start"
    try:
        probe = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=15)
    except subprocess.TimeoutExpired:
        return "sinfo got no answer in 15 s; bash .ci/slurm.sh start"
    if probe.returncode != 0 or not probe.stdout.strip():
        return f"no SLURM cluster answers (sinfo: {probe.stderr.strip()[:200]}); bash .ci/slurm.sh start"
    return None


@pytest.fixture(scope="module")
def cluster():
    with pytest.MonkeyPatch.context() as mp:
        if "SLURM_CONF" not in os.environ and CI_CONF.exists():
            mp.setenv("SLURM_CONF", str(CI_CONF))
        problem = _cluster_problem()
        if problem and os.environ.get("APM_REQUIRE_SLURM") == "1":
            pytest.fail(f"APM_REQUIRE_SLURM=1 but {problem}")
        if problem:
            pytest.skip(problem)
        yield


@pytest.fixture(scope="module")
def setup(tmp_path_factory, cluster):
    """The tiny release, paced baseline configs on a search path, and the unsharded local reference."""
    base = tmp_path_factory.mktemp("slurm")
    release = generate(base / "release", seed=0, scale="tiny")
    backbones = base / "conf" / "backbone"
    backbones.mkdir(parents=True)
    (backbones / "paced_random.yaml").write_text("_target_: test_slurm.PacedRandom\nname: Paced Random\nseed: 0\n")
    (backbones / "paced_oracle.yaml").write_text("_target_: test_slurm.PacedOracle\nname: Paced Oracle\n")
    common = [f"hydra.searchpath=[file://{base / 'conf'}]"]
    reference = {}
    for memory in ("none", "raw_video"):
        for backbone in ("paced_random", "paced_oracle"):
            cfg = compose_run(
                release, base / "ref", base / "cache", common + [f"memory={memory}", f"backbone={backbone}"]
            )
            reference[(memory, backbone)] = run(cfg)
    overrides = [
        f"dataset.root={release}",
        f"output_root={base / 'out'}",
        f"frames.cache_dir={base / 'cache'}",
        "logging.wandb.mode=disabled",
        "logging.progress=false",
        "concurrency=2",
        *common,
        "hydra/launcher=slurm_ci",
        "memory=none,raw_video",
        "backbone=paced_random,paced_oracle",
        "shard.count=3",
    ]
    env = os.environ | {"PYTHONPATH": str(REPO / "tests"), "APM_TEST_PACE_S": PACE_S}
    return base / "out", overrides, env, reference


def _scontrol(*args: str) -> None:
    subprocess.run(["scontrol", *args], capture_output=True, timeout=30)


def _preempt(job_id: str) -> None:
    """USR2, as SLURM sends before a time limit or preemption; scancel then retries "can not be altered
    now" while the job requeues itself, and a late retry would signal the requeued job: cut it short."""
    try:
        subprocess.run(["scancel", "--signal=USR2", job_id], capture_output=True, timeout=3)
    except subprocess.TimeoutExpired:
        pass


def _running_shard(root: Path, exclude: set[str]) -> status.ShardStatus | None:
    """A shard whose job runs and has some, not all, records on disk (none before the sweep made its root:
    ``sweep_status`` refuses a path that does not exist)."""
    for r in status.sweep_status(root) if root.exists() else []:
        if r.state == "running" and r.job_id and r.job_id not in exclude and r.total and 3 <= r.done <= r.total // 3:
            return r
    return None


def _settle(root: Path, limit_s: float) -> list[status.ShardStatus]:
    """Wait until no shard has a queued or running job; release requeued jobs SLURM holds back (~2 min)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        rows = status.sweep_status(root)
        for r in rows:
            if r.state == "pending" and r.job_id:
                _scontrol("update", f"JobId={r.job_id}", "StartTime=now")
        if rows and not any(r.active for r in rows):
            return rows
        time.sleep(1)
    raise AssertionError("sweep did not settle:\n" + status.render(status.sweep_status(root)))


def test_sweep_cancel_preempt_resubmit_equals_unsharded_run(setup):
    root, overrides, env, reference = setup
    began = time.monotonic()
    sweep = subprocess.Popen(
        [str(REPO / ".venv/bin/apm-run"), "-m", *overrides, "shard.index=range(3)"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    cancelled = preempted = None
    deadline = time.monotonic() + 120
    while (cancelled is None or preempted is None) and time.monotonic() < deadline:
        target = _running_shard(root, {j for j in (cancelled, preempted) if j})
        if target is not None and cancelled is None:
            cancelled = target.job_id
            subprocess.run(["scancel", cancelled], check=True, timeout=30)
        elif target is not None:
            preempted = target.job_id
            _preempt(preempted)
        time.sleep(0.2)
    assert cancelled and preempted, "no running shard to cancel and preempt"
    rows = {r.job_id: r for r in _settle(root, 240)}
    output = sweep.communicate(timeout=120)[0]
    assert sweep.returncode != 0, output  # the launcher reports the cancelled task
    assert rows[cancelled].state == "cancelled" and rows[cancelled].done < rows[cancelled].total
    gone = rows[cancelled]  # apm-status says where to look and what resumes the shard
    assert gone.log and Path(gone.log).is_file(), status.render(list(rows.values()))
    assert gone.resume and gone.resume.startswith("apm-submit ") and f"shard.index={gone.shard.split('-')[1]}" in \
        gone.resume, gone.resume
    assert rows[preempted].state == "done", status.render(list(rows.values()))
    assert sum(r.state == "done" for r in rows.values()) == 11
    preempted_run = next(r for r in rows.values() if r.job_id == preempted)
    starts = [
        e for e in status.ledger.read_events(root / preempted_run.run, preempted_run.shard) if e["event"] == "started"
    ]
    assert [e["restarts"] for e in starts] == [0, 1] and starts[1]["on_record"] > 0  # requeued, resumed
    swept_s = time.monotonic() - began

    resubmit = subprocess.run(
        [sys.executable, "-m", "apm.cli.submit", "-m", *overrides],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resubmit.returncode == 0, resubmit.stderr
    assert "1 jobs submitted, 11 skipped" in resubmit.stdout, resubmit.stdout
    final = _settle(root, 120)
    assert len(final) == 12 and all(r.state == "done" and r.duplicates == 0 for r in final), status.render(final)
    assert apm_status.main([str(root)]) == 0

    for (memory, backbone), ref_dir in reference.items():
        run_dir = root / ref_dir.relative_to(ref_dir.parents[2])
        merged = records(run_dir)
        assert not [k for k, n in Counter(r["key"] for r in merged).items() if n > 1]  # nothing twice
        strip = lambda rs: {r["key"]: _same_work(r) for r in rs}  # noqa: E731
        assert strip(merged) == strip(records(ref_dir)), (memory, backbone)
        mem = lambda d: sorted(  # noqa: E731
            (m["trajectory_id"], m["day_id"], m["session_id"], m["bytes"]) for m in memory_records(d)
        )
        assert mem(run_dir) == mem(ref_dir)
    print(f"slurm sweep: {swept_s:.0f} s to settle the 12-task sweep; {time.monotonic() - began:.0f} s in all")
