"""The sweep's report as one W&B run per group (``job_type=report``), written as ``apm-publish`` writes
its runs: a deterministic id, replaced on re-logging, into the same folder. It carries the report's
tables as numbers, its figures, the reduction's settings as config, and the report folder as an
artifact made from the methods' records and judgements artifacts (docs/publish.md)."""

from __future__ import annotations

import importlib
import json
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from apm.publish.axes import joined, release_group
from apm.publish.source import Method
from apm.publish.wandb_runs import (
    ArtifactSpec,
    PublishOptions,
    RunSpec,
    Tables,
    files_in,
    inputs_of,
    parts,
    publish_dir,
    rows_of,
    run_id,
)
from apm.records.atomic import MARKER
from apm.reduce.scores import read_scores


def report_tables(out: Path) -> Tables:
    """``scores/part<i>`` and every ``tables/<name>.csv`` as ``tables/<name>``, each cell as the CSV
    holds it: a number stays a number (missing: None), text stays text."""
    logged = parts("scores", *_table(read_scores(out / "scores.csv")))
    for path in sorted((out / "tables").glob("*.csv")):
        logged[f"tables/{path.stem}"] = _table(pd.read_csv(path))
    return logged


def _table(df: pd.DataFrame) -> tuple[list[str], list[list[Any]]]:
    return list(df.columns), rows_of(df)


def report_config(out: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """The reduction, flat: ``settings`` (the options it ran with) and from its ``manifest.json`` the
    apm version, the config hashes reduced, the judges used and the lines left out."""
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    judges = manifest.get("judges") or []
    return {
        **settings,
        "apm_version": manifest.get("apm_version"),
        "config_hashes": manifest.get("config_hashes"),
        "methods": len(manifest.get("config_hashes") or []),
        "judges": joined(f"{j.get('judge')}/{j.get('judge_model')}/{j.get('rubric_version')}" for j in judges),
        "skipped_lines": (manifest.get("skipped_lines") or {}).get("count"),
    }


def artifact_name(group: str) -> str:
    """The report artifact's name: ``report-<group>`` with what W&B refuses in a name as ``_``."""
    return "report-" + re.sub(r"[^\w.-]", "_", group)


def report_run(out: Path, methods: Sequence[Method], opts: PublishOptions, settings: dict[str, Any]) -> RunSpec:
    """The report run of the group of ``methods``: named after what it reports, into the folder of the
    first method's runs, using every method's records (and judgements) artifacts."""
    group = opts.group or release_group(methods[0])
    report = {k: p for k, p in files_in(out, "**/*").items() if k != MARKER}
    return RunSpec(
        run_id(group, "sweep", "report"), f"report of {len(methods)} method(s) · {group}",
        group, "report", publish_dir(methods[0].run_dir, opts), report_config(out, settings), ["report"],
        tables=report_tables(out),
        images={f"figures/{path.stem}": path for path in sorted((out / "figures").glob("*.png"))},
        uses=[a for m in methods for a in inputs_of(m)],
        logs=[ArtifactSpec(artifact_name(group), "report", report)],
    )


def wandb_usable(mode: str) -> bool:
    """Whether ``--wandb`` can log: False with ``--wandb-mode disabled``, and (with a warning) when
    wandb is not installed."""
    if mode == "disabled":
        return False
    try:
        importlib.import_module("wandb")
    except ImportError:
        warnings.warn("--wandb: wandb is not installed; nothing logged", stacklevel=2)
        return False
    return True
