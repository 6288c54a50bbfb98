"""What a run leaves behind: no secret anywhere, and a W&B offline run that reads back complete."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.runner import compose_run, records, run

from apm.synth import generate

SECRET = "sk-apm-test-0123456789abcdef"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("rel") / "tiny", seed=2, scale="tiny")


@pytest.fixture()
def fake_api():
    proc = subprocess.Popen([sys.executable, "-m", "apm.testing.fake_server", "--port", "0",
                             "--reply", '{"decision":"SILENT","reason":"nothing yet"}'],
                            stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline().split()[1])
    yield f"http://127.0.0.1:{port}/v1"
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture()
def wandb_env(tmp_path, monkeypatch):
    for var in ("WANDB_DIR", "WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    monkeypatch.setenv("WANDB_SILENT", "true")
    return tmp_path


def test_api_key_reaches_no_file_the_run_writes(tiny, tmp_path, fake_api, wandb_env, monkeypatch):
    monkeypatch.setenv("APM_TEST_API_KEY", SECRET)
    cfg = compose_run(tiny, tmp_path / "runs", tmp_path / "cache", [
        "backbone=gemini_3_6_flash", f"backbone.base_url={fake_api}", "backbone.api_key_env=APM_TEST_API_KEY",
        "backbone.max_attempts=1", "dataset.tasks=[RCR]", "logging.wandb.mode=offline",
    ])
    run_dir = run(cfg)
    recs = records(run_dir)
    assert recs and all(r["error"] is None and r["decision"] == "SILENT" for r in recs)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any("wandb" in str(p) for p in written)
    leaks = [p for p in written if SECRET.encode() in p.read_bytes()]
    assert leaks == []
    assert "APM_TEST_API_KEY" in (run_dir / "config.json").read_text()  # the variable's name, not its value


def test_wandb_offline_run_holds_every_instance_row(tiny, tmp_path, wandb_env):
    cfg = compose_run(tiny, tmp_path / "runs", tmp_path / "cache", [
        "backbone=random", "memory=none", "logging.wandb.mode=offline", "logging.wandb.table_chunk_rows=40",
    ])
    run_dir = run(cfg)
    n = len(records(run_dir))
    (offline,) = list((run_dir / "wandb").glob("offline-run-*"))
    out = subprocess.run(
        [str(Path(sys.executable).parent / "wandb"), "leet", "inspect", "--summary", "--json", str(offline)],
        capture_output=True,
        text=True,
        env={**os.environ, "WANDB_SILENT": "true"},
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    text = json.dumps(summary)
    assert f'"instances": {n}' in text and '"status": "finished"' in text
    chunks = sorted(offline.rglob("instances/chunk_*.table.json"))
    rows = sum(len(json.loads(p.read_text())["data"]) for p in chunks)
    assert rows == n and len(chunks) == -(-n // 40)  # nothing cut: every row, in 40-row chunks
