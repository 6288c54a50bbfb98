"""A run's identity (docs/records.md, "Identity"): the code (``apm.runner.code``) and the models that
answer, named before any engine starts; a shard whose lines on disk name another identity is not resumed."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from apm.records.identity import differing, short_digest
from apm.records.jsonl import latest_records
from apm.records.rundir import RunDir
from apm.runner.code import what_changed
from apm.runner.config import ConfigError
from apm.runner.online import newest_memory_lines
from apm.runner.setup import RunSetup

MADE_BY = {"code": ("other code", "new code"), "model": ("another model", "another model")}
"""How a refusal names lines of another identity part, and the change that made it."""


async def with_models(setup: RunSetup) -> RunSetup:
    """``setup`` with its models named (``run.model``, and ``identity["model"]``): each engine's
    :meth:`~apm.backbones.base.Backbone.model_identity`, the writer's when it is not the backbone."""
    engines = {"backbone": setup.backbone} | ({"writer": setup.writer} if setup.writer is not setup.backbone else {})
    parts = {role: await engine.model_identity(role) for role, engine in engines.items()}
    return replace(
        setup, run_info={**setup.run_info, "model": short_digest(parts)}, identity={**setup.identity, "model": parts}
    )


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text[:12] if len(text) == 64 else text


def model_changed(before: Any, now: dict[str, Any]) -> str:
    """The models that differ, in words: ``backbone folder_sha256 3f2a… → 9c1b…``."""
    if not isinstance(before, dict):
        return "its config.json names no model"
    said = []
    for role in sorted(set(before) | set(now)):
        old, new = before.get(role) or {}, now.get(role) or {}
        said += [
            f"{role} {key} {_short(old.get(key))} → {_short(new.get(key))}"
            for key in sorted(set(old) | set(new))
            if old.get(key) != new.get(key)
        ]
    return ", ".join(f"{s} changed" for s in said) or "the records name another model than config.json"


def _saved(setup: RunSetup) -> dict[str, Any]:
    """The run's ``config.json`` (empty: no such file, or a damaged one)."""
    try:
        saved = json.loads(RunDir(setup.run_dir).config.read_text())
    except (OSError, ValueError):
        return {}
    return saved if isinstance(saved, dict) else {}


def refuse_other_identity(setup: RunSetup, keys: set[str], trajectories: set[str]) -> None:
    """Stop with one line when the shard's newest records (of ``keys``) or memory lines (of ``trajectories``)
    on disk were made by other code or another model than this job's (lines from before a part was named
    count as another)."""
    mine = setup.run_info
    records = [
        r for k, r in latest_records(RunDir(setup.run_dir).records).items() if k in keys and differing(r["run"], mine)
    ]
    memory = [
        m
        for (t, _), m in newest_memory_lines(RunDir(setup.run_dir).memory).items()
        if t in trajectories and differing(m["run"], mine)
    ]
    if not records and not memory:
        return
    lines = records + memory
    parts = [p for p in MADE_BY if any(p in differing(line["run"], mine) for line in lines)]
    saved = _saved(setup)
    changed = {
        "code": lambda: what_changed(saved.get("code"), setup.identity["code"]),
        "model": lambda: model_changed(saved.get("model"), setup.identity["model"]),
    }
    theirs = {p: next(line["run"].get(p) for line in lines if p in differing(line["run"], mine)) for p in parts}
    why = "; ".join(f"{p} {theirs[p]}, now {mine.get(p)}: {changed[p]()}" for p in parts)
    raise ConfigError(
        f"{setup.run_dir} holds {len(records)} records and {len(memory)} memory lines of "
        f"{setup.shard_label} made by {' and '.join(MADE_BY[p][0] for p in parts)} ({why}); "
        f"{' and '.join(MADE_BY[p][1] for p in parts)} is a new run (another output_root), "
        "or rerun=all redoes this one"
    )
