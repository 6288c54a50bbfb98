"""The JSON schemas of the lines a run writes are generated from one typed model (apm.records.model),
not kept by hand; real records of a run validate against them."""

from __future__ import annotations

import asyncio
import json
from dataclasses import fields
from pathlib import Path
from typing import get_args

import jsonschema
import pytest
from support.runner import compose_run, records, run

from apm.backbones.base import Request, Response
from apm.data.tasks import EA, TASKS
from apm.judge.reference import GateOnlyJudge
from apm.judge.rubric import CRITERIA
from apm.judge.stage import JudgeStage
from apm.records.model import (
    MODELS,
    SCHEMAS,
    Criterion,
    InstanceRecord,
    JudgementLine,
    Latency,
    MemoryLine,
    Task,
    as_line,
    built,
    json_schema,
    named,
    schema_text,
    write_schemas,
)
from apm.records.rundir import RunDir
from apm.synth import generate
from apm.testing import fixtures


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_committed_schema_is_the_generated_one(name: str) -> None:
    """Regenerate with ``python -m apm.records.model`` after changing the model."""
    assert (SCHEMAS / name).read_text(encoding="utf-8") == schema_text(MODELS[name])


def test_write_schemas_writes_what_the_model_generates(tmp_path) -> None:
    written = write_schemas(tmp_path)
    assert {p.name for p in written} == set(MODELS)
    assert all(json.loads(p.read_text()) == json_schema(MODELS[p.name]) for p in written)


def test_the_model_knows_every_task_of_the_release() -> None:
    assert set(get_args(Task)) == {*TASKS, EA}


def test_the_model_knows_every_value_a_criterion_check_may_take() -> None:
    assert set(get_args(Criterion)) == {v for allowed in CRITERIA.values() for v in allowed}


def test_the_fixture_record_follows_the_model_and_a_wrong_one_does_not() -> None:
    validator = jsonschema.Draft202012Validator(json_schema(InstanceRecord))
    record = fixtures.record("ER", "C1")
    assert not list(validator.iter_errors(record))
    assert list(validator.iter_errors({**record, "task": "XX"}))
    assert list(validator.iter_errors({**record, "unknown_field": 1}))  # the record is closed
    assert list(validator.iter_errors({k: v for k, v in record.items() if k != "shard"}))  # required
    assert list(validator.iter_errors({k: v for k, v in record.items() if k != "revision"}))  # every field is


def _first_column(doc: str, heading: str) -> set[str]:
    """The backticked names in the first column of the table under ``heading`` of docs/records.md."""
    section = doc.split(f"\n{heading}\n", 1)[1].split("\n#", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {name.strip("` ") for row in rows for name in row.split(",")}


@pytest.mark.parametrize(("heading", "model"), [("## Instance record", InstanceRecord),
                                                ("### Latency (Appendix B.3)", Latency),
                                                ("## Judgement line (`judgements/*.jsonl`)", JudgementLine)])
def test_the_records_doc_lists_exactly_the_model_fields(heading: str, model: type) -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "records.md").read_text(encoding="utf-8")
    assert _first_column(doc, heading) == {f.name for f in fields(model)}


def test_hand_picked_columns_are_checked_against_the_model() -> None:
    assert named(InstanceRecord, "gate_pass", "latency.ttft_s", "run.config_hash") == (
        "gate_pass", "latency.ttft_s", "run.config_hash")
    for wrong in ("gate_passed", "latency.ttft", "key.inner", "run.nowhere"):
        with pytest.raises(ValueError, match=f"^{wrong}: not a field of InstanceRecord"):
            named(InstanceRecord, "key", wrong)


def test_the_fixture_record_has_exactly_the_fields_every_line_must_have() -> None:
    assert set(fixtures.record("ER", "C1")) == set(json_schema(InstanceRecord)["required"])
    assert built(InstanceRecord, fixtures.record("ER", "C1"))
    with pytest.raises(ValueError, match="^gate_passed: not a field"):
        fixtures.record("ER", "C1", gate_passed=True)  # a typo no longer makes a record with one field more


@pytest.mark.parametrize("overrides", [["memory=raw_video", "backbone=oracle"],
                                       ["memory=event_memory", "backbone=random"]])
def test_the_runner_writes_exactly_the_model_fields(tmp_path: Path, overrides: list[str]) -> None:
    """Every field of the model, none left out and none beside it, written from the model object: each line is
    the object it builds, field for field in the model's order (a dict patched after it was made is not)."""
    release = generate(tmp_path / "rel", seed=3, scale="tiny")
    run_dir = run(compose_run(release, tmp_path / "runs", tmp_path / "cache", [*overrides, "backbone.max_frames=4"]))
    lines = records(run_dir)
    assert lines and all(list(line) == [f.name for f in fields(InstanceRecord)] for line in lines)
    assert all(as_line(built(InstanceRecord, line)) == line for line in lines)
    memory = [json.loads(raw) for path in RunDir(run_dir).files("memory") for raw in path.read_text().splitlines()]
    assert memory and all(list(m)[: len(fields(MemoryLine))] == [f.name for f in fields(MemoryLine)] for m in memory)


class UnparseableJudge(GateOnlyJudge):
    """Replies what is not the rubric's JSON: every judgement it makes fails (``invalid_reply``)."""

    async def generate(self, request: Request) -> Response:
        return Response(text="not the rubric's JSON", finish_reason="stop")


@pytest.fixture(scope="module")
def judged_run(tmp_path_factory: pytest.TempPathFactory) -> RunDir:
    """A run judged inline by the gate-only judge (``ok`` lines), then by a judge whose replies never
    parse (``failed`` lines, its own file)."""
    tmp = tmp_path_factory.mktemp("judged")
    release = generate(tmp / "rel", seed=3, scale="tiny")
    run_dir = run(compose_run(release, tmp / "runs", tmp / "cache",
                              ["memory=none", "backbone=oracle", "dataset.tasks=[RCR]", "judge=gate_only"]))
    asyncio.run(JudgeStage(UnparseableJudge("Unparseable judge"), invalid_retries=1, preflight=False).run([run_dir]))
    return RunDir(run_dir)


def _judgement_lines(run: RunDir) -> list[dict]:
    return [json.loads(line) for path in run.files("judgements") for line in path.read_text().splitlines()]


def test_the_judge_writes_exactly_the_model_fields(judged_run: RunDir) -> None:
    """Every field of the judgement model, none left out and none beside it, written from the model object,
    on an ``ok`` judgement and on a failed one."""
    lines = _judgement_lines(judged_run)
    assert {line["status"] for line in lines} == {"ok", "failed"}
    assert all(list(line) == [f.name for f in fields(JudgementLine)] for line in lines)
    assert all(as_line(built(JudgementLine, line)) == line for line in lines)


def test_judgement_lines_validate_against_the_committed_schema(judged_run: RunDir) -> None:
    validator = jsonschema.Draft202012Validator(json.loads((SCHEMAS / "judgement.schema.json").read_text()))
    lines = _judgement_lines(judged_run)
    assert lines and all(not list(validator.iter_errors(line)) for line in lines)
    ok = next(line for line in lines if line["status"] == "ok")
    assert list(validator.iter_errors({**ok, "score": 6}))
    assert list(validator.iter_errors({**ok, "criterion_checks": {"usefulness": "good"}}))
    assert list(validator.iter_errors({**ok, "unknown_field": 1}))  # the line is closed
    assert list(validator.iter_errors({k: v for k, v in ok.items() if k != "cache_key"}))  # required
    assert list(validator.iter_errors({k: v for k, v in ok.items() if k != "content_sha256"}))  # every field is
