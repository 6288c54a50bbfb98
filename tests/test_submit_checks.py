"""``apm-submit`` runs ``apm-run``'s checks of the selection on every job of the sweep before anything
reaches the queue, in its dry run too: a mistake is one line on the spot, not a failed job on a node."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from apm.synth import generate


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny release: three trajectories."""
    return generate(tmp_path_factory.mktemp("submit") / "tiny", seed=3, scale="tiny")


WRONG = {
    "a task that is none": (["dataset.tasks=[XX]"], "dataset.tasks: 'XX' is no task"),
    "a trajectory that is none": (
        ["dataset.trajectories=[syn0001]"],
        "dataset.trajectories: 'syn0001' is no trajectory of the release",
    ),
    "more shards than trajectories": (
        ["shard.count=4"],
        "shard.count=4: shard-3-of-4 gets none of the release's 3 "
        "trajectories (a shard holds whole trajectories); give "
        "shard.count=3 or fewer",
    ),
    "a wrong memory argument": (["memory.recent_frames=abc"], "memory.recent_frames='abc'"),
}


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry run", "submit"])
@pytest.mark.parametrize("case", sorted(WRONG))
def test_apm_submit_refuses_what_apm_run_would_refuse_before_anything_is_queued(
    tiny: Path, tmp_path: Path, case: str, dry_run: bool
) -> None:
    overrides, says = WRONG[case]
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "apm.cli.submit",
            f"dataset.root={tiny}",
            f"output_root={out}",
            "memory=none",
            "backbone=random",
            *overrides,
            *(["--dry-run"] if dry_run else []),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and done.stderr.startswith("apm-submit: error: ")
    assert says in done.stderr, done.stderr
    assert "submit" not in done.stdout and not out.exists()  # no job listed, none queued, no ledger or log
