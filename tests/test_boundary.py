"""The process boundary (docs/boundary.md): a system run as a sealed child process produces what the same
system produces in process, sees only what the protocol hands it, and is refused or marked where it
tries for more. Adversaries live in tests/support/child_systems.py."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.errors import InstantiationException
from support.runner import compose_run, memory_records, run

import apm_child
from apm.backbones.fail_fast import RunStopped
from apm.boundary import ChildError, sandbox
from apm.cli.reduce import main as reduce_main
from apm.data.tasks import MCQA_TASKS
from apm.records.declaration import DEVIATIONS
from apm.records.jsonl import latest_records
from apm.runner.app import run_dir_of

TESTS = Path(__file__).resolve().parent
SUPPORT = TESTS / "support"
EXAMPLES = TESTS.parent / "examples"
SEALED = sandbox.landlock_abi() >= 1
needs_landlock = pytest.mark.skipif(not SEALED, reason="this kernel offers no Landlock")


def hydra(value: object) -> str:
    """``value`` in Hydra's override grammar (strings quoted)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list):
        return "[" + ",".join(hydra(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra(v)}" for k, v in value.items()) + "}"
    return str(value)


def child(system: str, options: dict | None = None, seal: str = "auto", **declared: object) -> list[str]:
    """Overrides running ``tests/support/child_systems.py:<system>`` (or an ``apm_child`` module's) as the
    run's memory, through the boundary, with this interpreter."""
    target = system if ":" in system else f"{SUPPORT / 'child_systems.py'}:{system}"
    declaration = {"family": "specialised", "streaming": True, "persistent": True, "representation": "", **declared}
    return ["memory=child_template", f"memory.command={hydra([sys.executable, '-m', 'apm_child', target])}",
            f"++memory.options={hydra(options or {})}", f"memory.read={hydra([str(SUPPORT)])}",
            f"memory.declaration={hydra(declaration)}", f"memory.seal={seal}", f"memory.name={system}"]


def by_key(run_dir: Path) -> dict[str, dict]:
    return latest_records(run_dir / "records")


def test_the_template_gives_the_in_process_examples_records_and_states(tiny, tmp_path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    example = run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", [
        f"hydra.searchpath=[file://{EXAMPLES / 'conf'}]", "memory=keyframe_stream", "backbone=perceiver"]))
    monkeypatch.setenv("APM_CHILD_PYTHON", sys.executable)
    boundary = run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", ["memory=child_template",
                                                                             "backbone=perceiver"]))
    ours, theirs = by_key(boundary), by_key(example)
    assert set(ours) == set(theirs) and len(ours) > 100
    fields = ("output", "prompt_sha256", "frames", "memory_sha256", "memory_bytes", "error")
    assert [k for k in ours if any(ours[k][f] != theirs[k][f] for f in fields)] == []
    lines = {(m["trajectory_id"], m["session_id"]): m for m in memory_records(boundary)}
    expected = {(m["trajectory_id"], m["session_id"]): m["state_sha256"] for m in memory_records(example)}
    assert {k: m["state_sha256"] for k, m in lines.items()} == expected
    assert {m["boundary"]["route"] for m in lines.values()} == {"child"}
    assert {m["boundary"]["sealed"] for m in lines.values()} == {"landlock" if SEALED else None}


@needs_landlock
def test_a_sealed_child_cannot_read_the_release_the_run_or_the_network(tiny, tmp_path) -> None:
    """The adversary that answered from candidates.jsonl (CS, Perception, Adaptive 100/100/100) reads
    nothing: the answer file, the run's config.json and a loopback port all refuse it."""
    run_dir = run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache",
                              [*child("Peeker", {"peek": str(tiny / "candidates.jsonl")}), "backbone=random"]))
    outputs = {r["output"] for r in by_key(run_dir).values()}
    assert outputs == {"PermissionError candidates.jsonl; PermissionError config.json; net PermissionError"}


def test_unsealed_the_same_adversary_reads_the_answers_and_its_rows_say_not_sealed(tiny, tmp_path) -> None:
    """Without a seal the attack works: which is why such a row is marked, in every record and label."""
    run_dir = run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache",
                              [*child("Peeker", {"peek": str(tiny / "candidates.jsonl")}, seal="off"),
                               "backbone=random"]))
    recs = list(by_key(run_dir).values())
    assert all(r["output"].startswith("read ") for r in recs)
    assert {r["run"]["declarations"]["memory"]["tag"] for r in recs} == {"not sealed"}
    assert {m["boundary"]["sealed"] for m in memory_records(run_dir)} == {None}


def test_each_restricted_visible_set_is_answered_by_a_fresh_process(tiny, tmp_path) -> None:
    """A class attribute survives every deepcopy in process (EU detection 100 -> 0); across the boundary
    each EA visible set is a new process, so it holds frames of its visible sessions only. Ids handed
    over are opaque; the session's seed arrives; the candidate's annotations do not."""
    run_dir = run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", [*child("Hoarder"), "backbone=random"]))
    recs = by_key(run_dir)
    ea = [r for r in recs.values() if r["task"] == "EA"]
    assert ea
    for r in recs.values():
        said = json.loads(r["output"])
        visible = r["visible_sessions"] if "visible_sessions" in r else None
        assert said["id"] not in r["key"] and len(said["id"]) == 16 and set(said["id"]) <= set("0123456789abcdef")
        assert set(said["fields"]) <= {"question", "choices", "query", "registration_event"}
        assert isinstance(said["seed"], int)
        if visible is not None:
            assert set(said["held"]) <= set(visible)
    pids = {json.loads(r["output"])["pid"] for r in ea} - {json.loads(r["output"])["pid"] for r in recs.values()
                                                           if r["task"] != "EA"}
    assert pids, "EA instances held back were answered by processes of their own"
    restricted = [json.loads(r["output"]) for r in ea if json.loads(r["output"])["pid"] in pids]
    assert restricted and all(len(s["held"]) <= 3 for s in restricted)


