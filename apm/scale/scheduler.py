"""What SLURM says about jobs: ``squeue`` for live ones, ``sacct`` for the rest (None without SLURM)."""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Iterable

ACTIVE = {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "COMPLETING",
          "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"}
"""States of a job that will still write records."""


def available() -> bool:
    return shutil.which("squeue") is not None and shutil.which("sacct") is not None


def _lines(cmd: list[str]) -> list[str]:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def _expand(job_id: str) -> list[str]:
    """``12_[3-5,7%2]`` → ``12_3 12_4 12_5 12_7`` (sacct's form of pending array tasks)."""
    m = re.fullmatch(r"(\d+)_\[([^\]]+)\]", job_id)
    if not m:
        return [job_id]
    ids = []
    for part in m.group(2).split("%")[0].split(","):
        lo, _, hi = part.partition("-")
        ids += [f"{m.group(1)}_{i}" for i in range(int(lo), int(hi or lo) + 1)]
    return ids


def states(job_ids: Iterable[str]) -> dict[str, str] | None:
    """``{job id: state}`` (e.g. ``RUNNING``, ``CANCELLED``) for the ids SLURM knows; None without SLURM."""
    if not available():
        return None
    return {j: state.split()[0] if state else "UNKNOWN" for j, state in _by_job(job_ids, "State", "%T").items()}


def reasons(job_ids: Iterable[str]) -> dict[str, str]:
    """``{job id: reason}`` SLURM gives for the ids it knows (``Reason``: ``BeginTime`` for a requeued job held
    back, ``JobHeldUser``, ``Resources``…), leaving out ``None``; empty without SLURM."""
    if not available():
        return {}
    return {j: reason for j, reason in _by_job(job_ids, "Reason", "%r").items() if reason and reason != "None"}


def _by_job(job_ids: Iterable[str], sacct_field: str, squeue_field: str) -> dict[str, str]:
    """One field of each of the ids' jobs: ``sacct``'s, overridden by ``squeue``'s for the jobs still queued
    or running (all jobs asked: ``squeue -j`` fails on one unknown id)."""
    ids = sorted({j for j in job_ids if j})
    if not ids:
        return {}
    found: dict[str, str] = {}
    for line in _lines(["sacct", "-n", "-P", "-X", f"--format=JobID,{sacct_field}", "-j", ",".join(ids)]):
        job, _, value = line.partition("|")
        for j in _expand(job):
            found[j] = value
    for line in _lines(["squeue", "-h", "-r", "-o", f"%i|{squeue_field}"]):
        job, _, value = line.partition("|")
        found[job] = value
    return {j: v for j, v in found.items() if j in ids}
