"""apm: the evaluation framework for APM-Bench (cross-session persistent memory for egocentric
streaming video assistants).

The Python API the console scripts wrap (docs/api.md) is exported here and loaded on first use, so
``import apm`` stays cheap: ``apm.compose`` / ``apm.run`` (``apm-run``), ``apm.judge_runs``
(``apm-judge``) and ``apm.reduce_runs`` (``apm-reduce``), with their typed results."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from apm.api.judge import JudgeResult, judge_runs
    from apm.api.reduce import ReduceResult, reduce_runs
    from apm.api.run import Composed, RunResult, compose, run

__version__ = "0.1.0"

_EXPORTS = {
    "compose": "apm.api.run",
    "run": "apm.api.run",
    "Composed": "apm.api.run",
    "RunResult": "apm.api.run",
    "judge_runs": "apm.api.judge",
    "JudgeResult": "apm.api.judge",
    "reduce_runs": "apm.api.reduce",
    "ReduceResult": "apm.api.reduce",
}
"""Each exported name and the module of :mod:`apm.api` that holds it."""

__all__ = [
    "Composed",
    "JudgeResult",
    "ReduceResult",
    "RunResult",
    "__version__",
    "compose",
    "judge_runs",
    "reduce_runs",
    "run",
]


def __getattr__(name: str) -> Any:
    """An exported name, its module imported on first use (PEP 562)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'apm' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