def refused(tiny: Path, tmp_path: Path, overrides: list[str]) -> dict[str, dict]:
    """The records of a run that must end refusing instances for causality."""
    cfg = compose_run(tiny, tmp_path / "runs", tmp_path / "cache", overrides)
    with pytest.raises(RunStopped, match="shown what they may not see"):
        run(cfg)
    return by_key(run_dir_of(cfg))


def test_a_request_with_a_frame_after_the_probe_is_refused(tiny, tmp_path) -> None:
    recs = refused(tiny, tmp_path, [*child("Meddler", {"attack": "future"}), "backbone=random"])
    assert {r["error"].split(":")[0] for r in recs.values()} == {"causality"}


def test_a_frame_by_reference_must_be_one_fed_in_the_session(tiny, tmp_path) -> None:
    """Frames the harness holds (fed, or sent once in the session) go back by reference (no bytes); a reference to any other is refused."""
    run_dir = run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache",
                              [*child("Meddler", {"attack": "reference"}), "backbone=random"]))
    errors = {r["error"] for r in by_key(run_dir).values()}
    assert errors and all("not a frame fed or sent in this session: send its bytes" in e for e in errors)


def test_a_child_that_dies_fails_its_session_and_the_run_goes_on(tiny, tmp_path) -> None:
    """Its instances record why, each session's update fails (``rerun=errors`` redoes it), and the next
    session starts a new child."""
    run_dir = run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", [*child("Crasher"), "backbone=random"]))
    recs = list(by_key(run_dir).values())
    assert recs and all("the child process exited (status 3)" in r["error"] for r in recs)
    lines = memory_records(run_dir)
    sessions = {(m["trajectory_id"], m["session_id"]) for m in lines}
    assert len(lines) == len(sessions) > 1
    probed = {(r["trajectory_id"], r["session_id"]) for r in recs}
    assert all(m["error"].startswith("export failed: ") for m in lines
               if (m["trajectory_id"], m["session_id"]) in probed)


def test_a_child_declaring_other_than_its_config_stops_the_run(tiny, tmp_path) -> None:
    with pytest.raises(ChildError, match="the child declares .* make them agree"):
        run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", [*child("Hoarder", persistent=False),
                                                                      "backbone=random"]))


@needs_landlock
def test_a_read_path_that_shows_the_release_stops_the_run_before_the_child_starts(tiny, tmp_path) -> None:
    overrides = [*child("Hoarder"), f"memory.read={hydra([str(tiny.parent)])}", "backbone=random"]
    with pytest.raises(sandbox.SealError, match="memory.read: the child would see"):
        run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", overrides))


def test_seal_landlock_without_landlock_is_one_line(tiny, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(sandbox, "landlock_abi", lambda: 0)
    with pytest.raises(InstantiationException, match="offers no Landlock"):
        run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", [*child("Hoarder", seal="landlock"),
                                                                      "backbone=random"]))


def test_the_child_package_runs_on_python_3_9_with_the_standard_library_only() -> None:
    package = Path(apm_child.__file__).parent
    for path in package.glob("*.py"):
        tree = ast.parse(path.read_text(), feature_version=(3, 9))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top in ("apm_child", "__future__"), (path.name, name)
    assert apm_child.PROTOCOL == __import__("apm.boundary.child", fromlist=["PROTOCOL"]).PROTOCOL
    assert tuple(apm_child.system.DEVIATIONS) == DEVIATIONS


def test_what_a_child_prints_never_reaches_the_protocol(tmp_path) -> None:
    script = tmp_path / "noisy.py"
    script.write_text("from apm_child.template import KeyframeTemplate\n"
                      "class Noisy(KeyframeTemplate):\n"
                      "    def __init__(self, **kw):\n"
                      "        print('hello from a library'); super().__init__(**kw)\n")
    hello = json.dumps({"op": "hello", "protocol": apm_child.PROTOCOL, "options": {}}) + "\n"
    done = subprocess.run([sys.executable, "-m", "apm_child", f"{script}:Noisy"], input=hello.encode(),
                          capture_output=True, timeout=60, cwd=Path(apm_child.__file__).parent.parent)
    assert json.loads(done.stdout.decode().splitlines()[0])["ok"]["protocol"] == apm_child.PROTOCOL
    assert b"hello from a library" in done.stderr


def test_in_process_the_answer_file_reader_scores_and_every_row_says_not_sealed(tiny, tmp_path) -> None:
    """In process nothing keeps a plug-in from the release: its answers come from candidates.jsonl, and
    what marks it is its rows: the record's declaration and every table's label say "not sealed"."""
    run_dir = run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", [
        "memory=none", "memory._target_=support.adversaries.AnswerFileReader", "~memory.recent_frames",
        "memory.name='Answer File Reader'", "backbone=random"]))
    recs = list(by_key(run_dir).values())
    mcqa = [r for r in recs if r["task"] in MCQA_TASKS]
    assert mcqa and all(r["correct"] for r in mcqa)
    assert {r["run"]["declarations"]["memory"]["tag"] for r in recs} == {"not sealed"}
    assert reduce_main([str(run_dir), "--out", str(tmp_path / "out"), "--bootstrap", "0"]) == 0
    table3 = (tmp_path / "out" / "tables" / "table3.md").read_text()
    assert "Answer File Reader · Random (baseline, not sealed)" in table3
