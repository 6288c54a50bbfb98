"""``apm.judge_runs``: the judge stage over finished runs, exactly as ``apm-judge`` runs it (``apm-judge``
parses its arguments and calls this)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from apm.api.loop import blocking
from apm.backbones.base import Backbone, as_backbone
from apm.configs import CONF_DIR
from apm.judge.stage import JudgeStage, JudgeStats, judge_model, summary_line
from apm.records.atomic import read_run_config
from apm.records.redact import redact_logging
from apm.records.rundir import find_runs
from apm.runner.config import register


class NoJudge(ValueError):
    """No judge chosen: the ``judge`` config group is empty."""


class NoRuns(ValueError):
    """No run directory (with ``config.json``) at or below the paths given."""


@dataclass(frozen=True)
class JudgeResult:
    """What the stage did: the judge (display name and model identity), the run dirs it judged, and its
    probes: ``judged`` now, ``failed`` (unjudged, asked again next time), ``cached`` (a verified judgement on
    record), ``rejected`` (on record but not verifying: judged again); ``calls``: requests made (model
    calls, unless the judge is a reference that calls none); ``summary``: all of it in ``apm-judge``'s line."""

    judge: str
    model: str
    run_dirs: tuple[Path, ...]
    judged: int
    failed: int
    cached: int
    rejected: int
    calls: int
    summary: str


def judge_backbone(overrides: Sequence[str]) -> Backbone:
    """The judge of the ``judge`` config group (``judge=deepseek_v4_flash``, ``judge.concurrency=2``),
    composed with the run's config (whose schema the runner's config module registers)."""
    register()
    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        cfg = compose("config", overrides=list(overrides))
    if cfg.judge is None:
        raise NoJudge("choose a judge, e.g. judge=deepseek_v4_flash")
    return as_backbone(instantiate(cfg.judge, _convert_="all"))


def judge_runs(
    runs: Sequence[str | os.PathLike[str]],
    judge: str | None = None,
    *,
    overrides: Sequence[str] = (),
    concurrency: int = 8,
    invalid_retries: int = 2,
    fail_fast: int = 3,
    preflight: bool = True,
) -> JudgeResult:
    """Judge the gate-passing adaptive records of the runs at or below ``runs`` with ``judge`` (a
    ``judge`` config option, e.g. ``gate_only``) and ``overrides``; a damaged ``config.json`` is refused
    before anything is written. ``fail_fast``: consecutive endpoint failures that stop it (0: never)."""
    run_dirs = find_runs(runs, need_config=True).paths
    if not run_dirs:
        raise NoRuns(f"no run directories (with config.json) at or below {', '.join(map(str, runs))}")
    for run_dir in run_dirs:
        read_run_config(run_dir)  # a damaged config.json is refused before any lock is taken
    backbone = judge_backbone([*([f"judge={judge}"] if judge else []), *overrides])
    stage = JudgeStage(
        backbone,
        concurrency=concurrency,
        invalid_retries=invalid_retries,  # registers its key
        fail_fast=fail_fast,
        preflight=preflight,
        exclusive=True,
    )
    redact_logging()  # the judge's key never reaches a log line
    stats = blocking(_judged(backbone, stage, run_dirs))
    return JudgeResult(
        backbone.name,
        judge_model(backbone),
        tuple(run_dirs),
        stats.judged,
        stats.failed,
        stats.cached,
        stats.rejected,
        stats.calls,
        summary_line(backbone, stats),
    )


async def _judged(judge: Backbone, stage: JudgeStage, run_dirs: list[Path]) -> JudgeStats:
    await judge.start()
    try:
        return await stage.run(run_dirs)
    finally:
        await judge.close()
