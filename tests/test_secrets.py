"""Secrets are never written: a key a server echoes and a URL's password reach no file, log or W&B run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from apm.synth import generate

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-test-0123456789abcdefSECRET"
PASSWORD = "hunter2-PASSWORD-9876"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("rel") / "tiny", seed=5, scale="tiny")


def _serve(*flags: str, env: dict[str, str]) -> tuple[subprocess.Popen, int]:
    server = subprocess.Popen([sys.executable, "-m", "apm.testing.fake_server", "--port", "0", *flags],
                              stdout=subprocess.PIPE, text=True, env=env)
    line = server.stdout.readline()
    assert line.startswith("PORT "), line
    return server, int(line.split()[1])


def _run(tiny: Path, tmp: Path, base_url: str, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "apm.runner.app", f"dataset.root={tiny}", f"output_root={tmp / 'runs'}",
         f"frames.cache_dir={tmp / 'cache'}", "logging.progress=false", "logging.wandb.mode=offline",
         "memory=none", "backbone=openai_compatible", f"backbone.base_url={base_url}", "backbone.model=m",
         "backbone.api_key_env=APM_TEST_KEY", "dataset.limit=6", "preflight=false", *extra],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )


def _leaks(root: Path, secret: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


@pytest.mark.parametrize("case", ["echoed key", "password in the URL"])
def test_no_secret_is_written(tiny: Path, tmp_path: Path, case: str) -> None:
    env = {**os.environ, "APM_TEST_KEY": KEY, "WANDB_DIR": str(tmp_path / "wandb"), "WANDB_SILENT": "true"}
    server, port = _serve(*(["--echo-headers"] if case == "echoed key" else []), env=env)
    try:
        url = (f"http://127.0.0.1:{port}/v1" if case == "echoed key"
               else f"http://user:{PASSWORD}@127.0.0.1:{port}/v1")
        done = _run(tiny, tmp_path, url, env)
    finally:
        server.terminate()
        server.wait(timeout=30)
    records = list((tmp_path / "runs").rglob("records/*.jsonl"))
    assert records, done.stderr
    if case == "echoed key":
        assert done.returncode == 1 and "***" in records[0].read_text()  # every instance refused, key masked
    for secret in (KEY, PASSWORD):
        assert secret not in done.stdout + done.stderr
        assert not _leaks(tmp_path, secret)


@pytest.mark.parametrize(("override", "message"), [
    ("backbone.api_key_env=sk-live-abcdef0123456789", "the name of an environment variable, not a key"),
    ("+backbone.api_key=sk-live-abcdef0123456789", "a key is never written in a config"),
])
def test_a_key_written_into_the_config_is_refused(tiny: Path, tmp_path: Path, override: str, message: str) -> None:
    done = _run(tiny, tmp_path, "http://127.0.0.1:9/v1", {**os.environ, "APM_TEST_KEY": KEY}, override)
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "sk-live-abcdef0123456789" not in done.stderr + done.stdout
    assert not (tmp_path / "runs").exists()
