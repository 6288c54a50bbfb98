"""Per-candidate sufficient statistics: every score is a function of their sums over candidates.

A *unit* is one candidate of one method. Reducing records to units once makes every metric, and
every bootstrap replicate (resampling candidates), a cheap function of column sums
(:mod:`apm.reduce.metrics`). Storage has its own unit, the trajectory (:func:`trajectory_units`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from apm.data.tasks import ADAPTIVE, EA, MCQA_TASKS
from apm.reduce.load import METHOD

UNIT = METHOD + ["task", "trajectory_id", "candidate_id"]
"""Columns identifying one candidate of one method."""

SUMMED = [
    "n_inst", "errors", "fmt_fail", "pos_n", "pos_dec", "pos_gate", "neg_n", "neg_dec", "neg_gate",
    "judge_fail", "unjudged", "ea_n", "ea_ok", "eu_n", "eu_ok",
    "ttft_sum", "ttft_n", "total_sum", "total_n", "rtf_sum", "rtf_n",
]
"""Statistics that are plain per-instance counts or sums within a candidate."""

STATS = SUMMED + ["score", "scored", "rq", "rq_has", "orig_ok", "orig_n"]
"""All unit columns; ``score``/``rq`` are the candidate's 0–100 task score and response quality."""

ALL = "all"
"""The ``task`` label of metrics pooled over every instance (or trajectory) of a method."""

EA_ORIGINAL_MEMORY: Mapping[str, str] = {"restricted": "raw_video"}
"""EA runs under this memory config take their originals from runs under that one (docs/scores.md)."""


def with_judge_scores(records: pd.DataFrame, judgements: pd.DataFrame) -> pd.DataFrame:
    """Records plus ``judge`` (name), ``judge_score`` (1–5; NaN unless ok) and ``judge_state``:
    ``ok``, ``failed`` (the judge replied invalidly after its retries, or could not be reached) or
    ``missing`` (no judgement). Both ``failed`` and ``missing`` probes are unjudged: ``apm-judge`` asks
    them again, and no score is computed without them."""
    picked = judgements.loc[:, ["config_hash", "key", "judge", "status", "score"]]
    status = picked["status"].astype("str")
    picked = picked.assign(
        judge_score=picked["score"].where(status == "ok"),
        judge_state=np.where(status == "ok", "ok", "failed"),
        config_hash=picked["config_hash"].astype("str"),
    ).drop(columns=["status", "score"])
    left = records.assign(_hash=records["config_hash"].astype("str"))
    out = left.merge(picked, how="left", left_on=["_hash", "key"], right_on=["config_hash", "key"],
                     suffixes=("", "_j"), sort=False)
    return out.drop(columns=["_hash", "config_hash_j"]).fillna({"judge_state": "missing"})


def _flag(s: pd.Series) -> np.ndarray:
    """A nullable boolean column as 0/1 floats, null counting as false."""
    return s.fillna(False).to_numpy(dtype="float64")


def _instance_stats(rec: pd.DataFrame) -> pd.DataFrame:
    """Per-instance numerators and denominators. Every instance counts: an errored one has no
    decision, answer or gate pass, so it is wrong wherever it is scored (B.5); only latency means
    are over answered instances."""
    ok = rec["error"].isna().to_numpy(dtype="float64")
    task = rec["task"].astype("str")
    adaptive = task.isin(ADAPTIVE).to_numpy(dtype="float64")
    pos = (rec["polarity"].astype("str") == "positive").to_numpy(dtype="float64") * adaptive
    neg = (rec["polarity"].astype("str") == "negative").to_numpy(dtype="float64") * adaptive
    decision = rec["decision"].astype("str")
    gate = _flag(rec["gate_pass"]) * ok
    correct = _flag(rec["correct"]) * ok
    ea = (task == EA).to_numpy(dtype="float64")
    avail = _flag(rec["evidence_available"])
    state = rec["judge_state"].astype("str")
    cols: dict[str, np.ndarray] = {
        "n_inst": np.ones(len(rec)),
        "errors": 1.0 - ok,
        "fmt_fail": (rec["parse_status"].astype("str") == "failed").to_numpy(dtype="float64") * ok,
        "pos_n": pos,
        "pos_dec": pos * ok * (decision == "INTERVENE").to_numpy(dtype="float64"),
        "pos_gate": pos * gate,
        "neg_n": neg,
        "neg_dec": neg * ok * (decision == "SILENT").to_numpy(dtype="float64"),
        "neg_gate": neg * gate,
        "judge_fail": adaptive * gate * (state == "failed").to_numpy(dtype="float64"),
        "unjudged": adaptive * gate * (state != "ok").to_numpy(dtype="float64"),
        "ea_n": ea * avail,
        "ea_ok": ea * avail * correct,
        "eu_n": ea * (1.0 - avail),
        "eu_ok": ea * (1.0 - avail) * correct,
    }
    timed = ok * _measured_alone(rec)
    for name, col in (("ttft", "ttft_s"), ("total", "total_s"), ("rtf", "rtf")):
        value = rec[col].to_numpy(dtype="float64")
        present = ~np.isnan(value) * timed
        cols[f"{name}_sum"] = np.where(present, value, 0.0)
        cols[f"{name}_n"] = present.astype("float64")
    return pd.DataFrame(cols, index=rec.index)


