"""Structured-config schema of ``apm-run`` (Hydra ConfigStore), so a typo or a wrong type fails at
compose time; the argument check of the config groups (``memory``, ``backbone``…) that the schema
cannot type; and the config hash that names a run."""

from __future__ import annotations

import collections.abc
import difflib
import hashlib
import inspect
import json
import types
import typing
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, cast

from hydra import compose
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from omegaconf import MISSING, DictConfig, OmegaConf

from apm.data.fingerprint import release_fingerprint
from apm.records.rundir import slug
from apm.runner.code import target_module


@dataclass
class ShardConfig:
    index: int = 0
    count: int = 1
    wait_for_lock: bool = False
    """A second job on a shard waits for the first instead of stopping at once (docs/scale.md)."""


class FrameLayout(str, Enum):
    """How a request's frames are chosen and sent (``frames.layout``; docs/prompts.md, "Frame layouts")."""

    uniform = "uniform"
    """The paper's: everything visible sampled uniformly to the budget, sent as one video."""
    session_stable = "session_stable"
    """Earlier sessions' frames fixed per session (one video), the current prefix append-only (stills)."""


class Rerun(str, Enum):
    """What ``rerun=`` runs again of what is on record (docs/records.md, "Crash safety and reruns")."""

    errors = "errors"
    """Instances and memory updates whose newest line has an ``error``."""
    all = "all"
    """Those, and every instance and memory update whose newest line other code made (a code change:
    all of them; run again, what this code has made already is kept)."""


@dataclass
class FramesConfig:
    fps: float = 1.0
    max_side: int = 448
    jpeg_quality: int = 85
    cache_dir: str | None = None
    """Shared frame cache folder; default ``$APM_CACHE_DIR`` or ``~/.cache/apm/frames``."""
    layout: FrameLayout = FrameLayout.uniform
    """``uniform`` (the paper's; published comparisons use it) or ``session_stable`` (engine prefix
    caches hit across a session's probes); docs/prompts.md, "Frame layouts"."""


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
    """None: the release, ``<dataset>-<fingerprint[:8]>``, the group ``apm-publish`` gives the method too."""
    table_chunk_rows: int = 5000
    flush_s: float = 30.0
    """The live mirror logs a history step at least this often (as rows arrive), besides every
    ``table_chunk_rows`` rows."""
    verbose: bool = False
    """True: wandb's own ``wandb:`` lines on the terminal and in the job's log (silent otherwise)."""


@dataclass
class LoggingConfig:
    progress: bool = True
    progress_every_s: float = 30.0
    """When stderr is not a terminal (a SLURM log), a plain progress line this often instead of a bar."""
    wandb: WandbConfig = field(default_factory=WandbConfig)


@dataclass
class DatasetConfig:
    name: str = MISSING
    root: str = MISSING
    include_ea: bool = True
    """Run the Evidence Availability-Aware candidates too (they are their own task, ``EA``)."""
    tasks: list[str] | None = None
    """Restrict to these tasks (``None``: all); part of the run's identity."""
    limit: int | None = None
    """Run only this many of the shard's instances (taken task by task in turn): a try before the sweep
    whose records are the full run's, in its run dir (not part of the config hash)."""
    trajectories: list[str] | None = None
    """Run only these trajectories of the shard: like ``limit``, outside the config hash."""


@dataclass
class LatencyConfig:
    sample: int = 0
    """After the main run, time this many probes per task again in isolated mode (one request at a time,
    after one warm-up), so the method has the paper's latency; a sharded run splits it over its shards
    (``ceil(sample / shard.count)`` per task each). 0: none. Not part of the config hash."""


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
    rerun: Rerun | None = None
    """``errors``: run again what failed; ``all``: that and every instance and memory update made by
    other code (which is refused otherwise); ``None``: skip what is on record."""
    rerun_errors: Any = None
    """Replaced by ``rerun``; set, the job stops with one line saying so."""
    preflight: bool = True
    """Before the first instance: check each served engine's endpoint, key and model name, and send the
    shard's largest request with ``max_tokens=1``; a failure stops the job with one line."""
    fail_fast: int = 3
    """Stop after this many consecutive authentication, not-found or connection failures (0: never)."""
    latency_mode: bool = False
    """Isolated latency: one request at a time (``concurrency`` 1), after one warm-up request that is not
    recorded; records say ``latency.mode: isolated``. Not part of the config hash."""
    latency: LatencyConfig = field(default_factory=LatencyConfig)
    print_request: str | None = None
    """An instance key: print that instance's request as the run would send it, and stop (no model is called)."""
    output_root: str = "runs"
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    experiment: Any = None


