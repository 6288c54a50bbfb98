"""Optional: log the sweep's report — scores, tables and figures — to one W&B run per group
(wandb imported lazily), written as ``apm-publish`` writes: a deterministic id, replaced on re-logging."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from apm.publish.wandb_runs import MAX_ROWS, RunSpec, chunks, parts, rows_of, run_id, write_run

__all__ = ["MAX_ROWS", "chunks", "log_summary"]


def log_summary(
    scores: pd.DataFrame,
    tables: Sequence[Path],
    figures: Sequence[Path],
    project: str,
    mode: str = "offline",
    directory: Path | None = None,
    group: str = "apm",
    entity: str | None = None,
) -> bool:
    """Log to the group's ``job_type=report`` run; False (with a warning) when wandb is absent, or disabled."""
    if mode == "disabled":
        return False
    try:
        importlib.import_module("wandb")
    except ImportError:
        warnings.warn("--wandb: wandb is not installed; nothing logged", stacklevel=2)
        return False
    logged = parts("scores", list(scores.columns), rows_of(scores))
    for path in (t for t in tables if t.suffix == ".csv"):
        table = pd.read_csv(path).astype(str)
        logged[f"tables/{path.stem}"] = (list(table.columns), table.values.tolist())
    images = {f"figures/{path.stem}": path for path in figures if path.suffix == ".png"}
    spec = RunSpec(run_id(group, "sweep", "report"), "report", group, "report", directory, tags=["report"],
                   tables=logged, images=images)
    write_run(spec, project, entity, mode)
    return True