def _measured_alone(rec: pd.DataFrame) -> np.ndarray:
    """1 for records whose latency counts: those measured in isolation (``latency.mode == "isolated"``:
    ``latency_mode=true`` or ``latency.sample=N``, one request at a time after a warm-up), as the paper
    compares latency "under the same host configuration"; a method without any has no latency ("–")."""
    return (rec["latency_mode"].astype("str") == "isolated").to_numpy(dtype="float64")


def polarity_balanced_mean(df: pd.DataFrame, value: str) -> pd.Series:
    """Per unit: the mean of the per-polarity means of ``value`` over the polarities that have one.

    NaN values are left out; a unit whose values are all NaN gets NaN. This is Eq. (1)'s s_c and
    Eq. (3)'s inner average.
    """
    by_polarity = df.groupby(UNIT + ["polarity"], observed=True, sort=False)[value].mean()
    return by_polarity.groupby(level=UNIT, observed=True, sort=False).mean()


def _adaptive_scores(rec: pd.DataFrame) -> pd.DataFrame:
    """Gated score (Eq. 1, 0–100) and response quality (Eq. 3, 0–100) of each adaptive candidate.

    A gate-passing probe without an ok judgement (failed or missing) has no score: every score over it
    is withheld later, in :mod:`apm.reduce.scores`, never computed from the other probes; an errored
    probe fails the gate.
    """
    adaptive = rec[rec["task"].astype("str").isin(ADAPTIVE)]
    gate = (adaptive["gate_pass"].fillna(False) & adaptive["error"].isna()).to_numpy(dtype=bool)
    judged = adaptive["judge_score"].to_numpy(dtype="float64")
    probes = adaptive.loc[:, UNIT + ["polarity"]].assign(
        gated=np.where(gate, judged, 0.0), quality=np.where(gate, judged, np.nan)
    )
    score = 20.0 * polarity_balanced_mean(probes, "gated")
    rq = 20.0 * polarity_balanced_mean(probes, "quality")
    return pd.DataFrame({"score": score, "rq": rq})


def _mcqa_scores(rec: pd.DataFrame) -> pd.DataFrame:
    """Accuracy (0–100) of each MCQA candidate; an errored, unparseable or null answer is wrong."""
    mcqa = rec[rec["task"].astype("str").isin(MCQA_TASKS)]
    right = mcqa["correct"].fillna(False) & mcqa["error"].isna()
    correct = mcqa.loc[:, UNIT].assign(score=100.0 * _flag(right))
    return correct.groupby(UNIT, observed=True, sort=False)[["score"]].mean()


def original_correct(records: pd.DataFrame) -> pd.DataFrame:
    """Per EA unit with an original: ``orig_ok`` = the original question's accuracy (0–1), ``orig_n`` = 1.

    The original is the non-EA candidate ``original_candidate_id`` of the same trajectory, answered
    by a method with the same backbone config (and backbone settings) and memory config (EA memory
    mapped by ``EA_ORIGINAL_MEMORY``); an errored original counts as wrong.
    """
    ea = records[(records["task"].astype("str") == EA) & records["original_candidate_id"].notna()]
    mcqa = records[records["task"].astype("str").isin(MCQA_TASKS)]
    join = ["j_memory", "j_backbone", "j_trajectory", "j_candidate"]
    originals = pd.DataFrame({
        "j_memory": mcqa["memory_config"].astype("str"),
        "j_backbone": _backbone_identity(mcqa),
        "j_trajectory": mcqa["trajectory_id"].astype("str"),
        "j_candidate": mcqa["candidate_id"].astype("str"),
        "orig_ok": _flag(mcqa["correct"].fillna(False) & mcqa["error"].isna()),
    }).groupby(join, sort=False)["orig_ok"].mean().reset_index()
    lookup = ea.loc[:, UNIT].assign(
        j_memory=ea["memory_config"].astype("str").replace(dict(EA_ORIGINAL_MEMORY)),
        j_backbone=_backbone_identity(ea),
        j_trajectory=ea["trajectory_id"].astype("str"),
        j_candidate=ea["original_candidate_id"].astype("str"),
    )
    found = lookup.merge(originals, how="inner", on=join).assign(orig_n=1.0)
    return found.groupby(UNIT, observed=True, sort=False)[["orig_ok", "orig_n"]].mean()


