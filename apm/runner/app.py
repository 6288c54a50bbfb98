"""The job ``apm-run`` runs (its entry point: ``apm.cli.run``): compose, check, then run the online protocol.

The run directory is ``<output_root>/<dataset>/<memory>/<backbone>-<config hash>``: the same for a
rerun, a resume, a requeued job and every shard, so records accumulate in one place and what is on
record is skipped. Each shard job writes ``records/shard-<i>-of-<n>.jsonl`` there.

Everything that can be checked is checked before the job writes anything (its config file, plan,
ledger, manifest or W&B run): the config groups' argument types, API key variables, the release, and
each served engine with the shard's largest request (``apm.runner.preflight``). A job that fails a
check leaves nothing behind (Hydra's own job folder is removed again) and ``apm-run`` prints one line.
"""

from __future__ import annotations

import difflib
import logging
import math
import os
import shutil
import sys
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from apm.backbones.base import GenerationSettings, as_backbone
from apm.backbones.openai_api import url_credentials_problem
from apm.data.fingerprint import release_fingerprint
from apm.data.instances import Instance, release_instances
from apm.data.model import Release, Trajectory
from apm.data.problems import ReleaseError
from apm.data.release import load_release
from apm.data.tasks import EA, TASKS
from apm.judge.stage import JudgeStage
from apm.live.progress import job_progress
from apm.live.wandb_sink import WandbSink
from apm.prompts import PROMPT_VERSION
from apm.records.atomic import write_json_atomically
from apm.records.declaration import run_declarations
from apm.records.jsonl import latest_records
from apm.records.redact import ENV_NAME, redact_data, register_config_secrets
from apm.records.rundir import RunDir
from apm.records.wandb_identity import release_group, run_config
from apm.runner import latency, ledger, listing, manifest
from apm.runner.code import code_identity, code_parts
from apm.runner.config import (
    SUBSET_KEYS,
    ConfigError,
    Rerun,
    check_arguments,
    config_hash,
    method_identity,
    register,
    run_name,
    uses_writer,
)
from apm.runner.identity import refuse_other_identity, with_models
from apm.runner.online import OnlineRun, RunStats, newest_memory_lines
from apm.runner.preflight import preflight
from apm.runner.setup import RunSetup, frame_budget
from apm.runner.shard_lock import holding_shard
from apm.runner.shards import shard_trajectories
from apm.runner.stops import check_answered, check_causal_run
from apm.runner.summary import score_summary
from apm.video.cache import FrameCache

log = logging.getLogger("apm.run")


def _run_name(cfg: DictConfig) -> str:
    """The run's folder below ``output_root``, from the config's protocol and backbone display names."""
    return run_name(cfg, cfg.memory.get("name") or "memory", cfg.backbone.get("name") or "backbone")


register()
OmegaConf.register_new_resolver("apm_run_name", lambda *, _root_: _run_name(_root_), replace=True)


def run_dir_of(cfg: DictConfig) -> Path:
    return Path(cfg.output_root) / _run_name(cfg)


def _instantiate(node: Any) -> Any:
    return instantiate(node, _convert_="all") if node is not None else None


PAPER_MAX_FRAMES = 1024
"""Section 4.1: Qwen-series and API models sample up to 1,024 frames."""


def save_config(cfg: DictConfig, setup: RunSetup) -> None:
    """The resolved config, its hash, the release fingerprint and the run's identity (its parts and their
    digests, as lines carry them), next to the records; the release root is made absolute, so
    ``apm-judge`` finds the release from any working directory."""
    setup.run_dir.mkdir(parents=True, exist_ok=True)
    resolved = redact_data(OmegaConf.to_container(cfg, resolve=True))
    resolved["dataset"]["root"] = str(Path(cfg.dataset.root).expanduser().resolve())
    saved = {"config_hash": config_hash(cfg), "release_fingerprint": release_fingerprint(cfg.dataset.root),
             "code": setup.identity["code"], "code_identity": setup.run_info["code"],
             "model": setup.identity.get("model"), "model_identity": setup.run_info.get("model"), "config": resolved}
    write_json_atomically(RunDir(setup.run_dir).config, saved)


