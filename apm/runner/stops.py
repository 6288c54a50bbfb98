"""When a run stops early: consecutive endpoint failures (``fail_fast``, :mod:`apm.backbones.fail_fast`),
or a job whose every instance failed. Each stop is one line saying why and what to change, and a
non-zero exit of ``apm-run``."""

from __future__ import annotations

from apm.backbones.fail_fast import RunStopped


def check_answered(new: int, errors: int, first_error: str | None) -> None:
    """A job whose every new instance failed stops with :class:`RunStopped` (its records stay on record)."""
    if new and errors == new:
        raise RunStopped(f"every one of the {new} instances run failed; the first: {first_error}")


def check_causal_run(refused: list[str]) -> None:
    """A run that refused instances for causality stops with :class:`RunStopped` after it ends (their
    records carry the error; a rerun redoes them, so it refuses again until the method is fixed)."""
    if refused:
        raise RunStopped(f"{len(refused)} instances were shown what they may not see (causality), "
                         f"their records refused; the first: {refused[0]}")