def _backbone_identity(records: pd.DataFrame) -> pd.Series:
    """The backbone config plus its settings that differ from the default."""
    return records["backbone_config"].astype("str") + "|" + records["backbone_variant"].astype("str")


def candidate_units(records: pd.DataFrame, judgements: pd.DataFrame) -> pd.DataFrame:
    """One row per (method, task, candidate) with all :data:`STATS` columns (index: :data:`UNIT`)."""
    return _units(with_judge_scores(records, judgements), records)


@dataclass(frozen=True)
class UnitViews:
    """A reduction's candidate units, built once and shared by the unjudged count and every score: over
    every instance (the paper's accounting) and over the answered ones (the ``_answered`` view)."""

    every: pd.DataFrame
    answered: pd.DataFrame

    @property
    def unjudged(self) -> int:
        """Gate-passing adaptive probes without an ok judgement (none on record, or the judge failed)."""
        return int(self.every["unjudged"].sum())

    def unjudged_by_method(self) -> dict[str, int]:
        """:attr:`unjudged` of each method (config hash) with units."""
        sums = self.every["unjudged"].groupby(level="config_hash", observed=True).sum()
        return {str(h): int(n) for h, n in sums.items()}


def unit_views(records: pd.DataFrame, judgements: pd.DataFrame) -> UnitViews:
    """:class:`UnitViews` of ``records``: one join with the judgements, the answered view a row filter of it
    (the same units as :func:`candidate_units` of the answered records)."""
    rec = with_judge_scores(records, judgements)
    answered = records["error"].isna()
    return UnitViews(_units(rec, records),
                     _units(rec[rec["error"].isna()].reset_index(drop=True), records[answered]))


def _units(rec: pd.DataFrame, records: pd.DataFrame) -> pd.DataFrame:
    """The units of records joined with their judge scores (``rec``); ``records`` hold the EA originals."""
    stats = pd.concat([rec.loc[:, UNIT], _instance_stats(rec)], axis=1)
    units = stats.groupby(UNIT, observed=True, sort=False)[SUMMED].sum()
    scored = pd.concat([_mcqa_scores(rec), _adaptive_scores(rec)])
    units = units.join(scored, how="left").join(original_correct(records), how="left")
    units["scored"] = units["score"].notna().astype("float64")
    units["rq_has"] = units["rq"].notna().astype("float64")
    units["orig_n"] = units["orig_n"].fillna(0.0)
    return units.fillna({"score": 0.0, "rq": 0.0, "orig_ok": 0.0}).loc[:, STATS]


def trajectory_units(memory: pd.DataFrame) -> pd.DataFrame:
    """Per (method, trajectory): the peak persistent state some later session sees (Eq. 2).

    Only states after sessions 1…K−1 count (the last session's state is never read). The peak is
    the maximum bytes (memory may shrink); on ties the latest such state, with the most prior video,
    is taken. ``per_hour`` is that peak ÷ its prior video hours. Trajectories with one session, or
    with no prior video at the peak, have no such state and are left out. ``fast_peak`` is the largest
    ``fast_weight_bytes`` of the same states, measured apart and never in ``bytes`` (B.4; 0 without).
    """
    keys = METHOD + ["trajectory_id"]
    last = memory.groupby(keys, observed=True)["session_index"].transform("max")
    seen = memory[memory["session_index"] < last]
    ordered = seen.sort_values(keys + ["bytes", "session_index"], kind="stable")
    peak = ordered.groupby(keys, observed=True, sort=False).tail(1)
    peak = peak[peak["prior_hours"] > 0]
    fast = seen.groupby(keys, observed=True)["fast_weight_bytes"].max().fillna(0.0)
    return pd.DataFrame(
        {"per_hour": (peak["bytes"] / peak["prior_hours"]).to_numpy(),
         "peak": peak["bytes"].to_numpy(), "trajectories": 1.0,
         "fast_peak": fast.reindex(pd.MultiIndex.from_frame(peak.loc[:, keys])).to_numpy()},
        index=pd.MultiIndex.from_frame(
            peak.loc[:, METHOD].assign(task=ALL, trajectory_id=peak["trajectory_id"])
        ),
    )
