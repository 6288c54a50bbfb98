"""Per-candidate sufficient statistics: every score is a function of their sums over candidates.

A *unit* is one candidate of one method. Reducing records to units once makes every metric, and
every bootstrap replicate (resampling candidates), a cheap function of column sums
(:mod:`apm.reduce.metrics`). Storage has its own unit, the trajectory (:func:`trajectory_units`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from apm.data.tasks import ADAPTIVE, EA, EA_UNAVAILABLE_OPTION, MCQA_TASKS
from apm.reduce.load import METHOD

UNIT = METHOD + ["task", "trajectory_id", "candidate_id"]
"""Columns identifying one candidate of one method."""

SUMMED = [
    "n_inst", "errors", "fmt_fail", "pos_n", "pos_dec", "pos_gate", "neg_n", "neg_dec", "neg_gate",
    "judge_fail", "ea_n", "ea_ok", "eu_n", "eu_ok",
    "ttft_sum", "ttft_n", "total_sum", "total_n", "rtf_sum", "rtf_n",
]
"""Statistics that are plain per-instance counts or sums within a candidate."""

STATS = SUMMED + ["score", "scored", "rq", "rq_has", "orig_ok", "orig_n"]
"""All unit columns; ``score``/``rq`` are the candidate's 0–100 task score and response quality."""

EA_ORIGINAL_MEMORY: Mapping[str, str] = {"restricted": "raw_video"}
"""EA runs under this memory take their originals from runs under that one (see docs/scores.md)."""


def with_judge_scores(records: pd.DataFrame, judgements: pd.DataFrame) -> pd.DataFrame:
    """Records plus ``judge`` (name) and ``judge_score`` (1–5; NaN if missing or failed)."""
    picked = judgements.loc[:, ["config_hash", "key", "judge", "status", "score"]]
    picked = picked.assign(
        judge_score=picked["score"].where(picked["status"].astype("str") == "ok"),
        config_hash=picked["config_hash"].astype("str"),
    ).drop(columns=["status", "score"])
    left = records.assign(_hash=records["config_hash"].astype("str"))
    out = left.merge(picked, how="left", left_on=["_hash", "key"], right_on=["config_hash", "key"],
                     suffixes=("", "_j"), sort=False)
    return out.drop(columns=["_hash", "config_hash_j"])


def _flag(s: pd.Series) -> np.ndarray:
    """A nullable boolean column as 0/1 floats, null counting as false."""
    return s.fillna(False).to_numpy(dtype="float64")


def _instance_stats(rec: pd.DataFrame) -> pd.DataFrame:
    """Per-instance numerators and denominators; errored instances count only in ``errors``."""
    ok = rec["error"].isna().to_numpy(dtype="float64")
    task = rec["task"].astype("str")
    adaptive = task.isin(ADAPTIVE).to_numpy(dtype="float64") * ok
    pos = (rec["polarity"].astype("str") == "positive").to_numpy(dtype="float64") * adaptive
    neg = (rec["polarity"].astype("str") == "negative").to_numpy(dtype="float64") * adaptive
    decision = rec["decision"].astype("str")
    gate = _flag(rec["gate_pass"])
    correct = _flag(rec["correct"])
    ea = (task == EA).to_numpy(dtype="float64") * ok
    avail = _flag(rec["evidence_available"])
    cols: dict[str, np.ndarray] = {
        "n_inst": ok,
        "errors": 1.0 - ok,
        "fmt_fail": (rec["parse_status"].astype("str") == "failed").to_numpy(dtype="float64") * ok,
        "pos_n": pos,
        "pos_dec": pos * (decision == "INTERVENE").to_numpy(dtype="float64"),
        "pos_gate": pos * gate,
        "neg_n": neg,
        "neg_dec": neg * (decision == "SILENT").to_numpy(dtype="float64"),
        "neg_gate": neg * gate,
        "judge_fail": adaptive * gate * rec["judge_score"].isna().to_numpy(dtype="float64"),
        "ea_n": ea * avail,
        "ea_ok": ea * avail * correct,
        "eu_n": ea * (1.0 - avail),
        "eu_ok": ea * (1.0 - avail) * correct,
    }
    for name, col in (("ttft", "ttft_s"), ("total", "total_s"), ("rtf", "rtf")):
        value = rec[col].to_numpy(dtype="float64")
        present = ~np.isnan(value) * ok
        cols[f"{name}_sum"] = np.where(present, value, 0.0)
        cols[f"{name}_n"] = present.astype("float64")
    return pd.DataFrame(cols, index=rec.index)


