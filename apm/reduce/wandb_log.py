"""Optional: log scores, tables and figures to one W&B summary run (wandb imported lazily)."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

MAX_ROWS = 10_000
"""wandb.Table silently truncates past this many rows: longer tables are logged in chunks."""


def chunks(df: pd.DataFrame, size: int = MAX_ROWS) -> list[pd.DataFrame]:
    """``df`` cut into consecutive pieces of at most ``size`` rows (at least one piece)."""
    return [df.iloc[i : i + size] for i in range(0, max(len(df), 1), size)]


def log_summary(
    scores: pd.DataFrame,
    tables: Sequence[Path],
    figures: Sequence[Path],
    project: str,
    mode: str = "offline",
    directory: Path | None = None,
) -> bool:
    """Log to one ``job_type=reduce`` run; False (with a warning) when wandb is absent, or disabled."""
    if mode == "disabled":
        return False
    try:
        wandb = importlib.import_module("wandb")
    except ImportError:
        warnings.warn("--wandb: wandb is not installed; nothing logged", stacklevel=2)
        return False
    run = wandb.init(project=project, job_type="reduce", mode=mode, dir=str(directory) if directory else None)
    for i, part in enumerate(chunks(scores)):
        run.log({f"scores/part{i}": wandb.Table(columns=list(part.columns), data=part.values.tolist())})
    for path in (t for t in tables if t.suffix == ".csv"):
        table = pd.read_csv(path).astype(str)
        run.log({f"tables/{path.stem}": wandb.Table(columns=list(table.columns), data=table.values.tolist())})
    for path in (f for f in figures if f.suffix == ".png"):
        run.log({f"figures/{path.stem}": wandb.Image(str(path))})
    run.finish()
    return True
