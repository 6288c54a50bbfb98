"""One format version: every field of a line model is required, a line without ``format_version`` (written
before versions) is migrated on read by one step, and a line of a later version is refused in one line naming
its file (apm.records.version)."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import jsonschema
import pytest

from apm.cli import reduce as apm_reduce
from apm.records.declaration import Declaration
from apm.records.jsonl import JsonlAppender, read_folder
from apm.records.judging import signed, verifies
from apm.records.lines import Skipped, read_lines, read_typed
from apm.records.model import (
    MODELS,
    Capabilities,
    Choices,
    Declarations,
    FrameShown,
    InstanceRecord,
    Latency,
    RunBlock,
    StateFile,
    Tokens,
    as_line,
    built,
    json_schema,
)
from apm.records.version import FORMAT_VERSION, FormatError
from apm.reduce.load import load_judgements, load_memory, load_records
from apm.testing import fixtures

OLD_RUN = {
    "dataset": "apm",
    "memory": "raw_video",
    "backbone": "b",
    "config_hash": "0123456789ab",
    "declarations": {
        "memory": {"family": "general", "streaming": False, "persistent": True, "tag": ""},
        "backbone": None,
    },
}
"""A run block of a line written before versions: no release, code, choices, overrides or capabilities,
declarations without ``ceiling``, ``representation``, ``deviations`` or a ``writer``."""


def _old_record() -> dict:
    """A record as an older runner wrote it: no ``format_version`` and none of the fields that came later."""
    later = {"format_version", "prompt", "memory_sha256", "written_ns", "revision"}
    line = {k: v for k, v in fixtures.record("ER", "C1").items() if k not in later}
    latency = {k: v for k, v in line["latency"].items() if k not in {"encode_s", "ttft_from", "update_s", "observe_s"}}
    return {**line, "run": OLD_RUN, "latency": latency}


def _old_memory_line() -> dict:
    later = {"format_version", "fast_weight_bytes", "writer_parse_status", "writer_total_s", "written_ns", "revision"}
    line = {k: v for k, v in fixtures.memory_line("T1", 0, 100, 1.0).items() if k not in later}
    return {**line, "run": OLD_RUN}


def test_no_field_of_a_line_model_may_be_absent() -> None:
    """No ``absent_ok`` is left: every field of every model (nested blocks included) is required."""
    parts = (RunBlock, Choices, Capabilities, Declarations, Declaration, FrameShown, Latency, Tokens, StateFile)
    assert all("absent_ok" not in f.metadata for m in parts for f in fields(m))
    for name, model in MODELS.items():
        schema = json_schema(model)
        assert set(schema["required"]) == {f.name for f in fields(model)}, name
        assert all(
            set(d.get("required", [])) == set(d.get("properties", {}))
            for d in schema["$defs"].values()
            if d.get("type") == "object"
        ), name
        assert all("absent_ok" not in f.metadata for f in fields(model)), name
        assert schema["properties"]["format_version"] == {"enum": [FORMAT_VERSION]}


def test_a_line_without_a_version_is_migrated_to_a_valid_line(tmp_path: Path) -> None:
    path = fixtures.write_jsonl(tmp_path / "records" / "shard-0.jsonl", [_old_record()])
    (line,) = read_lines(path, "records")
    assert "format_version" not in line  # migrated, not relabelled: the line says what it was
    valid = {**line, "format_version": FORMAT_VERSION}
    assert not list(jsonschema.Draft202012Validator(json_schema(InstanceRecord)).iter_errors(valid))
    assert (line["written_ns"], line["revision"], line["memory_sha256"], line["latency"]["encode_s"]) == (
        0,
        0,
        None,
        None,
    )
    assert line["run"]["release_fingerprint"] is None and line["run"]["declarations"]["writer"] is None
    assert line["run"]["declarations"]["memory"]["deviations"] == []


def test_both_readers_migrate_alike(tmp_path: Path) -> None:
    """The typed reader (apm-reduce's) fills what the line reader fills: a memory line from before fast weights
    were measured apart has none (0), not an unknown amount."""
    fixtures.write_run(tmp_path, [], memory=[_old_memory_line()])
    path = tmp_path / "memory" / "shard-0.jsonl"
    (line,) = read_lines(path, "memory")
    typed = read_typed(path, "memory", ("fast_weight_bytes",))
    assert line["fast_weight_bytes"] == typed.lines[0].fast_weight_bytes == 0
    assert typed.lines[0].written_ns == line["written_ns"] == 0
    assert typed.runs[typed.run_of[0]] == line["run"] and "code" in line["run"]
    assert load_memory([tmp_path])["fast_weight_bytes"].tolist() == [0.0]


@pytest.mark.parametrize("version", [FORMAT_VERSION + 1, 99])
def test_a_line_of_a_later_version_is_refused_naming_its_file(tmp_path: Path, version: int) -> None:
    lines = [fixtures.record("ER", "C1"), {**fixtures.record("ER", "C2"), "format_version": version}]
    path = fixtures.write_jsonl(tmp_path / "records" / "shard-0.jsonl", lines)
    for read in (
        lambda: list(read_lines(path, "records")),
        lambda: read_typed(path, "records"),
        lambda: load_records([tmp_path]),
    ):
        with pytest.raises(FormatError, match=f"^{path}:2: format_version {version} is not one this apm reads"):
            read()


def test_apm_reduce_refuses_a_later_version_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    fixtures.write_run(tmp_path / "run", [{**fixtures.record("ER", "C1"), "format_version": FORMAT_VERSION + 1}])
    assert (
        apm_reduce.main([str(tmp_path / "run"), "--out", str(tmp_path / "out"), "--bootstrap", "0", "--no-figures"])
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "format_version 2 is not one this apm reads" in err and "shard-0.jsonl:1" in err
    assert not (tmp_path / "out").exists()


def test_a_damaged_version_is_skipped_like_any_damaged_field(tmp_path: Path) -> None:
    path = fixtures.write_jsonl(tmp_path / "r.jsonl", [{**fixtures.record("ER", "C1"), "format_version": "one"}])
    skipped: list[Skipped] = []
    assert not list(read_lines(path, "records", skipped))
    assert [s.reason for s in skipped] == ["format_version: not a format version this apm reads ('one')"]


def test_a_line_is_written_from_its_model_object(tmp_path: Path) -> None:
    """The writer builds the model object (refusing what the model refuses) and writes it: the line read back
    is the object's."""
    record = {k: v for k, v in fixtures.record("ER", "C1").items() if k not in ("written_ns", "revision")}
    out = JsonlAppender(tmp_path / "r.jsonl")
    written = out.append_line(InstanceRecord, record)
    for wrong, why in (
        ({**record, "task": "XX"}, "task"),
        ({**record, "extra": 1}, "extra"),
        ({k: v for k, v in record.items() if k != "shard"}, "shard"),
        ({**record, "run": {**record["run"], "nick": "x"}}, "a block"),
    ):
        with pytest.raises(ValueError, match=why):
            out.append_line(InstanceRecord, wrong)
    out.close()
    (line,) = [json.loads(raw) for raw in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert line == written == as_line(built(InstanceRecord, line))
    assert built(InstanceRecord, line).run.declarations.memory == Declaration("general", False, True)  # type: ignore
    assert list(line) == [f.name for f in fields(InstanceRecord)]


def test_a_judgement_without_a_version_still_verifies_as_written(tmp_path: Path) -> None:
    """Migration fills what the line lacks, but its content digest covers the line as written: the reducer and
    the judge verify it as written (a judge's line of today has no ``format_version`` and a run block without
    ``declarations.writer``, which migration adds), so no judgement on record is lost by reading it."""
    rec = fixtures.judged_record("C1", run=OLD_RUN)
    written = {k: v for k, v in fixtures.judgement(rec, 4).items() if k not in ("format_version", "content_sha256")}
    fixtures.write_run(tmp_path, [rec], [signed(written)])
    judgements = load_judgements([tmp_path])
    assert judgements["score"].tolist() == [4.0]
    (line,) = read_folder(tmp_path / "judgements", as_written=True)
    assert verifies(line) and not verifies(next(read_folder(tmp_path / "judgements")))
