"""The JSON schemas of the lines a run writes are generated from one typed model (apm.records.model),
not kept by hand; real records of a run validate against them."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import get_args

import jsonschema
import pytest
from support.runner import compose_run, records, run

from apm.data.tasks import EA, TASKS
from apm.records.model import (
    MODELS,
    SCHEMAS,
    InstanceRecord,
    Latency,
    Task,
    json_schema,
    named,
    schema_text,
    write_schemas,
)
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


def test_the_fixture_record_follows_the_model_and_a_wrong_one_does_not() -> None:
    validator = jsonschema.Draft202012Validator(json_schema(InstanceRecord))
    record = fixtures.record("ER", "C1")
    assert not list(validator.iter_errors(record))
    assert list(validator.iter_errors({**record, "task": "XX"}))
    assert list(validator.iter_errors({**record, "unknown_field": 1}))  # the record is closed
    assert list(validator.iter_errors({k: v for k, v in record.items() if k != "shard"}))  # required
    assert not list(validator.iter_errors({k: v for k, v in record.items() if k != "revision"}))  # may be absent


def _first_column(doc: str, heading: str) -> set[str]:
    """The backticked names in the first column of the table under ``heading`` of docs/records.md."""
    section = doc.split(f"\n{heading}\n", 1)[1].split("\n#", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {name.strip("` ") for row in rows for name in row.split(",")}


@pytest.mark.parametrize(("heading", "model"), [("## Instance record", InstanceRecord),
                                                ("### Latency (Appendix B.3)", Latency)])
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
    required = {f.name for f in fields(InstanceRecord) if not f.metadata["absent_ok"]}
    assert set(fixtures.record("ER", "C1")) == required
    with pytest.raises(ValueError, match="^gate_passed: not a field"):
        fixtures.record("ER", "C1", gate_passed=True)  # a typo no longer makes a record with one field more


@pytest.mark.parametrize("overrides", [["memory=raw_video", "backbone=oracle"],
                                       ["memory=event_memory", "backbone=random"]])
def test_the_runner_writes_exactly_the_model_fields(tmp_path: Path, overrides: list[str]) -> None:
    """Every field of the model, none left out (even those older lines may lack) and none beside it."""
    release = generate(tmp_path / "rel", seed=3, scale="tiny")
    run_dir = run(compose_run(release, tmp_path / "runs", tmp_path / "cache", [*overrides, "backbone.max_frames=4"]))
    lines = records(run_dir)
    assert lines and all(set(line) == {f.name for f in fields(InstanceRecord)} for line in lines)
