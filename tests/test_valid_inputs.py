"""Every valid input runs and every bad one is one line (issue 35): a FIFO in a run's folders, long or
odd session ids, damaged run files, a video outside the release."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.runner import GOOD_JUDGEMENT, compose_run, run, served

BLOCKED_S = 60
"""Longer than any of these commands takes on the tiny run; a reader blocked on a FIFO never returns."""


@pytest.fixture(scope="module")
def oracle_run(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("inputs")
    return run(compose_run(tiny, tmp / "runs", tmp / "cache", ["memory=none", "backbone=oracle", "dataset.tasks=[ER,RCR]"]))


def _command(name: str, *args: str) -> str:
    """Run ``apm-<name> args`` as a user would (killed, failing the test, if it blocks); what it said."""
    done = subprocess.run([sys.executable, "-m", f"apm.cli.{name}", *args], capture_output=True, text=True,
                          timeout=BLOCKED_S, env={**os.environ, "WANDB_MODE": "disabled", "APM_JUDGE_KEY": "k"})
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    return done.stdout + done.stderr


def test_a_fifo_among_a_runs_line_files_is_skipped_unopened(oracle_run: Path, tmp_path: Path) -> None:
    """A FIFO named like a line file in ``records/``, ``judgements/`` and ``memory/`` blocks no command:
    ``apm-judge``, ``apm-status``, ``apm-reduce`` and ``apm-view`` finish, the readers naming it."""
    for kind in ("records", "judgements", "memory"):
        (oracle_run / kind).mkdir(exist_ok=True)
        os.mkfifo(oracle_run / kind / "zz-pipe.jsonl")
    with served(reply=GOOD_JUDGEMENT) as server:
        judged = _command("judge", str(oracle_run), "judge=deepseek_v4_flash", f"judge.base_url={server.base_url}",
                          "judge.api_key_env=APM_JUDGE_KEY", "--no-preflight")
    _command("status", str(oracle_run))
    reduced = _command("reduce", str(oracle_run), "--out", str(tmp_path / "out"), "--bootstrap", "0", "--no-figures")
    viewed = _command("view", str(oracle_run), "--out", str(tmp_path / "site"))
    for said in (judged, reduced, viewed):
        assert "zz-pipe.jsonl" in said and "not a regular file (a FIFO)" in said, said[-2000:]
