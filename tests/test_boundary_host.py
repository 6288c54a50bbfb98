"""Any in-process streaming system runs unchanged behind the process boundary (apm/boundary/host.py,
conf/memory/hosted.yaml): the five reference systems give, hosted in a sealed child process, the records
and memory states they give in process; a system that shows the future is refused hosted as in process."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from support.runner import compose_run, memory_records, run

from apm.backbones.fail_fast import RunStopped
from apm.boundary import sandbox
from apm.records.jsonl import latest_records
from apm.runner.app import run_dir_of

pytestmark = pytest.mark.slow
TESTS = Path(__file__).resolve().parent
SEALED = sandbox.landlock_abi() >= 1
FIELDS = ("output", "prompt_sha256", "frames", "memory_sha256", "memory_bytes", "error")
"""What a record says the system answered and from what: the same through both routes."""
TASKS = "dataset.tasks=[ER,ERA,PRM,EA]"
"""Questions, heartbeats with the current session's turns, a registration said in an earlier session (a
turn a system keeps and shows), and EA (a fresh copy, hosted a fresh process, per visible set)."""
ON_THE_MODEL = ("kv_cache", "feature_memory", "parametric_memory")
"""The references that work on the run's transformers model: the child loads its own copy."""
THROUGH_THE_BACKBONE = ("event_memory", "thought_memory")
"""The references that answer through the run's backbone and write with its writer (the harness's)."""


def hosted(name: str) -> list[str]:
    """Overrides running the memory option ``name`` hosted in a child process."""
    return ["memory=hosted", f"+memory@memory.system={name}"]


def engines(name: str, model: Path) -> list[str]:
    if name in ON_THE_MODEL:
        return ["backbone=tiny_qwen2vl_hf", f"backbone.model={model}", "generation.max_tokens=6"]
    return ["backbone=perceiver", "+backbone@writer=perceiver"]


def states(run_dir: Path) -> dict[tuple[str, str], str]:
    return {(m["trajectory_id"], m["session_id"]): m["state_sha256"] for m in memory_records(run_dir)}


@pytest.mark.parametrize("name", [*ON_THE_MODEL, *THROUGH_THE_BACKBONE])
def test_a_reference_gives_the_same_records_and_states_hosted_as_in_process(name, one, cache, tiny_model, tmp_path):
    overrides = [*engines(name, tiny_model), TASKS]
    direct = run(compose_run(one, tmp_path / "direct", cache, [f"memory={name}", *overrides]))
    behind = run(compose_run(one, tmp_path / "hosted", cache, [*hosted(name), *overrides]))
    ours, theirs = latest_records(behind / "records"), latest_records(direct / "records")
    assert set(ours) == set(theirs) and {r["task"] for r in ours.values()} == {"ER", "ERA", "PRM", "EA"}
    assert all(r["error"] is None and r["prompt_sha256"] and r["frames"] for r in theirs.values())
    assert {k: [ours[k][f] for f in FIELDS] for k in ours} == {k: [theirs[k][f] for f in FIELDS] for k in theirs}
    assert states(behind) == states(direct) and len(states(direct)) == 4
    lines = memory_records(behind)
    assert {m["boundary"]["route"] for m in lines} == {"child"}
    assert {m["boundary"]["sealed"] for m in lines} == {"landlock" if SEALED else None}
    assert {m["boundary"]["child"]["hosted"] for m in lines} == {json.loads(
        (direct / "config.json").read_text())["config"]["memory"]["_target_"]}
    declared = {r["run"]["declarations"]["memory"]["representation"] for r in ours.values()}
    assert declared == {theirs[next(iter(theirs))]["run"]["declarations"]["memory"]["representation"]} != {""}


def refused(one: Path, out: Path, cache: Path, overrides: list[str]) -> dict[str, dict]:
    """The records of a run that must end refusing instances for causality (random baseline, ER)."""
    cfg = compose_run(one, out, cache, [*overrides, "backbone=random", "dataset.tasks=[ER]"])
    with pytest.raises(RunStopped, match="shown what they may not see"):
        run(cfg)
    return latest_records(run_dir_of(cfg) / "records")


@pytest.mark.parametrize("show", ["note", "frame"])
def test_a_system_that_shows_the_future_is_refused_hosted_as_in_process(show, one, cache, tmp_path):
    """``support.adversaries.StreamedFuture`` shows a later session's note (and, refused, catches the
    refusal and answers anyway) or says its answer drew on a frame after the probe. Hosted, ``probe.request``
    raises the harness's refusal in the child, and the frames an answer drew on cross with it: refused
    all the same, with the same errors."""
    target = "support.adversaries.StreamedFuture"
    direct = refused(one, tmp_path / "direct", cache, ["memory=none", f"memory._target_={target}",
                                                       "~memory.recent_frames", f"+memory.show={show}"])
    behind = refused(one, tmp_path / "hosted", cache, [
        "memory=hosted", f"memory.system={{_target_:{target},show:{show}}}",
        f"++memory.env={{PYTHONPATH:'{TESTS}'}}", f"memory.read=['{TESTS}']"])
    assert set(behind) == set(direct) and direct
    assert all(r["error"].startswith("causality: ") for r in behind.values())
    assert {k: r["error"] for k, r in behind.items()} == {k: r["error"] for k, r in direct.items()}


def test_a_hosted_system_is_declared_as_its_class_declares_itself() -> None:
    """The run's declaration (Table 3's columns, the representation, the tag) is the hosted class's; a
    config that is not a streaming system's is refused in one line."""
    from apm.boundary.host import HostedSystem
    from apm.records.declaration import NOT_SEALED
    from apm.streaming.kv_cache import KVCacheMemory

    hosted_kv = HostedSystem({"_target_": "apm.streaming.kv_cache.KVCacheMemory", "top_k": 2})
    mine = KVCacheMemory.declaration
    assert mine is not None and hosted_kv.name == "KV-Cache Memory (child process)"
    tag = mine.tag if SEALED else f"{mine.tag}, {NOT_SEALED}"
    assert hosted_kv.declaration == replace(mine, tag=tag)
    assert hosted_kv.options["system"]["top_k"] == 2 and hosted_kv.options["backbone"] is None
    with pytest.raises(TypeError, match="not a StreamingSystem"):
        HostedSystem({"_target_": "apm.memory.simple.SimpleStream"})
