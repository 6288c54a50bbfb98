"""A job's progress: a tqdm bar on a terminal, plain periodic lines in a log (a SLURM job's output file),
never a flood of ``\\r`` redraws."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from apm.live.progress import BarProgress, LineProgress, NoProgress, job_progress
from apm.synth import generate


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_lines_say_done_total_errors_rate_and_eta_every_period() -> None:
    out, clock, errors = io.StringIO(), Clock(), [0]
    progress = LineProgress(0, "none · Random", lambda: errors[0], out, every_s=30, clock=clock)
    progress.reset(total=100)
    for second in range(1, 61):
        clock.now = float(second)
        errors[0] = second // 20
        progress.update(1)
    progress.close()
    progress.close()
    lines = out.getvalue().splitlines()
    assert lines == [
        "none · Random: 30/100 instances (30%), 1 errors, 1.00 inst/s, ETA 0:01:10",
        "none · Random: 60/100 instances (60%), 3 errors, 1.00 inst/s, ETA 0:00:40",
        "none · Random: 60/100 instances (60%), 3 errors, 1.00 inst/s, ETA 0:00:40",
    ]
    assert "\r" not in out.getvalue()


def test_a_file_gets_lines_a_terminal_a_bar_and_disabled_nothing(tmp_path: Path) -> None:
    with open(tmp_path / "log", "w") as log:
        assert isinstance(job_progress(3, "x", lambda: 0, stream=log), LineProgress)
    assert isinstance(job_progress(3, "x", lambda: 0, enabled=False), NoProgress)
    leader, follower = pty.openpty()
    with os.fdopen(follower, "w") as terminal:
        bar = job_progress(3, "x", lambda: 0, stream=terminal)
        assert isinstance(bar, BarProgress)
        bar.close()
    os.close(leader)


@pytest.mark.slow
def test_apm_run_draws_a_bar_on_a_terminal_and_lines_into_a_log(tmp_path: Path) -> None:
    release = generate(tmp_path / "rel", seed=3, scale="tiny")
    common = [sys.executable, "-m", "apm.cli.run", f"dataset.root={release}", f"frames.cache_dir={tmp_path / 'c'}",
              "memory=none", "backbone=random", "logging.wandb.mode=disabled", "preflight=false", "dataset.limit=20"]
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    with open(tmp_path / "slurm.out", "w") as log:  # as SLURM writes a job's output: a file
        done = subprocess.run([*common, f"output_root={tmp_path / 'a'}", "logging.progress_every_s=0"],
                              stdout=log, stderr=subprocess.STDOUT, timeout=300, env=env)
    text = (tmp_path / "slurm.out").read_text()
    assert done.returncode == 0, text[-2000:]
    assert "\r" not in text
    lines = [line for line in text.splitlines() if " instances (" in line and "inst/s" in line]
    assert len(lines) == 21 and lines[-1].startswith("SimpleStream · Random: 20/20 instances (100%), 0 errors")

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal has a size
    proc = subprocess.Popen([*common, f"output_root={tmp_path / 'b'}"], stdout=subprocess.DEVNULL, stderr=follower,
                            env=env)
    os.close(follower)
    drawn = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        drawn += chunk
    os.close(leader)
    assert proc.wait(timeout=300) == 0, drawn.decode(errors="replace")[-2000:]
    assert b"\r" in drawn and b"20/20" in drawn and b" instances (" not in drawn  # tqdm's bar, not the log lines