def register() -> None:
    ConfigStore.instance().store(name="apm_schema", node=RunConfig)


IDENTITY_KEYS = ("dataset", "memory", "backbone", "writer", "frames", "generation")
"""What makes two runs the same run: not the shard, concurrency, latency mode, logging or output folder."""
SUBSET_KEYS = frozenset({"limit", "trajectories"})
"""``dataset`` keys that pick part of a shard to run: left out of the hash, so a try counts toward the run."""

OPERATIONAL_KEYS = frozenset({
    "concurrency", "max_attempts", "backoff_initial_s", "backoff_max_s", "connect_timeout_s",
    "read_timeout_s", "attempt_timeout_s", "deadline_s", "base_url", "launch", "python", "command",
    "host", "port", "env", "log_dir", "startup_timeout_s", "stop_timeout_s", "api_key_env",
    "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "enable_prompt_tokens_details",
    "mm_processor_cache_gb", "media_uuids", "data_parallel_size",
})
"""Backbone settings that change how requests travel, not what a model is asked or answers: left out
of the hash, so lowering concurrency or moving the server after a crash resumes the same run."""


GROUPS = {"dataset": "dataset", "memory": "memory", "backbone": "backbone", "writer": "backbone@writer",
          "judge": "judge"}
"""The config groups that name a run's method: the key each fills, and Hydra's name for its choice."""
VARIANT_KEYS = ("memory", "backbone", "writer")
"""Keys whose settings off their group's defaults make a method's variant (``memory.recent_frames=8``)."""
SETTING_KEYS = ("frames", "generation")
"""Run settings that change what the model is shown or how it answers: off the defaults, they are in
the method's label too (``frames.layout=session_stable``); ``frames.cache_dir`` is no setting."""


def uses_writer(cfg: DictConfig) -> bool:
    """Whether the run's method writes with the ``writer``: what its class declares (``needs_writer`` of
    :class:`~apm.memory.base.MemoryProtocol` and :class:`~apm.streaming.base.StreamingSystem`); a class
    that declares nothing, or a target that does not import (refused by :func:`check_arguments`), is
    taken to use it."""
    memory = _plain(cfg.get("memory"))
    target = memory.get("_target_") if isinstance(memory, dict) else None
    try:
        return bool(getattr(_locate(target), "needs_writer", True)) if isinstance(target, str) else True
    except (ImportError, AttributeError):
        return True


def used_keys(cfg: DictConfig) -> tuple[str, ...]:
    """The :data:`IDENTITY_KEYS` the run's method uses: all but ``writer`` for a method that writes no
    text memory (:func:`uses_writer`), so a writer swept over every method names only those that write."""
    return tuple(k for k in IDENTITY_KEYS if k != "writer" or uses_writer(cfg))


def config_hash(cfg: DictConfig) -> str:
    """Hash of the identity part of the resolved config: the release by its content fingerprint (not
    the path typed to reach it), ``frames.cache_dir``, the default ``frames.layout``, engines'
    transport settings and a writer the method does not use (:func:`used_keys`) excluded."""
    used = used_keys(cfg)
    ident: dict[str, Any] = {k: _identity(k, _plain(cfg.get(k))) if k in used else None for k in IDENTITY_KEYS}
    ident["frames"] = {k: v for k, v in (ident["frames"] or {}).items()
                       if (k, v) != ("layout", FrameLayout.uniform)}  # hashes from before layouts
    dataset = ident["dataset"]
    release = release_fingerprint(dataset["root"])
    ident["dataset"] = {k: v for k, v in dataset.items() if k != "root" and k not in SUBSET_KEYS} | {"release": release}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]


