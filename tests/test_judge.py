"""apm-judge: strict rubric JSON, retries of invalid replies, failed = missing, and the cache."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.runner import GOOD_JUDGEMENT, compose_run, records, run

from apm.api.judge import judge_backbone
from apm.judge.rubric import RUBRIC_VERSION, check_reply, guidance, rubric
from apm.judge.stage import JudgeStage
from apm.records.jsonl import read_folder
from apm.synth import generate


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("judge")
    tiny = generate(tmp / "tiny", seed=3, scale="tiny")
    return run(compose_run(tiny, tmp / "runs", tmp / "cache", ["memory=none", "backbone=oracle",
                                                               "dataset.tasks=[ERA,RCR,MPA,PRM,TPG,ER]"]))


def fake_judge(reply: str, monkeypatch, *overrides: str):
    proc = subprocess.Popen([sys.executable, "-m", "apm.testing.fake_server", "--port", "0", "--reply", reply],
                            stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline().split()[1])
    monkeypatch.setenv("APM_JUDGE_KEY", "k")
    judge = judge_backbone(["judge=deepseek_v4_flash", f"judge.base_url=http://127.0.0.1:{port}/v1",
                            "judge.api_key_env=APM_JUDGE_KEY", "judge.max_attempts=1", *overrides])
    return proc, judge


def judge_once(judge, run_dir: Path, retries: int = 2, **options):
    async def go():
        await judge.start()
        try:
            return await JudgeStage(judge, concurrency=4, invalid_retries=retries, **options).run([run_dir])
        finally:
            await judge.close()
    return asyncio.run(go())


def test_valid_judgements_are_cached_and_a_second_run_makes_no_call(oracle_run, monkeypatch):
    proc, judge = fake_judge(GOOD_JUDGEMENT, monkeypatch)
    try:
        gated = [r for r in records(oracle_run) if r["family"] == "adaptive"]
        first = judge_once(judge, oracle_run)
        assert first.judged == len(gated) > 0 and first.calls == len(gated) and first.failed == 0
        second = judge_once(judge, oracle_run)
        assert second.calls == 0 and second.cached == len(gated)
    finally:
        proc.terminate()
    judged = list(read_folder(oracle_run / "judgements"))
    assert {j["key"] for j in judged} == {r["key"] for r in gated}
    assert all(j["status"] == "ok" and j["score"] == 4 for j in judged)
    assert all(j["judge"] == "DeepSeek-V4-Flash" and j["rubric_version"] == RUBRIC_VERSION for j in judged)


def test_judge_cache_is_keyed_on_the_judge_model_not_its_display_name(oracle_run, monkeypatch, tmp_path):
    import shutil

    run_dir = tmp_path / "copy"
    shutil.copytree(oracle_run, run_dir, ignore=shutil.ignore_patterns("judgements"))
    n = len([r for r in records(run_dir) if r["family"] == "adaptive"])
    runs = {}
    for label, overrides in {"paper": (), "other model, same name": ("judge.model=deepseek-v9",),
                             "same model, new name": ("judge.name=Renamed judge",)}.items():
        proc, judge = fake_judge(GOOD_JUDGEMENT, monkeypatch, *overrides)
        try:
            runs[label] = judge_once(judge, run_dir)
        finally:
            proc.terminate()
    assert runs["paper"].calls == n > 0
    assert runs["other model, same name"].calls == n and runs["other model, same name"].cached == 0
    assert runs["same model, new name"].calls == 0 and runs["same model, new name"].cached == n
    judged = list(read_folder(run_dir / "judgements"))
    assert {(j["judge"], j["judge_model"], j["judge_snapshot"]) for j in judged} == {
        ("DeepSeek-V4-Flash", "deepseek-v4-flash", "deepseek-v4-flash-snapshot"),
        ("DeepSeek-V4-Flash", "deepseek-v9", "deepseek-v9-snapshot"),
    }


def test_invalid_replies_are_retried_then_recorded_as_failed(oracle_run, monkeypatch, tmp_path):
    import shutil

    run_dir = tmp_path / "copy"
    shutil.copytree(oracle_run, run_dir, ignore=shutil.ignore_patterns("judgements"))
    proc, judge = fake_judge('{"score": 6, "justification": "too high"}', monkeypatch)
    try:
        stats = judge_once(judge, run_dir, retries=2)
    finally:
        proc.terminate()
    n = len([r for r in records(run_dir) if r["family"] == "adaptive"])
    assert stats.failed == n and stats.calls == 3 * n and stats.judged == 0
    for j in read_folder(run_dir / "judgements"):
        assert j["status"] == "failed" and j["score"] is None  # missing, never 0
        assert j["error"].count("invalid reply") == 3


@pytest.mark.parametrize("reply,message", [
    ("not json", "not JSON as the rubric asks: \\(syntax\\)"),
    (GOOD_JUDGEMENT.replace('"score": 4', '"score": 4.0'), "integer 1-5"),
    (GOOD_JUDGEMENT.replace('"pass"', '"pass|partial|fail"', 1), "task_fidelity"),
    (GOOD_JUDGEMENT.replace('"critical_issues": [], ', ''), "keys must be exactly"),
    (json.dumps({**json.loads(GOOD_JUDGEMENT), "extra": 1}), "keys must be exactly"),
    (GOOD_JUDGEMENT.replace('"score": 4', '"score": 1, "score": 5'), "score: appears twice"),
    (GOOD_JUDGEMENT.replace('"pass"', '"fail", "task_fidelity": "pass"', 1), "task_fidelity: appears twice"),
])
def test_reply_must_be_exactly_the_rubric_json(reply, message):
    with pytest.raises(ValueError, match=message):
        check_reply(reply)
    assert check_reply(GOOD_JUDGEMENT).score == 4


def test_rubric_and_guidance_are_appendix_a3_verbatim(paper_excerpt):
    import re

    def squash(text: str) -> str:
        return re.sub(r"\s+", "", text)

    spec = squash(paper_excerpt)
    assert squash(rubric()) in spec
    for task in ("ERA", "RCR", "MPA", "PRM", "TPG"):
        assert squash(guidance(task)) in spec


def test_gate_only_reference_judge_scores_every_gate_pass_5(oracle_run, tmp_path):
    import shutil

    run_dir = tmp_path / "copy"
    shutil.copytree(oracle_run, run_dir, ignore=shutil.ignore_patterns("judgements"))
    stats = judge_once(judge_backbone(["judge=gate_only"]), run_dir)
    judged = list(read_folder(run_dir / "judgements"))
    assert stats.judged == len(judged) > 0 and {j["score"] for j in judged} == {5}
    assert {j["judge"] for j in judged} == {"Gate-only reference judge (no LLM)"}
    assert {(j["judge_model"], j["judge_snapshot"]) for j in judged} == {("apm.judge.reference.GateOnlyJudge", None)}


def test_judge_runs_inline_at_the_end_of_apm_run(tmp_path):
    tiny = generate(tmp_path / "tiny", seed=3, scale="tiny")
    run_dir = run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache",
                              ["memory=none", "backbone=oracle", "dataset.tasks=[RCR]", "judge=gate_only"]))
    judged = list(read_folder(run_dir / "judgements"))
    assert len(judged) == len(records(run_dir)) > 0 and {j["status"] for j in judged} == {"ok"}


def test_a_judge_outage_is_retried_on_the_next_run(oracle_run, monkeypatch, tmp_path):
    import shutil

    run_dir = tmp_path / "copy"
    shutil.copytree(oracle_run, run_dir, ignore=shutil.ignore_patterns("judgements"))
    monkeypatch.setenv("APM_JUDGE_KEY", "k")
    down = judge_backbone(["judge=deepseek_v4_flash", "judge.base_url=http://127.0.0.1:9/v1",
                           "judge.api_key_env=APM_JUDGE_KEY", "judge.max_attempts=1"])
    first = judge_once(down, run_dir, preflight=False, fail_fast=0)  # (fail-fast: tests/test_judge_trust.py)
    n = len([r for r in records(run_dir) if r["family"] == "adaptive"])
    assert first.failed == n and first.calls == n  # a transport failure is not retried as an invalid reply
    assert {j["failure"] for j in read_folder(run_dir / "judgements")} == {"backbone"}
    proc, judge = fake_judge(GOOD_JUDGEMENT, monkeypatch)
    try:
        second = judge_once(judge, run_dir)
    finally:
        proc.terminate()
    assert second.calls == n and second.judged == n and second.cached == 0


def test_a_judge_that_is_no_model_is_not_said_to_make_model_calls() -> None:
    """Issue 36 item 9: the gate-only reference judge calls no model, and the stage's line says so."""
    from apm.backbones.openai_api import OpenAIBackbone
    from apm.judge.reference import GateOnlyJudge
    from apm.judge.stage import JudgeStats, summary_line

    stats = JudgeStats(judged=3, calls=3)
    said = summary_line(GateOnlyJudge(), stats)
    assert "model calls" not in said and "no model called" in said
    assert "3 model calls" in summary_line(OpenAIBackbone(model="m", base_url="http://x/v1"), stats)
