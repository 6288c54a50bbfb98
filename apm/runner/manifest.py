"""Per-job provenance manifest ``<run dir>/jobs/<shard>/manifest.json``: what produced the records.

One file per shard job, so concurrent shards never write the same file; written atomically (a temp
file in the same folder, then ``os.replace``) when the job starts and again when it ends. It names
the apm version and source commit, the packages, the command line, host, accelerator and times, and
the run's identity. Of the environment only SLURM's job ids are read, so no secret can reach it.
Standard library (and the redaction rule) only: the reducer reads manifests without importing an engine.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import apm
from apm.records.atomic import write_json_atomically
from apm.records.redact import redact_data
from apm.records.rundir import RunDir

PACKAGES = ("torch", "vllm", "transformers", "av", "hydra-core", "omegaconf", "wandb", "pandas", "numpy")
"""Distributions whose installed version is recorded (read from metadata, never imported)."""
SLURM_IDS = {"job_id": "SLURM_JOB_ID", "array_job_id": "SLURM_ARRAY_JOB_ID", "array_task_id": "SLURM_ARRAY_TASK_ID"}
PROBE_TIMEOUT_S = 5.0
"""How long ``git`` or ``nvidia-smi`` may take before the manifest records null instead."""


def job_started(path: Path, identity: dict[str, Any]) -> dict[str, Any]:
    """Write (at ``path``: :meth:`RunDir.manifest`) and return the manifest of a job starting now:
    provenance, ``identity``, no end yet."""
    manifest = {**provenance(), **identity, "started_at": _now(), "ended_at": None, "status": "running",
                "error": None}
    write_json_atomically(path, manifest)
    return manifest


def job_ended(path: Path, manifest: dict[str, Any], error: BaseException | None) -> None:
    """Rewrite the manifest with ``ended_at`` and the exit status (``finished`` or ``interrupted``)."""
    status = {"status": "finished" if error is None else "interrupted",
              "error": None if error is None else type(error).__name__}
    write_json_atomically(path, manifest | {"ended_at": _now()} | status)


def read_manifests(run_dir: Path) -> list[dict[str, Any]]:
    """Every job manifest of a run directory, in shard-folder name order."""
    return [json.loads(p.read_text()) for p in RunDir(Path(run_dir)).manifests()]



def provenance() -> dict[str, Any]:
    """What this process is: versions, source checkout, command line, host, accelerator, SLURM ids."""
    return {
        "apm_version": _version("apm"),
        "git": _git(Path(apm.__file__).resolve().parents[1]),
        "packages": {"python": platform.python_version(), **{name: _version(name) for name in PACKAGES}},
        "command": redact_data(list(sys.argv)),
        "host": socket.gethostname(),
        "accelerator": _accelerator(),
        "slurm": {k: os.environ.get(v) for k, v in SLURM_IDS.items()} if "SLURM_JOB_ID" in os.environ else None,
    }


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _probe(*command: str) -> str | None:
    """A short command's stripped stdout; None when it is missing, fails or outlasts the timeout."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _git(source: Path) -> dict[str, Any] | None:
    """Commit and dirty flag of the checkout apm is imported from; None when ``source`` is not one."""
    git = ("git", "-C", str(source), "--no-optional-locks")
    top = _probe(*git, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != source:
        return None
    status = _probe(*git, "status", "--porcelain", "--untracked-files=no")
    return {"commit": _probe(*git, "rev-parse", "HEAD"), "dirty": None if status is None else status != ""}


def _accelerator() -> list[str] | None:
    """CUDA device names from ``nvidia-smi`` (never by importing torch); None without one."""
    names = _probe("nvidia-smi", "--query-gpu=name", "--format=csv,noheader")
    return [n.strip() for n in names.splitlines() if n.strip()] if names else None
