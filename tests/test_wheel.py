"""The wheel works outside the checkout: built without packaging warnings, installed into a fresh
venv, ``apm-run --help`` and a tiny run from another directory use the configs inside the package."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from apm.synth import generate

REPO = Path(__file__).resolve().parents[1]


def _sh(*command: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _source_copy(target: Path) -> Path:
    """The checkout's files as git sees them (tracked, and untracked but not ignored), copied: the
    build runs there, so it neither sees nor leaves stale build folders in the checkout."""
    listed = _sh("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=REPO).stdout
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, target / name)
    return target


@pytest.mark.slow
def test_the_wheel_runs_from_anywhere(tmp_path: Path) -> None:
    source = _source_copy(tmp_path / "source")
    built = _sh(sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
                "-w", str(tmp_path / "dist"), cwd=tmp_path)
    assert "warning" not in (built.stdout + built.stderr).lower()
    (wheel,) = (tmp_path / "dist").glob("apm-*.whl")
    venv = tmp_path / "venv"
    _sh(sys.executable, "-m", "venv", "--without-pip", str(venv), cwd=tmp_path)
    python = venv / "bin" / "python"
    _sh(sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel), cwd=tmp_path)
    purelib = _sh(str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=tmp_path)
    deps = [p for p in site.getsitepackages() if Path(p).is_dir()]  # the dependencies, not this checkout's apm
    Path(purelib.stdout.strip(), "deps.pth").write_text("\n".join(deps) + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"WANDB_MODE": "disabled"}
    where = _sh(str(python), "-c", "import apm.configs as c; print(c.__file__); print(c.CONF_DIR)",
                cwd=elsewhere, env=env)
    module, conf = where.stdout.split()
    assert module.startswith(str(venv)) and conf.startswith(str(venv)) and Path(conf, "config.yaml").is_file()
    assert "apm-run" in _sh(str(venv / "bin" / "apm-run"), "--help", cwd=elsewhere, env=env).stdout
    release = generate(tmp_path / "release", seed=2, scale="tiny")
    _sh(str(venv / "bin" / "apm-run"), f"dataset.root={release}", "output_root=runs", "memory=none",
        "backbone=random", f"frames.cache_dir={tmp_path / 'cache'}", "logging.progress=false", cwd=elsewhere, env=env)
    assert list((elsewhere / "runs").rglob("records/*.jsonl"))