@dataclass(frozen=True)
class ShardPlan:
    """The shard's trajectories and instances (what its ``plan.json`` lists), and the part this job runs
    (``dataset.limit`` / ``dataset.trajectories``: a subset whose records count toward the whole);
    ``population``: the instances of every shard together (what a complete run has on record)."""

    trajectories: list[Trajectory]
    instances: list[Instance]
    run_trajectories: list[Trajectory]
    run_instances: list[Instance]
    population: int
    subset: list[str] = field(default_factory=list)
    """The settings (``dataset.limit=13``) by which the job runs only part of its shard; empty when it runs
    all of it. Every output of such a job says so (its warning, closing line, score screen and manifest)."""


ENGINE_KEYS = ("backbone", "writer", "judge")
"""Config keys that may hold an engine with an API key variable."""


def settings(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf of a JSON-like config as ``(dotted.key, value)``."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from settings(value, f"{prefix}{key}.")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from settings(value, f"{prefix}{i}.")
    else:
        yield prefix.removesuffix("."), node


def check_engine_urls(cfg: DictConfig) -> None:
    """Refuse a ``base_url`` (at any depth) that carries credentials, naming the setting; every secret
    the config reaches is registered for redaction first, so no line about it can leak one (Hydra's own
    node, which ``apm-submit`` composes too, is not the run's)."""
    resolved = OmegaConf.to_container(OmegaConf.masked_copy(cfg, [str(k) for k in cfg if k != "hydra"]), resolve=True)
    register_config_secrets(resolved)
    for setting, value in settings(resolved):
        if setting.rpartition(".")[2] == "base_url" and isinstance(value, str):
            if problem := url_credentials_problem(value, setting):
                raise ConfigError(problem)


def check_config(cfg: DictConfig) -> None:
    """What composing cannot check: the config groups' argument names and types, that every API key
    variable an engine names is set (a judge's too, though it runs only after the run) and that no URL an
    engine calls carries credentials. Every secret the config reaches is registered for redaction first."""
    check_engine_urls(cfg)
    if cfg.get("rerun_errors") is not None:
        raise ConfigError("rerun_errors: replaced by rerun=errors (run again what failed) or rerun=all "
                          "(that, and redo what other code made)")
    for key in ENGINE_KEYS:
        if "api_key" in (cfg.get(key) or {}):
            raise ConfigError(f"{key}.api_key: a key is never written in a config; export it and name the variable "
                              f"in {key}.api_key_env")
    for key in ("memory", *ENGINE_KEYS):
        check_arguments(cfg.get(key), key)
    for key in ENGINE_KEYS:
        engine = cfg.get(key) or {}
        variable = engine.get("api_key_env")
        if variable and not ENV_NAME.fullmatch(str(variable)):
            raise ConfigError(f"{key}.api_key_env: the name of an environment variable, not a key "
                              "(it would be saved with the run)")
        if variable and not os.environ.get(variable):
            raise ConfigError(f"{key}.api_key_env: ${variable} is not set; export the key there (read from there only)")


def load_checked_release(root: str) -> Release:
    """The release, or one line saying how many problems it has and how to list them."""
    try:
        return load_release(root)
    except ReleaseError as e:
        first = str(e).splitlines()[0]
        raise ConfigError(f"{first}; `apm-data validate {root}` lists them") from None


def subset(instances: list[Instance], limit: int | None) -> list[Instance]:
    """The first ``limit`` instances taken task by task in turn (so a small limit already covers every
    task), in their plan order; all of them when ``limit`` is None."""
    if limit is None or limit >= len(instances):
        return instances
    if limit < 1:
        raise ConfigError(f"dataset.limit={limit}: give at least 1 (or null for the whole shard)")
    queues: dict[str, deque[Instance]] = defaultdict(deque)
    for inst in instances:
        queues[inst.task].append(inst)
    chosen: set[str] = set()
    while len(chosen) < limit:
        for queue in queues.values():
            if queue and len(chosen) < limit:
                chosen.add(queue.popleft().key)
    return [i for i in instances if i.key in chosen]


def check_shard(index: int, count: int) -> None:
    """Refuse a shard that cannot exist, in the config's own terms."""
    if count < 1:
        raise ConfigError(f"shard.count={count}: give at least 1 (the number of shards the trajectories are "
                          "split into)")
    if not 0 <= index < count:
        raise ConfigError(f"shard.index={index}: give 0..{count - 1} for shard.count={count}")


def check_tasks(tasks: list[str] | None) -> None:
    """Refuse a ``dataset.tasks`` entry that names no task (it would select nothing), with the nearest name."""
    known = (*TASKS, EA)
    for task in tasks or ():
        if task not in known:
            near = difflib.get_close_matches(str(task).upper(), known, n=3)
            hint = f"did you mean {' or '.join(near)}?" if near else f"tasks are {', '.join(known)}"
            raise ConfigError(f"dataset.tasks: {task!r} is no task ({hint})")


def check_trajectories(wanted: Iterable[str], known: list[str]) -> None:
    """Refuse a ``dataset.trajectories`` entry that is no trajectory of the release, with the nearest ids."""
    unknown = sorted(set(wanted) - set(known))
    if unknown:
        near = difflib.get_close_matches(str(unknown[0]), known, n=3)
        hint = f"did you mean {' or '.join(near)}?" if near else f"its {len(known)} start {', '.join(known[:3])}"
        raise ConfigError(f"dataset.trajectories: {unknown[0]!r} is no trajectory of the release ({hint})")


SELECTION_KEYS = ("tasks", "include_ea", *sorted(SUBSET_KEYS))
"""``dataset`` keys that choose which of the release's instances a job runs, in the order lines name them."""


def selection_settings(cfg: DictConfig, keys: Iterable[str] = SELECTION_KEYS) -> list[str]:
    """The ``dataset`` settings among ``keys`` that choose part of the release (``dataset.tasks=[ER]``), as
    typed on a command line."""
    d = cfg.dataset
    chosen = {"tasks": d.tasks, "include_ea": None if d.include_ea else False, "trajectories": d.trajectories,
              "limit": d.limit}
    return [f"dataset.{k}={_typed(chosen[k])}" for k in keys if chosen[k] is not None]


def _typed(value: Any) -> str:
    if OmegaConf.is_list(value) or isinstance(value, list):
        return f"[{','.join(map(str, value))}]"
    return str(value).lower()


def shard_plan(cfg: DictConfig, release: Any) -> ShardPlan:
    """This shard's trajectories and instances, and the part ``dataset.limit`` / ``dataset.trajectories`` picks;
    a selection that picks no instance is refused (a run of nothing would succeed and score nothing)."""
    check_shard(cfg.shard.index, cfg.shard.count)
    check_tasks(cfg.dataset.tasks)
    trajectories = shard_trajectories(release.trajectories, cfg.shard.index, cfg.shard.count)
    if not trajectories:
        n = len(release.trajectories)
        raise ConfigError(f"shard.count={cfg.shard.count}: shard-{cfg.shard.index}-of-{cfg.shard.count} gets none of "
                          f"the release's {n} trajectories (a shard holds whole trajectories); give shard.count={n} "
                          "or fewer")
    chosen = {t.trajectory_id for t in trajectories}
    tasks = set(cfg.dataset.tasks) if cfg.dataset.tasks is not None else None
    everything = [
        i for i in release_instances(release)
        if (tasks is None or i.task in tasks) and (cfg.dataset.include_ea or i.task != "EA")
    ]
    instances = [i for i in everything if i.trajectory_id in chosen]
    wanted = set(cfg.dataset.trajectories) if cfg.dataset.trajectories is not None else chosen
    check_trajectories(wanted, [t.trajectory_id for t in release.trajectories])
    if wanted - chosen:
        raise ConfigError(f"dataset.trajectories: {', '.join(sorted(wanted - chosen))} not in this shard "
                          f"(shard-{cfg.shard.index}-of-{cfg.shard.count} has {', '.join(sorted(chosen))})")
    run_instances = subset([i for i in instances if i.trajectory_id in wanted], cfg.dataset.limit)
    if not run_instances:
        label = f"shard-{cfg.shard.index}-of-{cfg.shard.count}"
        why = " ".join(selection_settings(cfg)) or f"shard.count={cfg.shard.count}"
        raise ConfigError(f"{why} selects no instance of {label} ({len(trajectories)} of the release's "
                          f"{len(release.trajectories)} trajectories); nothing to run")
    running = {i.trajectory_id for i in run_instances}
    part = selection_settings(cfg, sorted(SUBSET_KEYS)) if len(run_instances) < len(instances) else []
    return ShardPlan(trajectories, instances, [t for t in trajectories if t.trajectory_id in running], run_instances,
                     len(everything), part)


def check_shards(cfg: DictConfig, release: Release, indices: Iterable[int]) -> None:
    """Refuse, as each job would (:func:`shard_plan`), a selection that one of the shards ``indices`` of
    ``cfg`` cannot run: ``apm-submit`` checks every job of a sweep so before any reaches the queue."""
    for index in indices:
        shard = cfg.copy()
        shard.shard.index = index
        shard_plan(shard, release)


def build_setup(cfg: DictConfig, hydra: DictConfig | None = None) -> tuple[RunSetup, ShardPlan]:
    """Check the config, load and validate the release, instantiate protocol and backbones, pick this
    shard's work; nothing is written and no engine is started. ``hydra``: how Hydra composed ``cfg``
    (its ``hydra`` node), which names the method (:func:`~apm.runner.config.method_identity`)."""
    check_config(cfg)
    release = load_checked_release(cfg.dataset.root)
    protocol = _instantiate(cfg.memory)
    backbone = as_backbone(_instantiate(cfg.backbone))
    writes = cfg.writer is not None and uses_writer(cfg)
    if cfg.writer is not None and not writes:
        print(f"apm-run: note: writer: {protocol.name} writes no text memory (its class does not declare "
              "needs_writer), so the writer is not started and is no part of the method", file=sys.stderr)
    writer = as_backbone(_instantiate(cfg.writer)) if writes else backbone
    run_dir = run_dir_of(cfg)
    shard_label = f"shard-{cfg.shard.index}-of-{cfg.shard.count}"
    code = code_parts(cfg)
    for engine in {id(backbone): backbone, id(writer): writer}.values():
        engine.log_into(str(RunDir(run_dir).job(shard_label)))  # a served engine logs into the run
    plan = shard_plan(cfg, release)
    setup = RunSetup(
        release=release,
        run_dir=run_dir,
        run_info={"dataset": cfg.dataset.name, "memory": protocol.name, "backbone": backbone.name,
                  "config_hash": config_hash(cfg), "release_fingerprint": release_fingerprint(cfg.dataset.root),
                  "code": code_identity(code), **method_identity(cfg, hydra),
                  **run_declarations(protocol, backbone, writer if writes else None)},
        protocol=protocol,
        backbone=backbone,
        writer=writer,
        cache=FrameCache(cfg.frames.cache_dir, cfg.frames.fps, cfg.frames.max_side, cfg.frames.jpeg_quality),
        max_frames=frame_budget(backbone, PAPER_MAX_FRAMES),
        layout=cfg.frames.layout,
        settings=GenerationSettings(cfg.generation.max_tokens, cfg.generation.temperature, cfg.generation.seed),
        concurrency=1 if cfg.latency_mode else cfg.concurrency,
        shard_label=shard_label,
        rerun=cfg.rerun,
        fail_fast=cfg.fail_fast,
        latency_mode=cfg.latency_mode,
        wait_for_lock=cfg.shard.wait_for_lock,
        identity={"code": code},
    )
    return setup, plan


async def run_async(cfg: DictConfig, strict: bool = False, hydra: DictConfig | None = None) -> RunStats:
    """One shard job: every check first (config, release, engines, the shard's largest request), so a
    job that cannot work stops before it writes anything; then the run, its ledger and W&B mirror.
    ``strict`` (``apm-run``): a job whose every instance failed raises ``RunStopped`` after it ends; a
    job that refused an instance for causality always does (``apm.runner.causality``). ``hydra``: how
    Hydra composed ``cfg`` (:func:`build_setup`); ``apm.run`` and ``apm-run`` pass it, so a method is
    one method whichever started it."""
    setup, plan = build_setup(cfg, hydra)
    setup = await with_models(setup)
    if cfg.rerun != Rerun.all:
        refuse_other_identity(setup, {i.key for i in plan.instances}, {t.trajectory_id for t in plan.trajectories})
    async with _started(setup.backbone), _started(setup.writer if setup.writer is not setup.backbone else None):
        await preflight(setup, plan.run_trajectories, plan.run_instances, check=cfg.preflight,
                        warm_up=cfg.latency_mode)
        stats = await _recorded_run(cfg, setup, plan)
    shown, memory = on_record(setup, plan)
    print(closing_line(setup, stats, plan, shown, memory))
    print(score_summary(shown, " ".join(plan.subset)))
    check_causal_run(stats.refused)
    if cfg.judge is not None:
        await judge_inline(cfg, setup, {i.key for i in plan.run_instances})
    if strict:
        check_answered(shown, memory, setup.backbone.answers_from_annotations)
    return stats


def on_record(setup: RunSetup, plan: ShardPlan) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What the job's selection has on record once it ends: the newest record of each of its instances,
    and the newest memory line of each session of its trajectories (what its summaries and exit count)."""
    run = RunDir(setup.run_dir)
    records = latest_records(run.records)
    trajectories = {t.trajectory_id for t in plan.run_trajectories}
    memory = [m for (t, _), m in sorted(newest_memory_lines(run.memory).items()) if t in trajectories]
    return [records[i.key] for i in plan.run_instances if i.key in records], memory


async def _recorded_run(cfg: DictConfig, setup: RunSetup, plan: ShardPlan) -> RunStats:
    """The run with what it leaves: config, manifest, plan and ledger events, records, the W&B run —
    all under the shard's lock, so a second job on the shard leaves no trace (docs/scale.md)."""
    with holding_shard(setup):
        return await _locked_run(cfg, setup, plan)


async def _locked_run(cfg: DictConfig, setup: RunSetup, plan: ShardPlan) -> RunStats:
    if plan.subset:  # loud, as lm-eval's --limit, once every check has passed
        print(f"apm-run: warning: {' '.join(plan.subset)}: this job runs {len(plan.run_instances)} of "
              f"{setup.shard_label}'s {len(plan.instances)} instances; its scores are not the benchmark's "
              "(apm-status shows the shard partial, apm-reduce marks the method partial)", file=sys.stderr)
    save_config(cfg, setup)
    job_manifest = RunDir(setup.run_dir).manifest(setup.shard_label)
    started = manifest.job_started(job_manifest, job_identity(cfg, setup, plan))
    ledger.job_started(setup.run_dir, setup.shard_label, plan.trajectories, plan.instances,
                       selected=len(plan.run_instances), population=plan.population, overrides=job_overrides())
    sink = _wandb_sink(cfg, setup)
    tally = _Tally(sink)
    progress = job_progress(len(plan.run_instances), f"{setup.run_info['memory']} · {setup.run_info['backbone']}",
                            lambda: tally.errors, cfg.logging.progress, cfg.logging.progress_every_s)
    stats, stopped = None, None
    try:
        stats = await OnlineRun(setup, on_record=tally, progress=progress).run(plan.run_trajectories,
                                                                              plan.run_instances)
        if cfg.latency.sample > 0 and not setup.latency_mode:
            await _time_sample(cfg, setup, plan, tally)
    except BaseException as e:  # this job's own exception, not one its caller is handling (sys.exc_info())
        stopped = e
        raise
    finally:
        progress.close()
        ledger.job_ended(setup.run_dir, setup.shard_label, stats, stopped)
        manifest.job_ended(job_manifest, started, stopped)
        if sink is not None:
            sink.close(_summary(stats))
    return stats


async def _time_sample(cfg: DictConfig, setup: RunSetup, plan: ShardPlan, tally: _Tally) -> None:
    """``latency.sample=N``: after the main run, this shard's share of N probes per task again in isolated
    mode (a warm-up, then one request at a time); their new records supersede the loaded ones."""
    chosen = latency.sampled(plan.run_instances, math.ceil(cfg.latency.sample / cfg.shard.count))
    timed = latency.isolated(setup)
    wanted = {i.trajectory_id for i in chosen}
    trajectories = [t for t in plan.run_trajectories if t.trajectory_id in wanted]
    await preflight(timed, trajectories, chosen, check=False, warm_up=True)
    await OnlineRun(timed, on_record=tally).run(trajectories, chosen)


class _Tally:
    """Hands each record on (to the W&B sink) and counts this job's failed instances (for its progress)."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.errors = 0

    def __call__(self, record: dict[str, Any]) -> None:
        self.errors += record["error"] is not None
        if self.sink is not None:
            self.sink(record)


def job_overrides() -> list[str] | None:
    """The overrides this job was started with (the user's ``hydra…`` ones, then the task's), which
    ``apm-submit`` takes to run it again; None outside a Hydra app."""
    if not HydraConfig.initialized():
        return None
    given = HydraConfig.get().overrides
    return redact_data([o for o in given.hydra if not o.startswith("hydra.mode=")] + list(given.task))


def job_identity(cfg: DictConfig, setup: RunSetup, plan: ShardPlan) -> dict[str, Any]:
    """What a job's manifest says it ran: its shard, the part of it (``subset``, [] for all), the config
    hash, the release, the code, the models and the prompts."""
    return {"shard": setup.shard_label, "subset": plan.subset, "config_hash": setup.run_info["config_hash"],
            "release_fingerprint": release_fingerprint(cfg.dataset.root), "code": setup.run_info["code"],
            "model": setup.run_info.get("model"), "prompt_version": PROMPT_VERSION}


async def judge_inline(cfg: DictConfig, setup: RunSetup, keys: set[str]) -> None:
    """``judge=<config>`` on ``apm-run``: the judge stage on this shard's instances once the run ends."""
    judge = _instantiate(cfg.judge)
    stage = JudgeStage(judge, concurrency=cfg.concurrency, only_keys=keys, file_suffix=f"-{setup.shard_label}",
                       fail_fast=cfg.fail_fast, preflight=cfg.preflight, progress=cfg.logging.progress)
    async with _started(judge):
        stats = await stage.run([setup.run_dir])
    print(f"apm-judge ({judge.name}): {stats.judged} judged, {stats.failed} failed, {stats.cached} already judged")


class _started:
    """``async with`` that starts and closes a backbone (or does nothing for ``None``)."""

    def __init__(self, backbone: Any):
        self.backbone = backbone

    async def __aenter__(self):
        if self.backbone is not None:
            await self.backbone.start()

    async def __aexit__(self, *exc):
        if self.backbone is not None:
            await self.backbone.close()


def _summary(stats: RunStats | None) -> dict[str, Any]:
    if stats is None:
        return {"status": "crashed"}
    return {"status": "finished", "instances": stats.total, "new": stats.new, "errors": stats.errors,
            "failed_updates": stats.failed_updates}


def _wandb_sink(cfg: DictConfig, setup: RunSetup):
    w = cfg.logging.wandb
    if w.mode == "disabled":
        return None
    info = setup.run_info
    resolved = cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True))
    return WandbSink(
        mode=w.mode, project=w.project, entity=w.get("entity"), group=w.group or release_group(info),
        name=f"{info['memory']} · {info['backbone']} · {setup.shard_label}",
        config=redact_data(run_config(info, resolved, setup.run_dir)), run_dir=setup.run_dir,
        chunk_rows=w.table_chunk_rows, run_id=f"{info['config_hash']}-{setup.shard_label}", flush_s=w.flush_s,
        verbose=w.verbose,
    )