def method_identity(cfg: DictConfig, hydra: DictConfig | None) -> dict[str, Any]:
    """``choices`` (each group's option name) and ``overrides`` (``{"memory.recent_frames": 8}``: the
    memory, backbone and writer settings that differ from their chosen option's YAML, transport
    settings excluded), so a method is named by its config; a writer it does not use (:func:`used_keys`)
    is in neither. ``hydra``: Hydra's own node of the composed config (the app's ``HydraConfig``, or
    ``compose(..., return_hydra_config=True).hydra``), read with Hydra initialized; None (a config not
    composed by Hydra): both unknown (None)."""
    if hydra is None or not GlobalHydra.instance().is_initialized():
        return {"choices": dict.fromkeys(GROUPS), "overrides": None}
    unused = set(IDENTITY_KEYS) - set(used_keys(cfg))
    choices = {key: None if key in unused else hydra.runtime.choices.get(group) for key, group in GROUPS.items()}
    variants = tuple(k for k in VARIANT_KEYS if k not in unused)
    defaults = compose(hydra.job.config_name, overrides=_group_picks(choices, list(hydra.searchpath)))
    required = {p for key in variants for p in _missing(defaults.get(key), key)}
    for path in required:  # a mandatory value (``???``) has no default: the run's value is a setting of its own
        OmegaConf.update(defaults, path, OmegaConf.select(cfg, path), force_add=True)
    overrides: dict[str, Any] = {}
    for key in variants + SETTING_KEYS:
        mine = _flat(key, _identity(key, _plain(cfg.get(key))))
        base = _flat(key, _identity(key, _plain(defaults.get(key)) if choices.get(key, key) else None))
        overrides |= {k: v for k, v in mine.items() if k not in base or base[k] != v or k in required}
        overrides |= {k: None for k in base if k not in mine}
    return {"choices": choices, "overrides": overrides}


def _missing(node: Any, prefix: str) -> list[str]:
    """Dotted paths of the mandatory (``???``) values in a config node, read without resolving anything."""
    if not isinstance(node, DictConfig):
        return []
    paths = []
    for key in cast("collections.abc.Iterable[str]", node.keys()):  # OmegaConf types keys loosely; ours are str
        if OmegaConf.is_missing(node, key):
            paths.append(f"{prefix}.{key}")
        elif not OmegaConf.is_interpolation(node, key):
            paths += _missing(node[key], f"{prefix}.{key}")
    return paths


def _group_picks(choices: dict[str, str | None], searchpath: list[str]) -> list[str]:
    """Overrides composing only the chosen options of the variant groups, from the run's search path."""
    picks = [f"{'+' if key == 'writer' else ''}{GROUPS[key]}={choices[key]}" for key in VARIANT_KEYS if choices[key]]
    return picks + ([f"hydra.searchpath=[{','.join(json.dumps(p) for p in searchpath)}]"] if searchpath else [])


def _identity(key: str, node: Any) -> Any:
    """The part of a config key that names the run: an engine (backbone, writer) without its transport
    settings (:data:`OPERATIONAL_KEYS`); any other key whole."""
    if key in ("backbone", "writer") and isinstance(node, dict):
        return {k: v for k, v in node.items() if k not in OPERATIONAL_KEYS}
    if key == "frames" and isinstance(node, dict):
        return {k: v for k, v in node.items() if k != "cache_dir"}
    return node


def _flat(prefix: str, node: Any) -> dict[str, Any]:
    """A nested config as ``{dotted key: value}``; lists and empty mappings are values."""
    if not isinstance(node, dict) or not node:
        return {prefix: node}
    return {k: v for name, child in node.items() for k, v in _flat(f"{prefix}.{name}", child).items()}


def _plain(node: Any) -> Any:
    """A config node as plain data, interpolations resolved (only this node: never ``hydra``)."""
    return OmegaConf.to_container(node, resolve=True, enum_to_str=True) if isinstance(node, DictConfig) else node


