"""``report/manifest.json``: what a reduction read and how, so a table says what produced it.

Inputs are the run directories found under the paths given (every folder holding ``records/``), each
with its config hashes and the job manifests its shards wrote (``jobs/<shard>/manifest.json``);
then the judges and rubric versions, the bootstrap seed and replicates, and the input lines that
were left out as unreadable (``file:line: reason``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

from apm.records.rundir import RunDir
from apm.reduce.load import RunSet, run_dirs

SHOWN_SKIPPED = 100
"""How many skipped lines the manifest lists one by one (all are counted)."""


def _json(path: Path) -> Any:
    """A JSON file's content, or a note saying why it could not be read (a manifest is evidence, not input)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return {"unreadable": f"{type(e).__name__}: {e}"}


def _input(run_dir: Path) -> dict[str, Any]:
    """One run directory: its config hashes on record and the manifests of its jobs."""
    run = RunDir(run_dir)
    config = _json(run.config) if run.config.exists() else None
    return {
        "run_dir": str(run_dir),
        "config_hash": config.get("config_hash") if isinstance(config, dict) else None,
        "release_fingerprint": config.get("release_fingerprint") if isinstance(config, dict) else None,
        "jobs": {p.parent.name: _json(p) for p in run.manifests()},
    }


def _distinct(df: pd.DataFrame, columns: list[str]) -> list[dict[str, Any]]:
    """The distinct non-null combinations of ``columns`` (those present), as plain dicts."""
    present = [c for c in columns if c in df.columns]
    if df.empty or not present:
        return []
    rows = df.loc[:, present].astype("object").where(df.loc[:, present].notna(), None).drop_duplicates()
    return [dict(r) for r in rows.to_dict("records")]


def reduce_manifest(paths: Iterable[str | Path], runs: RunSet, seed: int, replicates: int) -> dict[str, Any]:
    """The manifest of one ``apm-reduce`` call over ``paths``."""
    ok = runs.judgements[runs.judgements["status"].astype("str") == "ok"]
    return {
        "apm_version": metadata.version("apm"),
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": sys.argv,
        "inputs": [_input(d) for d in run_dirs(paths)],
        "config_hashes": sorted(runs.records["config_hash"].astype("str").unique().tolist()),
        "judges": _distinct(ok, ["judge", "judge_model", "rubric_version"]),
        "bootstrap": {"seed": seed, "replicates": replicates},
        "skipped_lines": {"count": len(runs.skipped), "first": [str(x) for x in runs.skipped[:SHOWN_SKIPPED]]},
    }
