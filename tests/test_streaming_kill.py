"""Kill test for streaming systems: apm-run killed with SIGKILL mid-session and rerun ends with exactly
the records of an uninterrupted run — the lost in-session state is rebuilt by replaying the session."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

from support.runner import finished, memory_records, records, release_sessions

from apm.check import checks
from apm.check.runs import kill_at
from apm.records.jsonl import read_folder

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"


def apm_run(tiny: Path, out: Path, cache: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    return subprocess.Popen(
        [sys.executable, "-m", "apm.cli.run", f"dataset.root={tiny}", f"output_root={out}",
         f"frames.cache_dir={cache}", "logging.wandb.mode=disabled", "logging.progress=false",
         f"hydra.searchpath=[file://{TESTS / 'conf'}]", "memory=pixel_spy", "memory.delay_s=0.02",
         "backbone=random", "dataset.tasks=[ER,ERA,RCR,MPA,PRM,TPG]"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )


def _sessions_begun_not_exported(run_root: Path) -> set[tuple[str, str]]:
    """Sessions with records on file but no memory line: a kill there lost their in-session state."""
    (run_dir,) = [p.parent for p in run_root.rglob("records")]
    def sessions(kind: str) -> set[tuple[str, str]]:
        return {(x["trajectory_id"], f"{x['day_id']}/{x['session_id']}") for x in read_folder(run_dir / kind)}

    return sessions("records") - sessions("memory")


def test_sigkill_mid_session_rebuilds_the_session_and_loses_nothing(tiny, tmp_path):
    cache = tmp_path / "cache"
    ref_dir = finished(apm_run(tiny, tmp_path / "ref", cache), tmp_path / "ref")
    expected = {r["key"]: r for r in records(ref_dir)}

    out = tmp_path / "killed"
    kills = mid_session = 0
    for target in sorted(random.Random(3).sample(range(5, len(expected) - 5), 3)):
        if kill_at(apm_run(tiny, out, cache), out, target):
            kills += 1
            mid_session += bool(_sessions_begun_not_exported(out))
    run_dir = finished(apm_run(tiny, out, cache), out)
    assert kills >= 2 and mid_session >= 1
    got = records(run_dir)
    assert len({r["key"] for r in got}) == len(got), "duplicate records"
    assert checks.same_outcome(expected, {r["key"]: r for r in got}, memory_records(ref_dir), memory_records(run_dir),
                               "a SIGKILL mid-session") == []  # apm-check-system's comparison
    sessions = [(m["trajectory_id"], m["session_index"]) for m in memory_records(run_dir)]
    assert len(sessions) == len(set(sessions)) == release_sessions(tiny)
