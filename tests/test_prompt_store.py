"""What was sent is kept (issue 23, item 7): every text part of every request is stored once per distinct
digest beside the records, and each record's ``prompt`` rebuilds exactly what its ``prompt_sha256`` names —
for a memory protocol (both frame layouts) and for a streaming system, on real runs of the tiny release."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.runner import compose_run, records, run

from apm.records.prompts import (
    NOT_KEPT,
    PromptUnavailable,
    canon_digest,
    keep,
    reader,
    refs,
    restore,
    sent_text,
    text_digest,
)
from apm.records.rundir import RunDir
from apm.synth import generate

METHODS = {
    "raw_video": ["memory=raw_video", "backbone=oracle", "backbone.max_frames=8"],
    "session_stable": ["memory=raw_video", "backbone=oracle", "backbone.max_frames=8", "frames.layout=session_stable"],
    "event_memory": ["memory=event_memory", "backbone=oracle", "backbone.max_frames=8"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("prompts")
    tiny = generate(tmp / "tiny", seed=5, scale="tiny")
    return {name: run(compose_run(tiny, tmp / "runs" / name, tmp / "cache", overrides))
            for name, overrides in METHODS.items()}


@pytest.mark.parametrize("method", list(METHODS))
def test_each_record_rebuilds_the_prompt_its_digest_names(runs: dict[str, Path], method: str) -> None:
    run_dir = runs[method]
    lines = [r for r in records(run_dir) if r["prompt_sha256"]]
    assert lines
    for record in lines:
        canon = restore(record["prompt"], record["frames"], record["prompt_sha256"], reader(run_dir))
        assert canon_digest(canon) == record["prompt_sha256"]
        texts = [p for _, parts in canon for p in parts if isinstance(p, str)]
        assert canon[0][0] == "system" and texts and f"[Current time: {record['probe_time']}]" in texts[-1]


@pytest.mark.parametrize("method", list(METHODS))
def test_one_file_per_distinct_text_and_repeated_templates_cost_nothing(runs: dict[str, Path], method: str) -> None:
    run_dir = runs[method]
    named = {ref for r in records(run_dir) for _, parts in r["prompt"] or [] for ref in parts if isinstance(ref, str)}
    files = {p.stem for p in RunDir(run_dir).prompts.glob("*.txt")}
    assert files == named  # nothing left over, nothing missing
    for path in RunDir(run_dir).prompts.glob("*.txt"):
        assert text_digest(path.read_text(encoding="utf-8")) == path.stem
    total = sum(1 for r in records(run_dir) for _, parts in r["prompt"] or [] for ref in parts if isinstance(ref, str))
    assert len(files) < total  # the system prompt (at least) is one file for every record
    assert not list(RunDir(run_dir).prompts.glob(".*"))  # no temporary file left behind


def test_frames_stay_references_counted_in_order() -> None:
    canon = [["system", ["S"]], ["user", ["a", ["D1/S1", 0], ["D1/S1", 2.0], ["D1/S2", 1, "still"], "b"]]]
    assert refs(canon) == [["system", [text_digest("S")]],
                           ["user", [text_digest("a"), {"frames": 2}, {"stills": 1}, text_digest("b")]]]


def test_a_changed_or_missing_text_is_refused(tmp_path: Path) -> None:
    canon: list[list[Any]] = [["system", ["S"]], ["user", ["a", ["D1/S1", 0]]]]
    kept = keep(tmp_path, canon)
    frames = [{"session": "D1/S1", "offset": 0}]
    assert restore(kept, frames, canon_digest(canon), reader(tmp_path)) == canon
    with pytest.raises(PromptUnavailable, match="prompt_sha256"):
        restore(kept, [{"session": "D1/S1", "offset": 1}], canon_digest(canon), reader(tmp_path))
    (RunDir(tmp_path).prompts / f"{text_digest('a')}.txt").unlink()
    with pytest.raises(PromptUnavailable, match="FileNotFoundError"):
        restore(kept, frames, canon_digest(canon), reader(tmp_path))


def test_the_text_shown_is_what_was_sent_or_says_why_not(tmp_path: Path) -> None:
    canon: list[list[Any]] = [["system", ["S"]], ["user", ["a", ["D1/S1", 0], ["D1/S1", 2.0], ["D1/S2", 1, "still"],
                                                            "b"]]]
    frames = [{"session": "D1/S1", "offset": 0}, {"session": "D1/S1", "offset": 2.0}, {"session": "D1/S2", "offset": 1}]
    record = {"prompt": keep(tmp_path, canon), "frames": frames, "prompt_sha256": canon_digest(canon)}
    assert sent_text(record, reader(tmp_path)) == "[system]\nS\n\n[user]\na\n[2 frames]\n[1 stills]\nb"
    assert sent_text({**record, "prompt": None}, reader(tmp_path)) == NOT_KEPT
    (RunDir(tmp_path).prompts / f"{text_digest('b')}.txt").write_text("B", encoding="utf-8")
    assert sent_text(record, reader(tmp_path)) == ("not shown: the kept prompt does not reproduce the record's "
                                                   "prompt_sha256")