def polarity_balanced_mean(df: pd.DataFrame, value: str) -> pd.Series:
    """Per unit: the mean of the per-polarity means of ``value`` over the polarities that have one.

    NaN values are left out; a unit whose values are all NaN gets NaN. This is Eq. (1)'s s_c and
    Eq. (3)'s inner average.
    """
    by_polarity = df.groupby(UNIT + ["polarity"], observed=True, sort=False)[value].mean()
    return by_polarity.groupby(level=UNIT, observed=True, sort=False).mean()


def _adaptive_scores(ok: pd.DataFrame) -> pd.DataFrame:
    """Gated score (Eq. 1, 0–100) and response quality (Eq. 3, 0–100) of each adaptive candidate."""
    adaptive = ok[ok["task"].astype("str").isin(ADAPTIVE)]
    gate = adaptive["gate_pass"].fillna(False).to_numpy(dtype=bool)
    judged = adaptive["judge_score"].to_numpy(dtype="float64")
    probes = adaptive.loc[:, UNIT + ["polarity"]].assign(
        gated=np.where(gate, judged, 0.0), quality=np.where(gate, judged, np.nan)
    )
    score = 20.0 * polarity_balanced_mean(probes, "gated")
    rq = 20.0 * polarity_balanced_mean(probes, "quality")
    return pd.DataFrame({"score": score, "rq": rq})


def _mcqa_scores(ok: pd.DataFrame) -> pd.DataFrame:
    """Accuracy (0–100) of each MCQA candidate; an unparseable or null answer is wrong."""
    mcqa = ok[ok["task"].astype("str").isin(MCQA_TASKS)]
    correct = mcqa.loc[:, UNIT].assign(score=100.0 * _flag(mcqa["correct"]))
    return correct.groupby(UNIT, observed=True, sort=False)[["score"]].mean()


def original_correct(records: pd.DataFrame) -> pd.DataFrame:
    """Per EA unit with an original: ``orig_ok`` = the original question's accuracy (0–1), ``orig_n`` = 1.

    The original is the non-EA candidate ``original_candidate_id`` of the same trajectory, answered
    by a method with the same backbone and memory (EA memory mapped by ``EA_ORIGINAL_MEMORY``).
    """
    ok = records[records["error"].isna()]
    ea = ok[(ok["task"].astype("str") == EA) & ok["original_candidate_id"].notna()]
    source = ok[ok["task"].astype("str").isin(MCQA_TASKS)]
    join = ["memory", "backbone", "trajectory_id", "candidate_id"]
    originals = source.assign(**{c: source[c].astype("str") for c in join}, orig_ok=_flag(source["correct"]))
    originals = originals.groupby(join, sort=False)["orig_ok"].mean().reset_index()
    lookup = ea.loc[:, UNIT].assign(
        memory=ea["memory"].astype("str").replace(dict(EA_ORIGINAL_MEMORY)),
        backbone=ea["backbone"].astype("str"),
        trajectory_id=ea["trajectory_id"].astype("str"),
        candidate_id=ea["original_candidate_id"].astype("str"),
    )
    found = lookup.merge(originals, how="inner", on=join)
    found = found.assign(**{c: ea.loc[found.index.map(lambda i: i), c].to_numpy() for c in []})
    keyed = ea.loc[:, UNIT].iloc[_positions(lookup, found, join)]
    out = keyed.assign(orig_ok=found["orig_ok"].to_numpy(), orig_n=1.0)
    return out.groupby(UNIT, observed=True, sort=False)[["orig_ok", "orig_n"]].mean()


def candidate_units(records: pd.DataFrame, judgements: pd.DataFrame) -> pd.DataFrame:
    """One row per (method, task, candidate) with all :data:`STATS` columns (index: :data:`UNIT`)."""
    rec = with_judge_scores(records, judgements)
    stats = pd.concat([rec.loc[:, UNIT], _instance_stats(rec)], axis=1)
    units = stats.groupby(UNIT, observed=True, sort=False)[SUMMED].sum()
    ok = rec[rec["error"].isna()]
    scored = pd.concat([_mcqa_scores(ok), _adaptive_scores(ok)])
    units = units.join(scored, how="left").join(original_correct(records), how="left")
    units["scored"] = units["score"].notna().astype("float64")
    units["rq_has"] = units["rq"].notna().astype("float64")
    units["orig_n"] = units["orig_n"].fillna(0.0)
    return units.fillna({"score": 0.0, "rq": 0.0, "orig_ok": 0.0}).loc[:, STATS]
