"""What ``apm-submit [-m] OVERRIDES…`` does: submit a whole sweep as one SLURM array and return at once.

The sweep is expanded as Hydra's basic sweeper expands it (``hydra.sweeper.params`` of an experiment
preset first, then the command line); a config without ``shard.index`` becomes one job per shard of
its ``shard.count``. Shards already done (unless the sweep reruns: ``rerun=errors|all``), or with a
job still pending or running, are skipped, so resubmitting the same command finishes only what is
missing. Each array task runs ``apm-run`` with its overrides in-process and, on SLURM's warning
signal or a time-out, is requeued (``apm.cli.submit.RunShard.checkpoint``) and resumes from its records. The launcher
settings are the ``hydra/launcher`` preset's.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence, cast

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from omegaconf import DictConfig, OmegaConf

from apm.configs import CONF_DIR
from apm.runner import ledger
from apm.runner.app import check_config, check_shard, check_shards, load_checked_release, run_dir_of
from apm.runner.config import ConfigError
from apm.scale import scheduler
from apm.scale.status import last_job_id, record_counts, shard_status


@dataclass(frozen=True)
class ShardJob:
    """One (config, shard) job: its ``apm-run`` overrides and where its records go."""

    overrides: tuple[str, ...]
    run_dir: Path
    shard: str
    reruns: bool = False
    """Whether the job runs ``rerun=errors|all``, so a shard whose instances are all on record is not done."""


def _compose(overrides: Sequence[str]) -> DictConfig:
    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        return compose("config", overrides=list(overrides), return_hydra_config=True)


def sweep_combinations(overrides: Sequence[str]) -> list[list[str]]:
    """Every combination of the sweep: ``hydra.sweeper.params`` from the config, then the command line."""
    parser = OverridesParser.create()
    # the parser sets every override's input_line (Hydra types it Optional for hand-built ones)
    fixed = [cast(str, o.input_line) for o in parser.parse_overrides(list(overrides)) if not o.is_sweep_override()]
    params = _compose(fixed).hydra.sweeper.params or {}
    from_config = [f"{k}={v}" for k, v in params.items()]
    return _combinations(parser.parse_overrides(from_config + list(overrides)))


def _combinations(overrides: Sequence[Override]) -> list[list[str]]:
    """The cross product of the overrides' values, a later override of a key replacing an earlier one
    (the rule of Hydra's basic sweeper, written on its public override API)."""
    by_key: dict[str, list[str]] = {}
    for o in overrides:
        key = o.get_key_element()
        if o.is_sweep_override() and not o.is_discrete_sweep():
            raise ConfigError(f"{key}: only discrete sweeps (a,b,c or choice(...)) can be submitted")
        values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]
        by_key[key] = [f"{key}={v}" for v in values]
    return [list(c) for c in itertools.product(*by_key.values())]


def expand(overrides: Sequence[str]) -> tuple[list[ShardJob], dict[str, Any]]:
    """The sweep's (config, shard) jobs and the resolved ``hydra.launcher`` settings, each job checked as
    ``apm-run`` checks it before it starts an engine (its config, its release, its shard's selection), so
    a job that would fail on the node is refused here (``ConfigError``: one line) and nothing is queued."""
    jobs: list[ShardJob] = []
    launcher: dict[str, Any] = {}
    release_of = functools.cache(load_checked_release)  # each release loaded and checked once
    for combo in sweep_combinations(overrides):
        cfg = _compose(combo)
        check_config(cfg)  # before a job file, pickle or ledger line holds the overrides
        launcher = launcher or cast(dict[str, Any], OmegaConf.to_container(cfg.hydra.launcher, resolve=True))
        given = any(o.split("=", 1)[0].lstrip("+~") == "shard.index" for o in combo)
        check_shard(cfg.shard.index if given else 0, cfg.shard.count)
        indices = [cfg.shard.index] if given else range(cfg.shard.count)
        check_shards(cfg, release_of(str(cfg.dataset.root)), indices)
        for i in indices:
            extra = [] if given else [f"shard.index={i}"]
            jobs.append(ShardJob(tuple(combo + extra), run_dir_of(cfg), f"shard-{i}-of-{cfg.shard.count}",
                                 cfg.rerun is not None))
    return jobs, launcher


