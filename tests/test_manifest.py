"""Provenance: every apm-run job leaves a manifest of what produced its records, one file per shard."""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
from datetime import datetime
from importlib import metadata
from pathlib import Path

import pytest

from apm.data.fingerprint import release_fingerprint
from apm.prompts import PROMPT_VERSION
from apm.records.rundir import RunDir
from apm.runner import manifest
from apm.synth import generate

REPO = Path(__file__).resolve().parents[1]
SECRET = "sk-apm-manifest-0123456789"
SLURM = {"SLURM_JOB_ID": "4242", "SLURM_ARRAY_JOB_ID": "4240", "SLURM_ARRAY_TASK_ID": "2"}


@pytest.fixture(scope="module")
def two_shards(tmp_path_factory) -> tuple[Path, Path]:
    """A run of the tiny release as two shard jobs under (pretend) SLURM; its release and run dir."""
    tmp = tmp_path_factory.mktemp("manifest")
    tiny = generate(tmp / "tiny", seed=5, scale="tiny")
    env = {**os.environ, **SLURM, "APM_TEST_SECRET": SECRET}
    for index in (0, 1):
        done = subprocess.run(
            [sys.executable, "-m", "apm.cli.run", f"dataset.root={tiny}", f"output_root={tmp / 'runs'}",
             f"frames.cache_dir={tmp / 'cache'}", "logging.wandb.mode=disabled", "logging.progress=false",
             "memory=none", "backbone=random", "dataset.tasks=[ER,RCR]", "shard.count=2", f"shard.index={index}"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    (run_dir,) = {p.parent.parent for p in (tmp / "runs").rglob("jobs/*")}
    return tiny, run_dir


def test_each_shard_job_writes_its_own_manifest_of_what_produced_the_records(two_shards):
    tiny, run_dir = two_shards
    found = manifest.read_manifests(run_dir)
    assert [m["shard"] for m in found] == ["shard-0-of-2", "shard-1-of-2"]
    assert all((run_dir / "jobs" / m["shard"] / "manifest.json").is_file() for m in found)
    assert [p.name for p in run_dir.glob("jobs/*/.*.tmp")] == []  # written via temp file + rename
    config = json.loads((run_dir / "config.json").read_text())
    for m in found:
        assert m["apm_version"] == metadata.version("apm")
        assert m["packages"]["python"] == platform.python_version()
        assert set(m["packages"]) == {"python", *manifest.PACKAGES}
        assert m["packages"]["numpy"] == metadata.version("numpy") and m["packages"]["hydra-core"] == "1.3.8"
        assert m["command"][1:] == [a for a in m["command"][1:] if "=" in a] and "memory=none" in m["command"]
        started, ended = (datetime.fromisoformat(m[k]) for k in ("started_at", "ended_at"))
        assert started.utcoffset().total_seconds() == 0 and started <= ended
        assert m["status"] == "finished" and m["error"] is None
        assert m["host"] == socket.gethostname()
        assert m["accelerator"] is None or all(isinstance(name, str) and name for name in m["accelerator"])
        assert m["config_hash"] == config["config_hash"]
        assert m["release_fingerprint"] == release_fingerprint(tiny) == config["release_fingerprint"]
        assert m["prompt_version"] == PROMPT_VERSION and m["code"] == config["code_identity"]
        assert m["slurm"] == {"job_id": "4242", "array_job_id": "4240", "array_task_id": "2"}


def test_the_manifest_names_the_source_checkout(two_shards):
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("this checkout is not a git repository")
    for m in manifest.read_manifests(two_shards[1]):
        assert m["git"]["commit"] == head.stdout.strip() and isinstance(m["git"]["dirty"], bool)


def test_no_secret_from_the_environment_reaches_a_manifest(two_shards):
    for path in two_shards[1].glob("jobs/*/manifest.json"):
        assert SECRET not in path.read_text() and "APM_TEST_SECRET" not in path.read_text()


def test_a_job_that_fails_is_recorded_as_interrupted(tmp_path, monkeypatch):
    for var in SLURM:
        monkeypatch.delenv(var, raising=False)
    path = RunDir(tmp_path).manifest("shard-0-of-1")
    started = manifest.job_started(path, {"shard": "shard-0-of-1"})
    assert manifest.read_manifests(tmp_path)[0]["ended_at"] is None
    manifest.job_ended(path, started, KeyboardInterrupt())
    (ended,) = manifest.read_manifests(tmp_path)
    assert ended["status"] == "interrupted" and ended["error"] == "KeyboardInterrupt"
    assert ended["started_at"] == started["started_at"] and ended["ended_at"] and ended["slurm"] is None


def test_provenance_imports_no_engine():
    code = "import sys; from apm.runner.manifest import provenance; provenance(); print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.stdout.strip() == "False", done.stderr
