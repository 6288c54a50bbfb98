"""``apm-run``: the Hydra app. Compose, validate the release, then run the online protocol.

The run directory is ``<output_root>/<dataset>/<memory>/<backbone>-<config hash>``: the same for a
rerun, a resume, a requeued job and every shard, so records accumulate in one place and what is on
record is skipped. Each shard job writes ``records/shard-<i>-of-<n>.jsonl`` there.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from apm.backbones.base import GenerationSettings
from apm.data.fingerprint import release_fingerprint
from apm.data.instances import release_instances
from apm.data.problems import ReleaseError
from apm.data.release import load_release
from apm.prompts import PROMPT_VERSION
from apm.runner import ledger, manifest
from apm.runner.config import config_hash, method_identity, register, run_name, slug
from apm.runner.online import OnlineRun, RunSetup, RunStats, frame_budget
from apm.runner.shards import shard_trajectories
from apm.video.cache import FrameCache

log = logging.getLogger("apm.run")
CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")


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


def save_config(cfg: DictConfig, run_dir: Path) -> None:
    """The resolved config, its hash and the release fingerprint, next to the records; the release
    root is made absolute, so ``apm-judge`` finds the release from any working directory."""
    run_dir.mkdir(parents=True, exist_ok=True)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    resolved["dataset"]["root"] = str(Path(cfg.dataset.root).expanduser().resolve())
    saved = {"config_hash": config_hash(cfg), "release_fingerprint": release_fingerprint(cfg.dataset.root),
             "config": resolved}
    manifest.write_json_atomic(run_dir / "config.json", saved)


def build_setup(cfg: DictConfig) -> tuple[RunSetup, list, list]:
    """Load and validate the release, instantiate protocol and backbones, pick this shard's work."""
    release = load_release(cfg.dataset.root)
    protocol = _instantiate(cfg.memory)
    backbone = _instantiate(cfg.backbone)
    writer = _instantiate(cfg.writer) or backbone
    run_dir = run_dir_of(cfg)
    shard_label = f"shard-{cfg.shard.index}-of-{cfg.shard.count}"
    for engine in {id(backbone): backbone, id(writer): writer}.values():
        if hasattr(engine, "log_dir") and engine.log_dir is None:  # a served engine logs into the run
            engine.log_dir = str(run_dir / "jobs" / shard_label)
    trajectories = shard_trajectories(release.trajectories, cfg.shard.index, cfg.shard.count)
    chosen = {t.trajectory_id for t in trajectories}
    tasks = set(cfg.dataset.tasks) if cfg.dataset.tasks else None
    instances = [
        i for i in release_instances(release)
        if i.trajectory_id in chosen and (tasks is None or i.task in tasks)
        and (cfg.dataset.include_ea or i.task != "EA")
    ]
    setup = RunSetup(
        release=release,
        run_dir=run_dir,
        run_info={"dataset": cfg.dataset.name, "memory": protocol.name, "backbone": backbone.name,
                  "config_hash": config_hash(cfg), **method_identity(cfg),
                  "capabilities": {"streaming": protocol.streaming, "persistent": protocol.persistent}},
        protocol=protocol,
        backbone=backbone,
        writer=writer,
        cache=FrameCache(cfg.frames.cache_dir, cfg.frames.fps, cfg.frames.max_side, cfg.frames.jpeg_quality),
        max_frames=frame_budget(backbone, PAPER_MAX_FRAMES),
        settings=GenerationSettings(cfg.generation.max_tokens, cfg.generation.temperature, cfg.generation.seed),
        concurrency=cfg.concurrency,
        shard_label=shard_label,
        rerun_errors=cfg.rerun_errors,
    )
    return setup, trajectories, instances


async def run_async(cfg: DictConfig) -> RunStats:
    setup, trajectories, instances = build_setup(cfg)
    save_config(cfg, setup.run_dir)
    job_dir = ledger.shard_dir(setup.run_dir, setup.shard_label)
    started = manifest.job_started(job_dir, job_identity(cfg, setup))
    ledger.job_started(setup.run_dir, setup.shard_label, trajectories, instances)
    sink = _wandb_sink(cfg, setup)
    progress = tqdm(total=len(instances), desc=f"{setup.run_info['memory']} · {setup.run_info['backbone']}",
                    unit="inst", disable=not cfg.logging.progress, dynamic_ncols=True)
    stats = None
    try:
        async with _started(setup.backbone), _started(setup.writer if setup.writer is not setup.backbone else None):
            stats = await OnlineRun(setup, on_record=sink, progress=progress).run(trajectories, instances)
    finally:
        progress.close()
        ledger.job_ended(setup.run_dir, setup.shard_label, stats, sys.exc_info()[1])
        manifest.job_ended(job_dir, started, sys.exc_info()[1])
        if sink is not None:
            sink.close(_summary(stats))
    print(closing_line(setup, stats))
    if cfg.judge is not None:
        await judge_inline(cfg, setup, {i.key for i in instances})
    return stats


def job_identity(cfg: DictConfig, setup: RunSetup) -> dict[str, Any]:
    """What a job's manifest says it ran: its shard, the config hash, the release and the prompts."""
    return {"shard": setup.shard_label, "config_hash": setup.run_info["config_hash"],
            "release_fingerprint": release_fingerprint(cfg.dataset.root), "prompt_version": PROMPT_VERSION}


async def judge_inline(cfg: DictConfig, setup: RunSetup, keys: set[str]) -> None:
    """``judge=<config>`` on ``apm-run``: the judge stage on this shard's instances once the run ends."""
    from apm.judge.stage import JudgeStage

    judge = _instantiate(cfg.judge)
    stage = JudgeStage(judge, concurrency=cfg.concurrency, only_keys=keys, file_suffix=f"-{setup.shard_label}")
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
    return {"status": "finished", "instances": stats.total, "new": stats.new, "errors": stats.errors}


def _wandb_sink(cfg: DictConfig, setup: RunSetup):
    w = cfg.logging.wandb
    if w.mode == "disabled":
        return None
    from apm.logging.wandb_sink import WandbSink

    info = setup.run_info
    return WandbSink(
        mode=w.mode, project=w.project, entity=w.get("entity"), group=w.group or slug(cfg.dataset.name),
        name=f"{info['memory']} · {info['backbone']} · {setup.shard_label}",
        config=OmegaConf.to_container(cfg, resolve=True), run_dir=setup.run_dir,
        chunk_rows=w.table_chunk_rows, run_id=f"{info['config_hash']}-{setup.shard_label}",
    )


def closing_line(setup: RunSetup, stats: RunStats) -> str:
    import time

    took = time.perf_counter() - stats.started
    return (f"apm-run: {setup.run_dir} · {setup.shard_label}: {stats.total} instances "
            f"({stats.skipped} already on record, {stats.new} new, {stats.errors} errors), "
            f"{stats.sessions_updated} memory updates, {took:.1f} s")


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        asyncio.run(run_async(cfg))
    except ReleaseError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
