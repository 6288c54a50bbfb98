"""When a run stops early: consecutive endpoint failures (``fail_fast``, :mod:`apm.backbones.fail_fast`),
a job that left failures on record, or one that refused an instance for causality. Each stop is one line
saying why and what to change, and a non-zero exit of ``apm-run``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from apm.backbones.fail_fast import RunStopped

RERUN_HINT = "fix the cause, then rerun=errors runs them again"


def failures(what: str, lines: Sequence[dict[str, Any]], failed: Sequence[dict[str, Any]]) -> str:
    """``<k> of <n> <what> failed; the first: <its error>`` ('' when none ``failed``)."""
    return f"{len(failed)} of {len(lines)} {what} failed; the first: {failed[0]['error']}" if failed else ""


def run_failed(record: dict[str, Any], answers_from_instance: bool) -> bool:
    """Whether a record's error is a failure of the run: any error but, for a reference baseline that
    answers from the instance (``answers_from_annotations``), one it was asked and had no answer for
    (always-silent on MCQA: by design, counted wrong in every score, and the same on every rerun)."""
    asked = (record.get("attempts") or 0) > 0
    return record.get("error") is not None and not (answers_from_instance and asked)


def check_answered(records: Sequence[dict[str, Any]], memory: Sequence[dict[str, Any]],
                   answers_from_instance: bool = False) -> None:
    """A job whose instances (``records``: their newest lines on record) or memory updates (``memory``: the
    newest line of each session of its trajectories) include failures (:func:`run_failed`) stops with
    :class:`RunStopped`, naming them and ``rerun=errors`` (the lines stay on record; a rerun redoes them
    and whatever saw them)."""
    failed = [r for r in records if run_failed(r, answers_from_instance)]
    said = [failures("memory updates", memory, [m for m in memory if m.get("error") is not None]),
            failures("instances", records, failed)]
    if any(said):
        raise RunStopped(f"{'; '.join(s for s in said if s)}; {RERUN_HINT}")


def check_causal_run(refused: list[str]) -> None:
    """A run that refused instances for causality stops with :class:`RunStopped` after it ends (their
    records carry the error; a rerun redoes them, so it refuses again until the method is fixed)."""
    if refused:
        raise RunStopped(f"{len(refused)} instances were shown what they may not see (causality), "
                         f"their records refused; the first: {refused[0]}")