def closing_line(setup: RunSetup, stats: RunStats, plan: ShardPlan, records: list[dict[str, Any]],
                 memory: list[dict[str, Any]]) -> str:
    """The job in one line: its instances (skipped, new, and those on record with an error: the score
    screen's errors), its memory updates and how many of the sessions' lines on record failed, its time."""
    import time

    took = time.perf_counter() - stats.started
    subset = " ".join(plan.subset)
    part = f" (a subset, {subset}: {len(plan.run_instances)} of the shard's {len(plan.instances)})" if subset else ""
    errored = sum(r.get("error") is not None for r in records)
    failed = sum(m.get("error") is not None for m in memory)
    updates = f" ({failed} of the {len(memory)} on record failed)" if failed else ""
    return (f"apm-run: {setup.run_dir} · {setup.shard_label}: {stats.total} instances{part} "
            f"({stats.skipped} already on record, {stats.new} new, {errored} with an error), "
            f"{stats.sessions_updated} memory updates{updates}, {took:.1f} s")


def request_listing(cfg: DictConfig) -> str:
    """``print_request=KEY``: that instance's request exactly as the run would send it (frames chosen for
    its context, the memory the run would show it: :mod:`apm.runner.listing`), without starting an engine
    or writing anything."""
    setup, plan = build_setup(cfg)
    inst = next((i for i in plan.instances if i.key == cfg.print_request), None)
    if inst is None:
        example = plan.instances[0].key if plan.instances else "trajectory/candidate/probe"
        raise ConfigError(f"print_request={cfg.print_request!r}: no such instance in {setup.shard_label} "
                          f"(keys are trajectory_id/candidate_id/probe_id, e.g. {example})")
    traj = next(t for t in plan.trajectories if t.trajectory_id == inst.trajectory_id)
    return listing.request_listing(setup, traj, inst)


def discard_fresh_job_folder(cfg: DictConfig) -> None:
    """Remove the job folder Hydra made, when it holds only Hydra's own files (the job wrote nothing:
    a failed check, ``print_request``), and the folders above it up to ``output_root`` left empty."""
    hydra_cfg = HydraConfig.get()
    folder = Path(hydra_cfg.runtime.output_dir)
    own = {hydra_cfg.output_subdir, f"{hydra_cfg.job.name}.log"}
    if not folder.is_dir() or any(p.name not in own for p in folder.iterdir()):
        return
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == folder:
            handler.close()
    shutil.rmtree(folder)
    root = Path(cfg.output_root).resolve()
    for parent in folder.resolve().parents:
        if not (parent == root or root in parent.parents) or any(parent.iterdir()):
            break
        parent.rmdir()