class ConfigError(ValueError):
    """A config value that cannot work; the message is one line naming the key and what it needs."""


def check_arguments(node: Any, where: str) -> None:
    """Check a ``_target_`` node (and those nested in it) against its callable's signature: every key a
    parameter, every value of the annotated type, so ``memory.keep_sessions=abc`` stops the job before
    anything is written; annotations this check cannot read are taken on trust."""
    node = _plain(node)
    if not isinstance(node, dict) or "_target_" not in node:
        return
    target = node["_target_"]
    try:
        params, hints, open_ended = _parameters(_locate(target))
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"{where}._target_={target!r} cannot be imported: {type(e).__name__}: {e}") from None
    for key, value in node.items():
        if key.startswith("_"):
            continue
        if key not in params and not open_ended:
            near = difflib.get_close_matches(key, params, n=1)
            hint = f"did you mean {near[0]}?" if near else f"it takes {', '.join(params)}"
            raise ConfigError(f"{where}.{key}: {target} takes no such argument ({hint})")
        wanted = hints.get(key)
        if wanted is not None and not _fits(value, wanted):
            raise ConfigError(f"{where}.{key}={value!r}: expected {_type_name(wanted)}, got {type(value).__name__}")
        check_arguments(value, f"{where}.{key}")


def _locate(path: str) -> Any:
    """The object a dotted ``_target_`` names: the longest importable module prefix, then attributes."""
    found = target_module(path)
    for name in path.removeprefix(f"{found.__name__}.").split("."):
        found = getattr(found, name)
    return found


def _parameters(target: Any) -> tuple[dict[str, inspect.Parameter], dict[str, Any], bool]:
    """A callable's named parameters, their resolvable annotations, and whether it takes any other
    keyword; for a class, each ``__init__`` along its bases that the one before passes ``**kwargs`` to."""
    functions = [c.__dict__["__init__"] for c in target.__mro__[:-1] if "__init__" in c.__dict__] \
        if inspect.isclass(target) else [target]
    params: dict[str, inspect.Parameter] = {}
    hints: dict[str, Any] = {}
    for function in functions:
        try:
            signature = inspect.signature(function).parameters
        except (TypeError, ValueError):
            return params, hints, True
        try:
            hints = typing.get_type_hints(function) | hints
        except Exception:  # noqa: BLE001 — a forward reference that does not resolve: no type check
            pass
        params = {n: p for n, p in signature.items() if n != "self" and p.kind in _NAMED} | params
        if not any(p.kind is p.VAR_KEYWORD for p in signature.values()):
            return params, hints, False
    return params, hints, True


_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def _fits(value: Any, wanted: Any) -> bool:
    """Whether a plain config value can be passed where ``wanted`` is annotated."""
    origin, args = typing.get_origin(wanted), typing.get_args(wanted)
    if wanted is Any or isinstance(wanted, typing.TypeVar):
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arm) for arm in args)
    if wanted is type(None) or wanted is None:
        return value is None
    if origin is typing.Literal:
        return value in args
    if wanted is bool:
        return isinstance(value, bool)
    if wanted is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if wanted is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if wanted is str:
        return isinstance(value, str)
    if origin in (list, tuple, collections.abc.Sequence) or wanted in (list, tuple):
        items = [a for a in args if a is not Ellipsis]
        return isinstance(value, list | tuple) and all(_fits(v, items[0]) for v in value if len(items) == 1)
    if origin in (dict, collections.abc.Mapping) or wanted is dict:
        return isinstance(value, dict)
    return True


def _type_name(wanted: Any) -> str:
    if typing.get_origin(wanted) is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(wanted))
    return getattr(wanted, "__name__", None) or str(wanted).replace("typing.", "")


def run_name(cfg: DictConfig, memory_name: str, backbone_name: str) -> str:
    """``<dataset>/<memory>/<backbone>-<hash>``: stable across reruns, resumes and shard counts."""
    return f"{slug(cfg.dataset.name)}/{slug(memory_name)}/{slug(backbone_name)}-{config_hash(cfg)}"
