"""What every console script does for a person at a shell (issue 36, item 9): ``--version`` names apm's
version and the identity of its code, a pipe closed early (``| head -1``) ends the command quietly, and
the README says how to get tab completion; ``--help`` and ``--version`` answer before the heavy stack is
imported (issue 37, item 6)."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
from pathlib import Path

import pytest

from apm.runner.code import apm_code, code_identity
from apm.synth import generate

REPO = Path(__file__).resolve().parents[1]


def _scripts() -> dict[str, str]:
    """Each console script of setup.cfg and the module its ``main`` is in."""
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(REPO / "setup.cfg")
    lines = [line.split("=") for line in cfg["options.entry_points"]["console_scripts"].strip().splitlines()]
    return {name.strip(): target.strip().split(":")[0] for name, target in lines}


def _command(module: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=REPO)


@pytest.mark.parametrize("script", sorted(_scripts()))
def test_every_command_says_its_version_and_code_identity(script: str) -> None:
    done = _command(_scripts()[script], "--version")
    identity = code_identity({"apm": apm_code(), "modules": {}})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{script} (apm {apm_code()['version']}, code {identity})", done.stdout


HEAVY = {"pandas", "matplotlib", "numpy", "torch", "transformers", "wandb", "av", "hydra", "omegaconf", "submitit",
         "scipy", "PIL"}
"""Packages whose import alone costs a visible fraction of a second; none is needed to print usage."""


def _imported(module: str, *args: str) -> set[str]:
    """The top-level packages ``python -m module args`` imported (``-X importtime``'s report on stderr)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", module, *args], capture_output=True,
                          text=True, timeout=120, env=env, cwd=REPO)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip().split(".")[0] for line in done.stderr.splitlines()
            if line.startswith("import time:") and line.count("|") == 2}


@pytest.mark.parametrize("flag", ["--help", "--version"])
@pytest.mark.parametrize("script", sorted(_scripts()))
def test_help_and_version_import_none_of_the_heavy_stack(script: str, flag: str) -> None:
    imported = _imported(_scripts()[script], flag)
    assert "apm" in imported  # the report was read
    assert not imported & HEAVY, sorted(imported & HEAVY)


def test_a_pipe_closed_early_ends_the_command_quietly(tmp_path: Path) -> None:
    release = generate(tmp_path / "tiny", seed=1, scale="tiny")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    piped = subprocess.run(f"{sys.executable} -m apm.cli.data keys {release} | head -1", shell=True,
                           capture_output=True, text=True, timeout=120, env=env)
    assert len(piped.stdout.splitlines()) == 1
    assert "Error" not in piped.stderr and "Traceback" not in piped.stderr, piped.stderr


def test_the_readme_says_how_to_get_tab_completion() -> None:
    readme = (REPO / "README.md").read_text()
    assert "apm-run -sc install=bash" in readme and "--hydra-help" in readme


def test_the_readmes_cache_step_tells_the_run_where_the_cache_is() -> None:
    """A cache built with ``--cache-dir DIR`` is used by a run only when the run is told so."""
    step = (REPO / "README.md").read_text().split("3. **Decode once.**")[1].split("4. **Run.**")[0]
    assert "frames.cache_dir=DIR" in step and "APM_CACHE_DIR" in step
