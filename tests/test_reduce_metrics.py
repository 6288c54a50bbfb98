"""Every metric of apm.reduce against values computed by hand on apm.testing.fixtures.small_run_set."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from apm.reduce import load_runs, score_table
from apm.reduce.load import load_judgements
from apm.testing import fixtures

# Hand computation (records in fixtures.small_run_set):
# ER: C1 right (a later shard replaces a wrong line), C2 wrong, C3 failed parse = wrong, C4 error = wrong
# (answered-only view: C4 left out).
CROSS = (100 / 4 + 100 + 0) / 3  # ER, EST, TR
CROSS_ANSWERED = (100 / 3 + 100 + 0) / 3
PERCEPTION = (100 + 0 + 100 + 100) / 4  # ACR, CT, OCR, STU
# Gated s_c (Eq. 1) ×20: ERA E1 = ((0) + (4+0)/2)/2 = 1 → 20 (wrong option fails the gate); E2 = 5 → 100.
# RCR R1 negatives only, n1 3 and n2 3 (its first judgement failed, the retry scored 3) → 60; R2 (5 + 5)/2 → 100.
# MPA (0 + 2)/2 → 20.  PRM ((4 + 0 failed parse)/2 + 4)/2 = 3 → 60.  TPG (1 + 0)/2 → 10.
ADAPTIVE_SCORES = {"ERA": 60.0, "RCR": 80.0, "MPA": 20.0, "PRM": 60.0, "TPG": 10.0}
ADAPTIVE = sum(ADAPTIVE_SCORES.values()) / 5
DECISION = {  # (P, N) in %: ERA's positive rate ignores the option
    "ERA": (100.0, 50.0), "RCR": (100.0, 100.0), "MPA": (0.0, 100.0), "PRM": (50.0, 100.0), "TPG": (100.0, 0.0),
}
GATE = {"ERA": (50.0, 50.0), "RCR": (100.0, 100.0), "MPA": (0.0, 100.0), "PRM": (50.0, 100.0), "TPG": (100.0, 0.0)}
QUALITY = {"ERA": (80 + 100) / 2, "RCR": (60 + 100) / 2, "MPA": 40.0, "PRM": 80.0, "TPG": 20.0}  # Eq. 3


@pytest.fixture(scope="module")
def scores(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    root = fixtures.small_run_set(tmp_path_factory.mktemp("runs"))
    runs = load_runs([root])
    return score_table(runs.records, runs.judgements, runs.memory, seed=0, reps=200)


def value(scores: pd.DataFrame, metric: str, task: str, memory: str = "raw_video") -> float:
    hit = scores[(scores["metric"] == metric) & (scores["task"] == task) & (scores["memory"] == memory)]
    assert len(hit) == 1, (metric, task, hit)
    return float(hit["value"].iloc[0])


def test_columns(scores: pd.DataFrame) -> None:
    assert list(scores.columns) == [
        "dataset",
        "memory",
        "backbone",
        "config_hash",
        "memory_config",
        "backbone_config",
        "memory_variant",
        "backbone_variant",
        "settings",
        "method_family",
        "tag",
        "ceiling",
        "streaming",
        "persistent",
        "representation",
        "judge",
        "metric",
        "task",
        "value",
        "n",
        "n_error",
        "n_unparsed",
        "n_unjudged",
        "ci_low",
        "ci_high",
        "n_planned",
        "coverage",
        "coverage_gap",
    ]
    assert set(scores["judge"]) == {"judge-x", ""}


@pytest.mark.parametrize(
    ("task", "expected"),
    [("ER", 100 / 4), ("EST", 100.0), ("TR", 0.0), ("ACR", 100.0), ("CT", 0.0), ("OCR", 100.0), ("STU", 100.0)],
)
def test_mcqa_accuracy(scores: pd.DataFrame, task: str, expected: float) -> None:
    assert value(scores, "task_score", task) == pytest.approx(expected)


def row(scores: pd.DataFrame, metric: str, task: str) -> pd.Series:
    hit = scores[(scores["metric"] == metric) & (scores["task"] == task)]
    assert len(hit) == 1, (metric, task, hit)
    return hit.iloc[0]


def test_errored_instances_count_as_wrong_and_the_answered_view_leaves_them_out(scores: pd.DataFrame) -> None:
    er = row(scores, "task_score", "ER")
    assert (er["n"], er["n_error"], er["n_unparsed"], er["n_unjudged"]) == (4, 1, 1, 0)
    answered = row(scores, "task_score_answered", "ER")
    assert answered["value"] == pytest.approx(100 / 3)
    assert (answered["n"], answered["n_error"]) == (3, 0)
    assert value(scores, "capability_score_answered", "cross_session") == pytest.approx(CROSS_ANSWERED)
    assert value(scores, "overall_answered", "all") == pytest.approx((CROSS_ANSWERED + PERCEPTION + ADAPTIVE) / 3)
    assert row(scores, "overall", "all")["n_error"] == 1


def test_errored_adaptive_probe_fails_the_gate(tmp_path: Path) -> None:
    probes = [
        fixtures.record("RCR", "R1", "p", polarity="positive", decision="INTERVENE", gate_pass=True, correct=None),
        fixtures.record(
            "RCR",
            "R1",
            "n",
            polarity="negative",
            decision=None,
            gate_pass=None,
            correct=None,
            parse_status=None,
            output="",
            error="HTTP 500",
        ),
    ]
    fixtures.write_run(tmp_path, probes, [fixtures.judgement(probes[0], 5)])
    runs = load_runs([tmp_path])
    scores = score_table(runs.records, runs.judgements, runs.memory, reps=0)
    assert value(scores, "task_score", "RCR") == pytest.approx(20 * (5 + 0) / 2)  # g = 0 for the errored probe
    assert value(scores, "task_score_answered", "RCR") == pytest.approx(100.0)
    assert value(scores, "decision_negative_rate", "RCR") == 0.0
    assert value(scores, "gate_pass_balanced", "RCR") == pytest.approx(50.0)
    assert value(scores, "format_failure_rate", "all") == 0.0
    assert value(scores, "errors", "all") == 1


def test_unjudged_probes_withhold_every_score_that_needs_them(tmp_path: Path) -> None:
    root = fixtures.small_run_set(tmp_path)
    judgements = root / "main" / "judgements" / "shard-0.jsonl"
    kept = [x for x in judgements.read_text().splitlines() if '"T1/R2/p"' not in x]
    judgements.write_text("\n".join(kept) + "\n")
    runs = load_runs([root])
    scores = score_table(runs.records, runs.judgements, runs.memory, reps=50)
    for metric, task in [
        ("task_score", "RCR"),
        ("response_quality", "RCR"),
        ("capability_score", "adaptive"),
        ("overall", "all"),
        ("response_quality", "adaptive"),
    ]:
        withheld = row(scores, metric, task)
        assert np.isnan(withheld["value"]) and np.isnan(withheld["ci_low"]), (metric, task)
        assert withheld["n_unjudged"] == 1
    assert value(scores, "task_score", "MPA") == pytest.approx(ADAPTIVE_SCORES["MPA"])
    assert value(scores, "decision_ba", "RCR") == pytest.approx(100.0)  # decisions need no judge


@pytest.mark.parametrize("task", list(ADAPTIVE_SCORES))
def test_gated_judge_score(scores: pd.DataFrame, task: str) -> None:
    assert value(scores, "task_score", task) == pytest.approx(ADAPTIVE_SCORES[task])


def test_capabilities_and_overall(scores: pd.DataFrame) -> None:
    assert value(scores, "capability_score", "cross_session") == pytest.approx(CROSS)
    assert value(scores, "capability_score", "perception") == pytest.approx(PERCEPTION)
    assert value(scores, "capability_score", "adaptive") == pytest.approx(ADAPTIVE)
    assert value(scores, "overall", "all") == pytest.approx((CROSS + PERCEPTION + ADAPTIVE) / 3)


@pytest.mark.parametrize("task", list(DECISION))
def test_decision_rates(scores: pd.DataFrame, task: str) -> None:
    p, n = DECISION[task]
    assert value(scores, "decision_positive_rate", task) == pytest.approx(p)
    assert value(scores, "decision_negative_rate", task) == pytest.approx(n)
    assert value(scores, "decision_ba", task) == pytest.approx((p + n) / 2)


def test_pooled_decision_rates(scores: pd.DataFrame) -> None:
    assert value(scores, "decision_positive_rate", "adaptive") == pytest.approx(100 * 5 / 7)
    assert value(scores, "decision_negative_rate", "adaptive") == pytest.approx(100 * 6 / 8)
    assert value(scores, "decision_ba", "adaptive") == pytest.approx((100 * 5 / 7 + 75) / 2)


@pytest.mark.parametrize("task", list(GATE))
def test_gate_pass_balanced(scores: pd.DataFrame, task: str) -> None:
    assert value(scores, "gate_pass_balanced", task) == pytest.approx(sum(GATE[task]) / 2)


@pytest.mark.parametrize("task", list(QUALITY))
def test_response_quality(scores: pd.DataFrame, task: str) -> None:
    assert value(scores, "response_quality", task) == pytest.approx(QUALITY[task])


def test_response_quality_average(scores: pd.DataFrame) -> None:
    assert value(scores, "response_quality", "adaptive") == pytest.approx(sum(QUALITY.values()) / 5)


def test_a_failure_judged_again_counts_as_judged(scores: pd.DataFrame) -> None:
    assert value(scores, "judge_failures", "RCR") == 0  # R1/n2 failed, then the next apm-judge judged it
    assert value(scores, "judge_failures", "adaptive") == 0


def test_a_failed_judgement_is_counted_and_withholds_its_scores(tmp_path: Path) -> None:
    probe = fixtures.record("RCR", "R1", "n1", polarity="negative", decision="SILENT", gate_pass=True)
    other = fixtures.record("RCR", "R1", "n2", polarity="negative", decision="SILENT", gate_pass=True)
    fixtures.write_run(tmp_path, [probe, other], [fixtures.judgement(probe, None, status="failed"),
                                                  fixtures.judgement(other, 5)])
    runs = load_runs([tmp_path])
    scores = score_table(runs.records, runs.judgements, runs.memory, reps=0)
    assert value(scores, "judge_failures", "RCR") == 1  # Table 7
    for metric in ("task_score", "response_quality"):  # never the other probe's 100 (nor a 0)
        assert np.isnan(value(scores, metric, "RCR")) and row(scores, metric, "RCR")["n_unjudged"] == 1


def test_format_failures_and_errors(scores: pd.DataFrame) -> None:
    assert value(scores, "format_failures", "all") == 2
    assert value(scores, "format_failures", "PRM") == 1
    assert value(scores, "format_failure_rate", "all") == pytest.approx(100 * 2 / 25)  # every instance counts
    assert value(scores, "format_failure_rate_answered", "all") == pytest.approx(100 * 2 / 24)
    assert value(scores, "errors", "all") == 1
    assert value(scores, "errors", "ER") == 1


def test_latency_means_skip_errors_and_missing(scores: pd.DataFrame) -> None:
    assert value(scores, "ttft_s", "all") == pytest.approx(25 / 23)
    assert value(scores, "latency_total_s", "all") == pytest.approx(2.0)
    assert value(scores, "rtf", "all") == pytest.approx(0.01)


def test_storage_per_hour_uses_peak_of_states_seen_later(scores: pd.DataFrame) -> None:
    # T1 shrinks: peak 300 B at 1.0 h (the last state, 999 B, is never read); T2 ties at 50 B, the
    # later (0.5 h) is taken; T3 has one session and no prior state.
    assert value(scores, "storage_bytes_per_hour", "all") == pytest.approx((300 / 1.0 + 50 / 0.5) / 2)
    assert value(scores, "peak_storage_bytes_mean", "all") == pytest.approx(175.0)
    assert value(scores, "peak_storage_bytes_max", "all") == pytest.approx(300.0)


def test_evidence_availability(scores: pd.DataFrame) -> None:
    assert value(scores, "ea_accuracy", "EA", "restricted") == pytest.approx(50.0)
    assert value(scores, "eu_accuracy", "EA", "restricted") == pytest.approx(200 / 3)
    assert value(scores, "ea_balanced", "EA", "restricted") == pytest.approx((50 + 200 / 3) / 2)
    # originals: X1 → ER C1 right, X2 → ER C2 wrong, X3 → EST S1 right; X4's is absent, X5 has none
    original = scores[(scores["metric"] == "ea_original_accuracy")]
    assert float(original["value"].iloc[0]) == pytest.approx(200 / 3)
    assert int(original["n"].iloc[0]) == 3


def test_intervals_bracket_values_and_counts_have_none(scores: pd.DataFrame) -> None:
    with_ci = scores.dropna(subset=["ci_low"])
    assert (with_ci["ci_low"] <= with_ci["value"] + 1e-9).all()
    assert (with_ci["value"] <= with_ci["ci_high"] + 1e-9).all()
    counts = scores[scores["metric"].isin(["errors", "format_failures", "judge_failures", "peak_storage_bytes_max"])]
    assert counts["ci_low"].isna().all()
    assert not scores.loc[scores["metric"] == "task_score", "ci_low"].isna().any()


def test_bootstrap_is_seeded(tmp_path: Path) -> None:
    runs = load_runs([fixtures.small_run_set(tmp_path)])
    tables = [score_table(runs.records, runs.judgements, runs.memory, seed=s, reps=100) for s in (1, 1, 2)]
    pd.testing.assert_frame_equal(tables[0], tables[1])
    assert not np.allclose(tables[0]["ci_low"].fillna(0), tables[2]["ci_low"].fillna(0))
    no_ci = score_table(runs.records, runs.judgements, runs.memory, reps=0)
    assert no_ci["ci_low"].isna().all()
    pd.testing.assert_series_equal(no_ci["value"], tables[0]["value"])


def test_judgement_selection_prefers_requested_judge(tmp_path: Path) -> None:
    rec = fixtures.record("RCR", "R1", "n1", polarity="negative", decision="SILENT", gate_pass=True)
    lines = [
        fixtures.judgement(rec, 2, judge="a"),
        fixtures.judgement(rec, 4, judge="b"),
        fixtures.judgement(rec, 1, judge="a", rubric_version="2"),
    ]
    fixtures.write_run(tmp_path, [rec], lines)
    assert load_judgements([tmp_path])["score"].tolist() == [1.0]  # the last line
    assert load_judgements([tmp_path], judge="b")["score"].tolist() == [4.0]
    assert load_judgements([tmp_path], judge="a", rubric_version="1")["score"].tolist() == [2.0]
    assert load_judgements([tmp_path], judge="nobody")["score"].tolist() == [1.0]


def test_an_ablation_sweep_reduces_together_one_method_per_config(tmp_path: Path) -> None:
    run = fixtures.run_info(memory="none", backbone="random")
    variant = {**run, "config_hash": "other", "overrides": {"memory.recent_frames": 8}}
    fixtures.write_run(tmp_path / "a", [fixtures.record("ER", "C1", run=run)])
    fixtures.write_run(tmp_path / "b", [fixtures.record("ER", "C1", run=variant, answer="B", correct=False)])
    runs = load_runs([tmp_path])
    scores = score_table(runs.records, runs.judgements, runs.memory, reps=0)
    er = scores[(scores["metric"] == "task_score") & (scores["task"] == "ER")].set_index("config_hash")
    assert er.loc[run["config_hash"], "value"] == 100.0 and er.loc["other", "value"] == 0.0
    assert er.loc["other", "memory_variant"] == "recent_frames=8" and er.loc[run["config_hash"], "memory_variant"] == ""


def test_truncated_last_line_is_skipped_with_warning(tmp_path: Path) -> None:
    path = fixtures.write_jsonl(tmp_path / "records" / "r.jsonl", [fixtures.record("ER", "C1")])
    with path.open("ab") as f:
        f.write(b'{"key": "T1/C2/qu')
    with pytest.warns(UserWarning, match="skipped 1 line.*unterminated last line"):
        assert len(load_runs([tmp_path]).records) == 1


def test_fixtures_follow_the_runner_schemas(tmp_path: Path) -> None:
    import jsonschema

    schemas = Path(__file__).resolve().parents[1] / "apm" / "records" / "schemas"
    fixtures.small_run_set(tmp_path / "small")
    fixtures.synthetic_run(tmp_path / "random", fixtures.run_info(), trajectories=2, seed=0)
    for kind, schema in (("records", "record"), ("memory", "memory")):
        validator = jsonschema.Draft202012Validator(json.loads((schemas / f"{schema}.schema.json").read_text()))
        lines = [json.loads(x) for f in sorted(tmp_path.rglob(f"{kind}/*.jsonl")) for x in f.read_text().splitlines()]
        assert lines and not [e.message for line in lines for e in validator.iter_errors(line)][:3]


def test_stale_judgement_of_a_rerun_response_is_ignored(tmp_path: Path) -> None:
    old = fixtures.record("RCR", "R1", "n1", polarity="negative", decision="SILENT", gate_pass=True, output="old")
    new = {**old, "output": "new"}
    fixtures.write_run(tmp_path, [old, new], [fixtures.judgement(old, 5)])
    runs = load_runs([tmp_path])
    assert runs.judgements.empty
    scores = score_table(runs.records, runs.judgements, runs.memory, reps=0)
    assert value(scores, "judge_failures", "RCR") == 0
    assert np.isnan(value(scores, "task_score", "RCR"))  # its only probe is unjudged: withheld, not 0
    assert row(scores, "task_score", "RCR")["n_unjudged"] == 1


def test_intervals_do_not_depend_on_the_order_lines_were_written(tmp_path: Path) -> None:
    root = fixtures.synthetic_run(tmp_path / "a", fixtures.run_info(), trajectories=3, seed=4)
    shuffled = tmp_path / "b"
    for kind in ("records", "judgements", "memory"):
        for f in sorted((root / kind).glob("*.jsonl")):
            lines = f.read_text().splitlines()
            np.random.default_rng(1).shuffle(lines)
            (shuffled / kind).mkdir(parents=True, exist_ok=True)
            (shuffled / kind / f.name).write_text("\n".join(lines) + "\n")
    a, b = (load_runs([r]) for r in (root, shuffled))
    ta, tb = (score_table(r.records, r.judgements, r.memory, seed=3, reps=100) for r in (a, b))
    key = ["metric", "task"]
    pd.testing.assert_frame_equal(
        ta.sort_values(key).reset_index(drop=True), tb.sort_values(key).reset_index(drop=True)
    )


def test_fast_weights_are_reported_apart_from_per_video_storage(scores: pd.DataFrame, tmp_path: Path) -> None:
    # B.4: fast weights (fast_weight_bytes) never enter Storage/hr or Table 10's peak; they have their own
    # peak. T1's states 0 and 1 are read later: bytes peak 200 B at 1.0 h; fast weights 800 B throughout.
    lines = [{**fixtures.memory_line("T1", i, 100 * (i + 1), 0.5 * (i + 1)), "fast_weight_bytes": 800}
             for i in range(3)]
    fixtures.write_run(tmp_path, [fixtures.record("ER", "C1")], memory=lines)
    runs = load_runs([tmp_path])
    fast = score_table(runs.records, runs.judgements, runs.memory, reps=0)
    assert value(fast, "storage_bytes_per_hour", "all") == value(fast, "peak_storage_bytes_max", "all") == 200.0
    assert value(fast, "peak_fast_weight_bytes_mean", "all") == value(fast, "peak_fast_weight_bytes_max", "all") == 800
    assert not scores["metric"].str.startswith("peak_fast_weight").any()  # a method without has no such row
