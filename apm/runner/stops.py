"""When a run stops early: consecutive endpoint failures (``fail_fast``, :mod:`apm.backbones.fail_fast`),
a job that left failures on record, or one that refused an instance for causality. Each stop is one line
saying why and what to change, and a non-zero exit of ``apm-run``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from apm.backbones.fail_fast import RunStopped

RERUN_HINT = "fix the cause, then rerun=errors runs them again"


def failures(what: str, lines: Sequence[dict[str, Any]]) -> str:
    """``<k> of <n> <what> failed; the first: <its error>`` ('' when none of ``lines`` has an error)."""
    failed = [line["error"] for line in lines if line.get("error") is not None]
    return f"{len(failed)} of {len(lines)} {what} failed; the first: {failed[0]}" if failed else ""


def check_answered(records: Sequence[dict[str, Any]], memory: Sequence[dict[str, Any]]) -> None:
    """A job whose instances (``records``: their newest lines on record) or memory updates (``memory``: the
    newest line of each session of its trajectories) include failures stops with :class:`RunStopped`,
    naming them and ``rerun=errors`` (the lines stay on record; a rerun redoes them and whatever saw them)."""
    said = [s for s in (failures("memory updates", memory), failures("instances", records)) if s]
    if said:
        raise RunStopped(f"{'; '.join(said)}; {RERUN_HINT}")


def check_causal_run(refused: list[str]) -> None:
    """A run that refused instances for causality stops with :class:`RunStopped` after it ends (their
    records carry the error; a rerun redoes them, so it refuses again until the method is fixed)."""
    if refused:
        raise RunStopped(f"{len(refused)} instances were shown what they may not see (causality), "
                         f"their records refused; the first: {refused[0]}")
