"""Coverage: how much of its plan each method's records cover (docs/scores.md, "Coverage").

A method's plan is what its shards wrote in ``<run dir>/jobs/<shard>/plan.json`` (docs/scale.md):
each shard's instance keys and trajectories, how many of them the job selected (``dataset.limit`` /
``dataset.trajectories``), and the population of the whole config (every shard together). A method
is complete when every planned instance has a record and every memory update it made succeeded;
anything else is a gap, named in one line that every table, figure, W&B summary and the viewer show.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from apm.records.atomic import read_plan_file
from apm.records.rundir import RunDir

SHARD = re.compile(r"shard-(\d+)-of-(\d+)")
"""A shard's label: its index and the shard count of the job that ran it."""

PARTIAL = "partial"
"""The word a partial method's label carries in every table and figure ("… (partial)")."""


@dataclass(frozen=True)
class PlanFile:
    """One shard's ``plan.json``, with the config hash of its run dir (``config.json``)."""

    config_hash: str
    shard: str
    keys: frozenset[str]
    trajectories: frozenset[str]
    selected: int | None
    """Instances the job selected (fewer than ``keys`` for a subset run); None in plans that predate it."""
    population: int | None
    """Instances of every shard of the config together; None in plans that predate it."""


@dataclass(frozen=True)
class Coverage:
    """What one method's records and memory lines cover of its plan."""

    planned: int | None
    """Instances a complete run has on record (None: unknown, no plan or shards missing from old plans)."""
    on_record: int
    """Planned instances with a record (an errored record counts: it is scored, as wrong)."""
    gaps: tuple[str, ...]
    """What is missing, one phrase each (empty: complete)."""

    @property
    def fraction(self) -> float:
        """``on_record / planned``; NaN when the plan is unknown."""
        return self.on_record / self.planned if self.planned else float("nan")

    @property
    def note(self) -> str:
        """The gaps as one line (the footnote of a partial method); '' when complete."""
        if not self.gaps:
            return ""
        head = [] if self.planned is None else [f"{self.on_record} of {self.planned} planned instances on record"]
        return "; ".join(head + list(self.gaps))


UNKNOWN = Coverage(None, 0, ())
"""A method whose run dirs hold no plan (records written by hand, or before plans existed): unknown, unmarked."""


def _plan(config_hash: str, path: Path) -> PlanFile:
    """A shard's plan file (:func:`apm.records.atomic.read_plan_file`: a damaged one is refused in one line)."""
    plan = read_plan_file(path)
    return PlanFile(config_hash, path.parent.name, frozenset(plan["keys"]), frozenset(plan.get("trajectories") or ()),
                    plan.get("selected"), plan.get("population"))


def _config_hash(run_dir: Path) -> str | None:
    try:
        saved = json.loads(RunDir(run_dir).config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return saved.get("config_hash") if isinstance(saved, dict) else None


def read_plans(run_dirs: Iterable[Path]) -> tuple[PlanFile, ...]:
    """Every readable shard plan of the run dirs, under the config hash their ``config.json`` names."""
    found = []
    for run_dir in run_dirs:
        config_hash = _config_hash(run_dir)
        for path in RunDir(run_dir).plans() if config_hash else ():
            plan = _plan(str(config_hash), path)
            if SHARD.fullmatch(plan.shard):
                found.append(plan)
    return tuple(found)


def _indices(plans: Sequence[PlanFile]) -> dict[int, set[int]]:
    """Per shard count, the shard indices that have a plan."""
    counts: dict[int, set[int]] = {}
    for plan in plans:
        match = SHARD.fullmatch(plan.shard)
        assert match is not None  # read_plans keeps only shard labels
        counts.setdefault(int(match[2]), set()).add(int(match[1]))
    return counts


def _missing_shards(plans: Sequence[PlanFile]) -> list[str]:
    """Shards never started, of every shard count of which none is whole (a whole one plans everything)."""
    counts = _indices(plans)
    if any(len(indices) == count for count, indices in counts.items()):
        return []
    return [f"shard-{i}-of-{count}" for count, indices in sorted(counts.items())
            for i in range(count) if i not in indices]


def _shard_gap(plan: PlanFile, on_record: set[str]) -> str | None:
    """Why one shard's planned instances lack records: a subset run, or unfinished (or lost) records."""
    short = len(plan.keys - on_record)
    if not short:
        return None
    if plan.selected is not None and plan.selected < len(plan.keys):
        return (f"{plan.shard} ran a subset ({plan.selected} of its {len(plan.keys)} selected: "
                "dataset.limit/trajectories)")
    return f"{plan.shard}: {short} of {len(plan.keys)} without a record (unfinished, or records lost)"


def method_coverage(plans: Sequence[PlanFile], keys: set[str], memory: pd.DataFrame) -> Coverage:
    """One method's coverage from its plans, the keys it has records of, and its memory lines."""
    if not plans:
        return UNKNOWN
    planned_keys = frozenset().union(*(p.keys for p in plans))
    populations = [p.population for p in plans if p.population is not None]
    missing = _missing_shards(plans)
    planned = max(populations) if populations else (None if missing else len(planned_keys))
    gaps = [f"{', '.join(missing)} never started"] if missing else []
    gaps += [g for g in (_shard_gap(p, keys) for p in plans) if g]
    failed = int(memory["error"].notna().sum()) if "error" in memory else 0
    if failed:
        gaps.append(f"{failed} of {len(memory)} memory updates failed (storage is not what the method keeps)")
    trajectories = frozenset().union(*(p.trajectories for p in plans))
    stored = set(memory["trajectory_id"].astype(str)) & trajectories
    if len(memory) and len(stored) < len(trajectories):
        gaps.append(f"storage over {len(stored)} of {len(trajectories)} planned trajectories")
    return Coverage(planned, len(planned_keys & keys), tuple(gaps))


def coverage_by_method(plans: Sequence[PlanFile], records: pd.DataFrame, memory: pd.DataFrame) -> dict[str, Coverage]:
    """Per config hash of the records, its :class:`Coverage` (:data:`UNKNOWN` without a plan)."""
    hashes = records["config_hash"].astype(str)
    memory_hashes = memory["config_hash"].astype(str)
    out = {}
    for h in sorted(set(hashes)):
        mine = [p for p in plans if p.config_hash == h]
        keys = set(records.loc[hashes == h, "key"].astype(str))
        out[h] = method_coverage(mine, keys, memory[memory_hashes == h])
    return out