def make_executor(launcher: dict[str, Any]) -> Any:
    """A submitit executor set up as Hydra's submitit launcher would set it up from the same preset."""
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    params = dict(launcher)
    cluster = "slurm" if params.pop("_target_").endswith("SlurmLauncher") else "local"
    init = {f"{cluster}_max_num_timeout": params.pop("max_num_timeout")} if "max_num_timeout" in params else {}
    executor = submitit.AutoExecutor(folder=params.pop("submitit_folder"), cluster=cluster, **init)
    generic = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(**{k if k in generic else f"{cluster}_{k}": v for k, v in params.items()})
    return executor


def pending(jobs: list[ShardJob]) -> tuple[list[ShardJob], list[tuple[ShardJob, str]]]:
    """Split jobs into those to submit and those to skip (with why: done — unless the job reruns — or
    still queued/running)."""
    ids = [last_job_id(ledger.read_events(j.run_dir, j.shard)) or "" for j in jobs]
    states = scheduler.states(ids)
    todo, skipped = [], []
    counts: dict[Path, tuple[dict[str, bool], set[str]]] = {}
    for job in jobs:
        if job.run_dir not in counts:
            counts[job.run_dir] = record_counts(job.run_dir)
        status = shard_status(job.run_dir, job.run_dir, job.shard, *counts[job.run_dir], states, 0.0)
        if status.active or (status.complete and not job.reruns):
            skipped.append((job, status.state))
        else:
            todo.append(job)
    return todo, skipped


def gpus_per_job(launcher: dict[str, Any]) -> int:
    """GPUs one array task asks for: ``gpus_per_task`` × tasks × nodes, else ``gpus_per_node`` × nodes."""
    nodes = launcher.get("nodes") or 1
    if launcher.get("gpus_per_task"):
        return int(launcher["gpus_per_task"]) * int(launcher.get("tasks_per_node") or 1) * int(nodes)
    return int(launcher.get("gpus_per_node") or 0) * int(nodes)


def request_totals(count: int, launcher: dict[str, Any]) -> str:
    """What ``count`` jobs ask of the cluster at most: GPUs, hours of wall time and GPU-hours (each job's
    ``timeout_min``; requeues after a time-out can add up to ``max_num_timeout`` times that)."""
    gpus, hours = gpus_per_job(launcher), float(launcher.get("timeout_min") or 0) / 60
    at_once = launcher.get("array_parallelism")
    return (f"{count} jobs · {gpus} GPU(s) each, {count * gpus} in all"
            f"{f' ({min(count, int(at_once)) * gpus} at once)' if at_once else ''}"
            f" · {hours:g} h limit each: {count * hours:g} job-hours, {count * hours * gpus:g} GPU-hours at most")


def unset_slurm_settings(launcher: dict[str, Any]) -> list[str]:
    """Warnings for a SLURM launcher without a partition or account (sbatch then takes the cluster's
    defaults, or refuses the jobs)."""
    if not str(launcher.get("_target_", "")).endswith("SlurmLauncher"):
        return []
    settings = (("partition", "APM_SLURM_PARTITION"), ("account", "APM_SLURM_ACCOUNT"))
    return [f"apm-submit: warning: hydra.launcher.{key} is not set (${env}); sbatch uses the cluster's default "
            "or refuses the jobs" for key, env in settings if not launcher.get(key)]


def submit(jobs: list[ShardJob], launcher: dict[str, Any],
           task: Callable[[list[str]], Any]) -> list[tuple[ShardJob, str]]:
    """Submit ``jobs`` as one array without waiting (each array task calls ``task(overrides)``); record each
    in its shard's ledger."""
    executor = make_executor(launcher)
    handles = executor.map_array(task, [list(j.overrides) for j in jobs])
    for job, handle in zip(jobs, handles):
        ledger.append_event(job.run_dir, job.shard, "submitted", job_id=str(handle.job_id),
                            overrides=list(job.overrides), log=str(handle.paths.stdout))
    return [(job, str(h.job_id)) for job, h in zip(jobs, handles)]

