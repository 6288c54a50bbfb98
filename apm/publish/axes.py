"""A method's W&B identity and numbers: flat config keys for every sweep axis, tags, and each stage's
summary (the paper's metrics for ``reduce``), all computed from a :class:`~apm.publish.source.Method`."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import pandas as pd

from apm.publish.source import Method
from apm.reduce.names import is_reference, row_label

NOT_THE_METHOD = ("shard", "logging")
"""Parts of ``config.json``'s config that describe the last job, not the method."""
MAX_TAG = 64
"""W&B refuses longer tags."""


def joined(values: Iterable[Any]) -> str | None:
    """The distinct values of a column, sorted and '+'-joined; None when there are none."""
    seen = sorted({str(v) for v in values if not pd.isna(v)})
    return "+".join(seen) or None


def number(value: Any) -> float | None:
    """A summary number: None for a missing or withheld (NaN) value, never a fake 0."""
    return None if value is None or pd.isna(value) or not math.isfinite(float(value)) else float(value)


def _ok(m: Method) -> pd.DataFrame:
    return m.judgements[m.judgements["status"].astype("str") == "ok"]


def method_config(m: Method) -> dict[str, Any]:
    """Flat keys for each sweep axis: the config-group choices (display names for runs that predate
    them), the config hash, each differing setting (``memory.recent_frames``), capabilities, the
    prompt and rubric digests and the judge; the rest of the resolved config nested under ``resolved``."""
    run, first, ok = m.run, m.records.iloc[0], _ok(m)
    choices, capabilities = run.get("choices") or {}, run.get("capabilities") or {}
    variants = (str(first["memory_variant"]), str(first["backbone_variant"]))
    return {
        "config_hash": m.config_hash,
        "dataset": choices.get("dataset") or run["dataset"],
        "memory": str(first["memory_config"]),
        "backbone": str(first["backbone_config"]),
        "writer": choices.get("writer"),
        "judge": choices.get("judge"),
        "method": row_label(first),
        "dataset_name": run["dataset"],
        "memory_name": run["memory"],
        "backbone_name": run["backbone"],
        "memory_variant": variants[0],
        "backbone_variant": variants[1],
        "settings": str(first["settings"]),
        "method_family": str(first["method_family"]),
        "tag": str(first["tag"]),
        "streaming": capabilities.get("streaming"),
        "persistent": capabilities.get("persistent"),
        "prompt_version": joined(m.records["prompt_version"]),
        "judge_name": joined(ok["judge"]),
        "judge_model": joined(ok["judge_model"]),
        "rubric_version": joined(ok["rubric_version"]),
        "release_fingerprint": m.saved.get("release_fingerprint"),
        "run_dir": str(m.run_dir),
        **(run.get("overrides") or {}),
        "resolved": {k: v for k, v in (m.saved.get("config") or {}).items() if k not in NOT_THE_METHOD},
    }


def release_group(m: Method) -> str:
    """The default W&B group: the release the method ran on, ``<dataset>-<first 8 hex of its
    fingerprint>`` — every method scored on one release is one comparison (Tables 3 and 4)."""
    fingerprint = str(m.run.get("release_fingerprint") or m.saved.get("release_fingerprint") or "unknown")
    return f"{m.run['dataset']}-{fingerprint[:8]}"


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
    return {"n_planned": number(first.get("n_planned")), "coverage": number(first.get("coverage")),
            "partial": bool(gap), "coverage_gap": gap}


def metric_summary(m: Method) -> dict[str, Any]:
    """The paper's metrics as ``<metric>/<task>`` keys (``task_score/ER``, ``overall/all``,
    ``ea_accuracy/EA``, ``storage_bytes_per_hour/all``, ``ttft_s/all``, …), plus the unjudged probes
    that withhold judged metrics (None) and the method's coverage (:func:`coverage_summary`)."""
    s = m.scores
    values = {f"{metric}/{task}": number(v) for metric, task, v in zip(s["metric"], s["task"], s["value"])}
    return {**values, "unjudged": m.unjudged, **coverage_summary(s)}


def run_summary(m: Method) -> dict[str, Any]:
    """What the run stage left on record: instances, errors, parse failures and repairs, peak memory."""
    r, parse = m.records, m.records["parse_status"].astype("str")
    return {
        "instances": len(r),
        "errors": int(r["error"].notna().sum()),
        "parse_failed": int((parse == "failed").sum()),
        "parse_repaired": int((parse == "repaired").sum()),
        "memory_bytes_max": number(pd.to_numeric(r["memory_bytes"]).max()),
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
