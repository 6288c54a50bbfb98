"""A method's one W&B identity, written alike by the live mirror (``apm/live/wandb_sink.py``) and by
``apm-publish``: its group — the release it ran on — and its flat config keys, both from the record's
``run`` block, and the quiet settings both start W&B with (docs/publish.md, "One group, one config")."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

NOT_THE_METHOD = ("shard", "logging")
"""Parts of the resolved config that describe the job, not the method."""


def release_group(run: Mapping[str, Any]) -> str:
    """The W&B group: the release the method ran on, ``<dataset>-<first 8 hex of its fingerprint>`` —
    every method scored on one release is one comparison (Tables 3 and 4)."""
    return f"{run['dataset']}-{str(run.get('release_fingerprint') or 'unknown')[:8]}"


def run_config(run: Mapping[str, Any], resolved: Mapping[str, Any], run_dir: Path | str) -> dict[str, Any]:
    """The config keys a ``run`` block gives, flat so the runs table groups and filters by each axis: the
    config-group choices (display names for runs that predate them), the names, the capabilities, the
    release, the run dir, each differing setting as its own key (``memory.recent_frames``), and the
    resolved config (but :data:`NOT_THE_METHOD`) nested under ``resolved``."""
    choices, capabilities = run.get("choices") or {}, run.get("capabilities") or {}
    return {
        "config_hash": run["config_hash"],
        **{axis: choices.get(axis) or run.get(axis) for axis in ("dataset", "memory", "backbone")},
        "writer": choices.get("writer"),
        "judge": choices.get("judge"),
        **{f"{axis}_name": run.get(axis) for axis in ("dataset", "memory", "backbone")},
        "streaming": capabilities.get("streaming"),
        "persistent": capabilities.get("persistent"),
        "release_fingerprint": run.get("release_fingerprint"),
        "run_dir": str(run_dir),
        **(run.get("overrides") or {}),
        "resolved": {k: v for k, v in resolved.items() if k not in NOT_THE_METHOD},
    }


def quiet(wandb: Any, verbose: bool, **settings: Any) -> Any:
    """``wandb.Settings`` that keep wandb's own ``wandb:`` lines off the terminal and out of a job's log
    (``silent``) unless ``verbose``."""
    return wandb.Settings(**settings, **({} if verbose else {"silent": True}))
