"""A method's W&B identity and numbers: flat config keys for every sweep axis, tags, and each stage's
summary (the paper's metrics for ``reduce``), all computed from a :class:`~apm.publish.source.Method`."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import pandas as pd

from apm.publish.source import Method
from apm.records.wandb_identity import release_group as group_of
from apm.records.wandb_identity import run_config
from apm.reduce.names import is_reference, row_label, row_rank

MAX_TAG = 64
"""W&B refuses longer tags."""


STORAGE = "storage_bytes_per_hour/all"
LOG_STORAGE = "log10_1p_storage_bytes_per_hour/all"
"""log10(1 + storage per video hour): Figure 2's storage axis on a linear W&B axis, so a method that
stores nothing (0 B/h) is drawn at 0 instead of dropped by a log axis (a symlog with a 1 B/h linear part)."""


def joined(values: Iterable[Any]) -> str | None:
    """The distinct values of a column, sorted and '+'-joined; None when there are none."""
    seen = sorted({str(v) for v in values if not pd.isna(v)})
    return "+".join(seen) or None


def number(value: Any) -> float | None:
    """A summary number: None for a missing or withheld (NaN) value, never a fake 0."""
    return None if value is None or pd.isna(value) or not math.isfinite(float(value)) else float(value)


def _ok(m: Method) -> pd.DataFrame:
    return m.judgements[m.judgements["status"].astype("str") == "ok"]


def method_config(m: Method, prompt_version: str | None) -> dict[str, Any]:
    """The flat config the live mirror also writes (:func:`~apm.records.wandb_identity.run_config`), and
    what only the records give: the method's table label, its variants and settings, family and tag,
    the prompt (``prompt_version``: its records' versions, :func:`joined`), the judge and rubric used."""
    first, ok = m.records.iloc[0], _ok(m)
    return {
        **run_config(method_run(m), m.saved.get("config") or {}, m.run_dir),
        "method": row_label(first),
        "paper_order": paper_order(first),
        "memory_variant": str(first["memory_variant"]),
        "backbone_variant": str(first["backbone_variant"]),
        "settings": str(first["settings"]),
        "method_family": str(first["method_family"]),
        "tag": str(first["tag"]),
        "prompt_version": prompt_version,
        "judge_name": joined(ok["judge"]),
        "judge_model": joined(ok["judge_model"]),
        "rubric_version": joined(ok["rubric_version"]),
    }


def paper_order(first: Any) -> str:
    """Where the method's row stands in the paper's tables (:func:`~apm.reduce.names.row_rank`, then its
    label) as text that sorts the same: the Report orders its runs tables by it."""
    family, kind, memory, backbone, tag, name = row_rank(first)
    return f"{family:02d}.{kind:02d}.{memory}.{backbone:02d}.{tag}.{name}.{row_label(first)}"


def method_run(m: Method) -> dict[str, Any]:
    """The method's ``run`` block, its release from ``config.json`` where the block predates it."""
    return {**m.run, "release_fingerprint": m.run.get("release_fingerprint") or m.saved.get("release_fingerprint")}


def release_group(m: Method) -> str:
    """The default W&B group, the live mirror's too: the release the method ran on
    (:func:`apm.records.wandb_identity.release_group`)."""
    return group_of(method_run(m))


def method_tags(config: dict[str, Any]) -> list[str]:
    """``dataset=…``, ``memory=…``, ``backbone=…`` (and ``reference`` for reference rows: baselines,
    oracles, the perceiver, as their classes declare)."""
    tags = [f"{axis}={config[axis]}"[:MAX_TAG] for axis in ("dataset", "memory", "backbone")]
    return tags + (["reference"] if is_reference(config["method_family"]) else [])


def coverage_summary(scores: pd.DataFrame) -> dict[str, Any]:
    """The method's coverage of its plan (docs/scores.md, "Coverage"): ``n_planned``, ``coverage``
    (None: no plan), ``partial`` and ``coverage_gap`` (what is missing; '' when complete)."""
    first = scores.iloc[0] if len(scores) else pd.Series(dtype=object)
    gap = str(first.get("coverage_gap") or "")
    return {
        "n_planned": number(first.get("n_planned")),
        "coverage": number(first.get("coverage")),
        "partial": bool(gap),
        "coverage_gap": gap,
    }


def metric_summary(m: Method) -> dict[str, Any]:
    """The paper's metrics as ``<metric>/<task>`` keys (``task_score/ER``, ``overall/all``,
    ``ea_accuracy/EA``, ``storage_bytes_per_hour/all``, ``ttft_s/all``, …), plus the unjudged probes
    that withhold judged metrics (None) and the method's coverage (:func:`coverage_summary`)."""
    s = m.scores
    values = {f"{metric}/{task}": number(v) for metric, task, v in zip(s["metric"], s["task"], s["value"])}
    storage = values.get(STORAGE)
    return {
        **values,
        LOG_STORAGE: None if storage is None else math.log10(1 + storage),
        "unjudged": m.unjudged,
        **coverage_summary(s),
    }


def judge_summary(m: Method) -> dict[str, Any]:
    """What the judge stage left: ok judgements and their mean score, judge failures (left out of the
    means), and probes still waiting for a judgement."""
    j, ok = m.judgements, _ok(m)
    failed = (j["status"].astype("str") == "failed") & (j["failure"].astype("str") != "backbone")
    return {
        "judged": len(ok),
        "mean_score": number(ok["score"].mean()),
        "judge_failures": int(failed.sum()),
        "unjudged": m.unjudged,
    }
