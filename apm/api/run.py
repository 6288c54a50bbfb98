"""``apm.run``: one shard job of the online protocol from Hydra overrides, exactly as ``apm-run`` runs
it (``apm-run`` is this function under a Hydra app), so the same config started either way is one
method: one run dir, one config hash, one set of config-group choices and settings."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, open_dict

from apm.api.loop import blocking
from apm.configs import CONF_DIR
from apm.records.atomic import read_run_config
from apm.records.redact import redact_logging
from apm.runner.app import run_async, run_dir_of
from apm.runner.config import register


@dataclass(frozen=True)
class Composed:
    """A run's config as ``apm-run`` composes it: ``cfg``, what the job reads (Hydra's own node taken out,
    as a Hydra app's task sees it; change it before running if you like), and ``hydra``, how it was
    composed (each config group's chosen option), which names the method."""

    cfg: DictConfig
    hydra: DictConfig


@dataclass(frozen=True)
class RunResult:
    """What one job did: its run dir and shard, the method's config hash, and its instances (``skipped``:
    already on record; ``new``: answered now, ``errors`` of them with an error on record)."""

    run_dir: Path
    shard: str
    config_hash: str
    instances: int
    skipped: int
    new: int
    errors: int
    memory_updates: int


def compose(overrides: Sequence[str] = ()) -> Composed:
    """The config ``apm-run OVERRIDES…`` runs (``["memory=none", "dataset.root=…"]``), composed once by
    Hydra's compose API from the package's configs; a typo raises Hydra's error."""
    register()
    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        full = hydra_compose("config", overrides=list(overrides), return_hydra_config=True)
    hydra = full.hydra
    with open_dict(full):
        del full["hydra"]
    return Composed(full, hydra)


def run(config: Composed | Sequence[str] = (), *, strict: bool = True) -> RunResult:
    """Run one shard job of ``config`` (overrides, or what :func:`compose` returned) and return what it
    did; a config, release or engine problem raises before anything is written. ``strict`` (``apm-run``'s
    behaviour): a job whose every instance failed raises ``RunStopped`` once it ends."""
    composed = config if isinstance(config, Composed) else compose(config)
    redact_logging()
    with _hydra_initialized():  # the method's choices are compared with their options' defaults
        stats = blocking(run_async(composed.cfg, strict=strict, hydra=composed.hydra))
    run_dir = run_dir_of(composed.cfg)
    shard = composed.cfg.shard
    return RunResult(
        run_dir,
        f"shard-{shard.index}-of-{shard.count}",
        read_run_config(run_dir)["config_hash"],
        stats.total,
        stats.skipped,
        stats.new,
        stats.errors,
        stats.sessions_updated,
    )


@contextmanager
def _hydra_initialized() -> Iterator[None]:
    """Hydra initialized on the package's configs for the block, unless it already is (inside ``apm-run``)."""
    ready = GlobalHydra.instance().is_initialized()
    with nullcontext() if ready else initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        yield
