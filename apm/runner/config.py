"""Structured-config schema of ``apm-run`` (Hydra ConfigStore), so a typo or a wrong type fails at
compose time, and the config hash that names a run."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from hydra import compose
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import MISSING, DictConfig, OmegaConf

from apm.data.fingerprint import release_fingerprint


@dataclass
class ShardConfig:
    index: int = 0
    count: int = 1


@dataclass
class FramesConfig:
    fps: float = 1.0
    max_side: int = 448
    jpeg_quality: int = 85
    cache_dir: str | None = None
    """Shared frame cache folder; default ``$APM_CACHE_DIR`` or ``~/.cache/apm/frames``."""


@dataclass
class GenerationConfig:
    max_tokens: int = 512
    temperature: float = 0.0
    seed: int = 0


@dataclass
class WandbConfig:
    mode: str = "offline"
    """``offline`` (default; ``wandb sync`` later), ``online`` or ``disabled``."""
    project: str = "apm-bench"
    entity: str | None = None
    group: str | None = None
    table_chunk_rows: int = 5000


@dataclass
class LoggingConfig:
    progress: bool = True
    wandb: WandbConfig = field(default_factory=WandbConfig)


@dataclass
class DatasetConfig:
    name: str = MISSING
    root: str = MISSING
    include_ea: bool = True
    """Run the Evidence Availability-Aware candidates too (they are their own task, ``EA``)."""
    tasks: list[str] | None = None
    """Restrict to these tasks (``None``: all)."""


@dataclass
class RunConfig:
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    memory: Any = MISSING
    backbone: Any = MISSING
    writer: Any = None
    """Backbone that writes text memories (E.5); ``None``: the run's backbone."""
    judge: Any = None
    shard: ShardConfig = field(default_factory=ShardConfig)
    frames: FramesConfig = field(default_factory=FramesConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    concurrency: int = 8
    rerun_errors: bool = False
    output_root: str = "runs"
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    experiment: Any = None


def register() -> None:
    ConfigStore.instance().store(name="apm_schema", node=RunConfig)


IDENTITY_KEYS = ("dataset", "memory", "backbone", "writer", "frames", "generation")
"""What makes two runs the same run: not the shard, concurrency, logging or output folder."""

OPERATIONAL_KEYS = frozenset({
    "concurrency", "max_attempts", "backoff_initial_s", "backoff_max_s", "connect_timeout_s",
    "read_timeout_s", "attempt_timeout_s", "deadline_s", "base_url", "launch", "python", "command",
    "host", "port", "env", "log_dir", "startup_timeout_s", "stop_timeout_s", "api_key_env",
    "max_num_seqs", "gpu_memory_utilization",
})
"""Backbone settings that change how requests travel, not what a model is asked or answers: left out
of the hash, so lowering concurrency or moving the server after a crash resumes the same run."""


GROUPS = {"dataset": "dataset", "memory": "memory", "backbone": "backbone", "writer": "backbone@writer",
          "judge": "judge"}
"""The config groups that name a run's method: the key each fills, and Hydra's name for its choice."""
VARIANT_KEYS = ("memory", "backbone", "writer")
"""Keys whose settings off their group's defaults make a method's variant (``memory.recent_frames=8``)."""


def config_hash(cfg: DictConfig) -> str:
    """Hash of the identity part of the resolved config: the release by its content fingerprint (not
    the path typed to reach it), ``frames.cache_dir`` and engines' transport settings excluded."""
    ident = {k: _identity(k, _plain(cfg.get(k))) for k in IDENTITY_KEYS}
    ident["frames"] = {k: v for k, v in (ident["frames"] or {}).items() if k != "cache_dir"}
    dataset = ident["dataset"]
    release = release_fingerprint(dataset["root"])
    ident["dataset"] = {k: v for k, v in dataset.items() if k != "root"} | {"release": release}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]


def method_identity(cfg: DictConfig) -> dict[str, Any]:
    """``choices`` (each group's option name) and ``overrides`` (``{"memory.recent_frames": 8}``: the
    memory, backbone and writer settings that differ from their chosen option's YAML, transport
    settings excluded), so a method is named by its config; both unknown (None) outside a Hydra app."""
    if not (HydraConfig.initialized() and GlobalHydra.instance().is_initialized()):
        return {"choices": dict.fromkeys(GROUPS), "overrides": None}
    hydra = HydraConfig.get()
    choices = {key: hydra.runtime.choices.get(group) for key, group in GROUPS.items()}
    defaults = compose(hydra.job.config_name, overrides=_group_picks(choices, list(hydra.searchpath)))
    overrides: dict[str, Any] = {}
    for key in VARIANT_KEYS:
        mine = _flat(key, _identity(key, _plain(cfg.get(key))))
        base = _flat(key, _identity(key, _plain(defaults.get(key)) if choices[key] else None))
        overrides |= {k: v for k, v in mine.items() if k not in base or base[k] != v}
        overrides |= {k: None for k in base if k not in mine}
    return {"choices": choices, "overrides": overrides}


def _group_picks(choices: dict[str, str | None], searchpath: list[str]) -> list[str]:
    """Overrides composing only the chosen options of the variant groups, from the run's search path."""
    picks = [f"{'+' if key == 'writer' else ''}{GROUPS[key]}={choices[key]}" for key in VARIANT_KEYS if choices[key]]
    return picks + ([f"hydra.searchpath=[{','.join(json.dumps(p) for p in searchpath)}]"] if searchpath else [])


def _identity(key: str, node: Any) -> Any:
    """The part of a config key that names the run: an engine (backbone, writer) without its transport
    settings (:data:`OPERATIONAL_KEYS`); any other key whole."""
    if key in ("backbone", "writer") and isinstance(node, dict):
        return {k: v for k, v in node.items() if k not in OPERATIONAL_KEYS}
    return node


def _flat(prefix: str, node: Any) -> dict[str, Any]:
    """A nested config as ``{dotted key: value}``; lists and empty mappings are values."""
    if not isinstance(node, dict) or not node:
        return {prefix: node}
    return {k: v for name, child in node.items() for k, v in _flat(f"{prefix}.{name}", child).items()}


def _plain(node: Any) -> Any:
    """A config node as plain data, interpolations resolved (only this node: never ``hydra``)."""
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


def slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text).strip("-").lower()


def run_name(cfg: DictConfig, memory_name: str, backbone_name: str) -> str:
    """``<dataset>/<memory>/<backbone>-<hash>``: stable across reruns, resumes and shard counts."""
    return f"{slug(cfg.dataset.name)}/{slug(memory_name)}/{slug(backbone_name)}-{config_hash(cfg)}"
