"""Resume checks the memory state against the memory lines: a lost state folder, a lost state file
or a lost memory line is redone with every instance that saw it, and a redone update records the
state as of its own session."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from support.runner import compose_run, memory_records, records, run

from apm.backbones.base import Response
from apm.backbones.baselines import RandomBaseline
from apm.records.select import latest_by
from apm.runner.app import run_dir_of

OVERRIDES = ["memory=text_summary", "backbone=random", "+backbone@writer=random",
             "writer._target_=test_resume_state.SessionWriter", "dataset.tasks=[ER,PRM]"]
DAMAGED = "syn001"
"""The trajectory whose state the tests damage: it has instances in its sessions 1, 2 and 3."""


class SessionWriter(RandomBaseline):
    """A summary writer whose memory names its session; down for the session ``$APM_TEST_WRITER_DOWN``."""

    async def generate(self, request):
        down = os.environ.get("APM_TEST_WRITER_DOWN")
        if down and f"/{down}/" in request.request_id:
            return Response(error="HTTP 503: writer unavailable")
        memory = json.dumps({"memory": f"{request.request_id}: the mug went to the shelf"})
        return Response(text=memory, ttft_s=0.0, total_s=0.0)


@pytest.fixture(scope="module")
def clean(tiny, tmp_path_factory) -> Path:
    """An uninterrupted run: what every resumed run must end up with."""
    root = tmp_path_factory.mktemp("clean")
    return run(compose_run(tiny, root / "runs", root / "cache", OVERRIDES))


def _latest_memory(run_dir: Path) -> dict[tuple[str, int], dict]:
    return latest_by(memory_records(run_dir), lambda m: (m["trajectory_id"], m["session_index"]))


def _comparable(run_dir: Path) -> dict[str, tuple]:
    """Per key, what its newest record was shown: the prompt digest and the memory size."""
    return {k: (r["prompt_sha256"], r["memory_bytes"], r["error"])
            for k, r in latest_by(records(run_dir), lambda r: r["key"]).items()}


def _index_of(run_dir: Path) -> dict[tuple[str, str, str], int]:
    return {(m["trajectory_id"], m["day_id"], m["session_id"]): m["session_index"] for m in memory_records(run_dir)}


def _keep_lines(path: Path, keep) -> None:
    lines = [line for line in path.read_text().splitlines() if keep(json.loads(line))]
    path.write_text("".join(line + "\n" for line in lines))


def _copy(clean: Path, tiny: Path, root: Path) -> Path:
    """A copy of the clean run, where the same config in output root ``root / "runs"`` finds it."""
    run_dir = run_dir_of(compose_run(tiny, root / "runs", root / "cache", OVERRIDES))
    shutil.copytree(clean, run_dir)
    return run_dir


def _crash_after_session_1(run_dir: Path, index: dict) -> None:
    """What a job killed in the damaged trajectory's session 2 leaves: nothing of sessions 2 and 3."""
    later = lambda line: line["trajectory_id"] == DAMAGED and index[(DAMAGED, line["day_id"], line["session_id"])] >= 2  # noqa: E731
    for path in (run_dir / "records").glob("*.jsonl"):
        _keep_lines(path, lambda r: not later(r))
    for path in (run_dir / "memory").glob("*.jsonl"):
        _keep_lines(path, lambda m: not later(m))
    for note in (run_dir / "memory_state" / DAMAGED).glob("000[23]_*.txt"):
        note.unlink()


def _damage(run_dir: Path, how: str) -> None:
    state = run_dir / "memory_state" / DAMAGED
    if how == "folder":
        shutil.rmtree(state)
    elif how == "file":
        next(state.glob("0000_*.txt")).unlink()
    else:
        for path in (run_dir / "memory").glob("*.jsonl"):
            _keep_lines(path, lambda m: (m["trajectory_id"], m["session_index"]) != (DAMAGED, 0))


@pytest.mark.parametrize("how", ["folder", "file", "line"])
def test_lost_memory_state_is_redone_with_the_instances_that_saw_it(tiny, clean, tmp_path, how):
    run_dir = _copy(clean, tiny, tmp_path)
    _crash_after_session_1(run_dir, _index_of(clean))
    _damage(run_dir, how)
    run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", OVERRIDES))
    assert _comparable(run_dir) == _comparable(clean)  # every prompt carries its memory again
    assert len(records(run_dir)) == len(records(clean))  # and the redone state is the same: nothing else reran
    got, want = _latest_memory(run_dir), _latest_memory(clean)
    assert {k: m["bytes"] for k, m in got.items()} == {k: m["bytes"] for k, m in want.items()}
    assert sorted(p.name for p in (run_dir / "memory_state" / DAMAGED).iterdir()) == sorted(
        p.name for p in (clean / "memory_state" / DAMAGED).iterdir())


def test_a_redone_update_records_the_state_of_its_own_session(tiny, clean, tmp_path, monkeypatch):
    monkeypatch.setenv("APM_TEST_WRITER_DOWN", "DAY2/S003")
    run_dir = run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", OVERRIDES))
    failed = {k for k, m in _latest_memory(run_dir).items() if m["error"]}
    assert (DAMAGED, 2) in failed
    monkeypatch.delenv("APM_TEST_WRITER_DOWN")
    run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", [*OVERRIDES, "rerun=errors"]))
    got, want = _latest_memory(run_dir), _latest_memory(clean)
    assert all(got[k]["error"] is None for k in failed)
    assert {k: got[k]["bytes"] for k in failed} == {k: want[k]["bytes"] for k in failed}
    assert {k: m["bytes"] for k, m in got.items()} == {k: m["bytes"] for k, m in want.items()}
    assert _comparable(run_dir) == _comparable(clean)
