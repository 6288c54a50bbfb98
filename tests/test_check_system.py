"""``apm-check-system`` end to end: it passes on the reference systems, a plug-in from outside the
package and a memory protocol (whose stream checks are skipped, never passed), and fails with one clear
line on a system broken on purpose for each check (tests/support/spies.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

import apm.runner.online as replay
from apm.check import checks
from apm.check.system import CHECKS
from apm.cli.check_system import NAMES, main
from apm.runner.online import session_frames

TESTS = Path(__file__).resolve().parent
EXAMPLES = TESTS.parent / "examples"
SPIES = f"hydra.searchpath=[file://{TESTS / 'conf'}]"


def check(capsys, release: Path, work: Path, *args: str) -> tuple[int, dict[str, str]]:
    """``apm-check-system`` as typed, in this process: its exit status and each check's line by check name."""
    status = main([*args, "--release", str(release), "--work", str(work)])
    out = capsys.readouterr().out.splitlines()
    lines = {line.split(" ", 1)[1].split(":", 1)[0]: line for line in out}
    assert len(lines) == len(out), out  # one line per check, nothing else
    return status, lines


PASSING = [
    pytest.param("event_memory", ["+backbone@writer=random", "writer._target_=support.spies.SceneWriter"],
                 id="event_memory"),  # a writer that describes what it sees (random writes no memory)
    pytest.param("thought_memory", ["+backbone@writer=random", "writer._target_=support.spies.SceneWriter"],
                 id="thought_memory"),
    pytest.param("keyframe_stream", [f"hydra.searchpath=[file://{EXAMPLES / 'conf'}]", "--backbone", "my_backbone"],
                 id="examples-keyframe_stream"),
]
"""A streaming system the command must pass, with its arguments; a new reference is one more line."""


@pytest.mark.slow
@pytest.mark.parametrize(("config", "args"), PASSING)
def test_the_command_passes_on_the_references_and_a_plug_in(config, args, one, tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    status, lines = check(capsys, one, tmp_path, config, *args)
    assert list(lines) == list(CHECKS)
    assert all(line.startswith("PASS ") for line in lines.values()), lines
    assert status == 0


ON_MODEL_INTERNALS = ("kv_cache", "feature_memory", "parametric_memory")
"""The references that work inside the run's transformers backbone: checked on the tiny Qwen2-VL."""


@pytest.mark.slow
@pytest.mark.parametrize("config", ON_MODEL_INTERNALS)
def test_the_command_passes_on_the_references_inside_the_tiny_model(config, one, tiny_model, tmp_path, capsys):
    status, lines = check(capsys, one, tmp_path, config, f"backbone.model={tiny_model}", "generation.max_tokens=6",
                          "dataset.tasks=[ER,ERA,RCR,EA]", "--backbone", "tiny_qwen2vl_hf")
    assert all(line.startswith("PASS ") for line in lines.values()), lines
    assert list(lines) == list(CHECKS) and status == 0


PROTOCOLS = [
    pytest.param("raw_video", [], id="raw_video"),
    pytest.param("keyframes", [f"hydra.searchpath=[file://{EXAMPLES / 'conf'}]", "--backbone", "my_backbone"],
                 id="examples-keyframes"),
]


@pytest.mark.parametrize(("config", "args"), PROTOCOLS)
def test_a_memory_protocol_skips_the_stream_checks_and_passes_the_rest(config, args, tiny, tmp_path, capsys,
                                                                       monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    status, lines = check(capsys, tiny, tmp_path, config, *args)
    skipped = {"pixel causality", "order", "sigkill determinism"}
    assert {name for name, line in lines.items() if line.startswith("SKIP ")} == skipped
    assert all(lines[name].startswith("PASS ") for name in set(CHECKS) - skipped), lines
    assert status == 0


BROKEN = [
    ("run", "CrashingSpy", "answer failed: RuntimeError: no answer today"),
    ("pixel-causality", "FuturePeeker", "after the probe time"),
    ("non-mutating-answers", "LeakySpy", "answered differently when fewer probes were asked"),
    ("ea-restriction", "HoardingSpy", "not among the visible sessions"),
    ("state-bytes", "LitteringSpy", "scratch.tmp"),
    ("schema", "MisreportingSpy", "update_s: 'instant' is not of type 'number'"),
    ("resume", "DiceSpy", "after losing records, the record differs from the uninterrupted run's"),
    ("sigkill-determinism", "DiceSpy", "after a SIGKILL mid-session, the record differs"),
]
"""Each check, the system of tests/support/spies.py broken for it, and what its FAIL line says."""


@pytest.mark.parametrize(("only", "spy", "says"), BROKEN, ids=[b[0] for b in BROKEN])
def test_a_system_broken_for_a_check_fails_it_with_one_clear_line(only, spy, says, tiny, tmp_path, capsys):
    status, lines = check(capsys, tiny, tmp_path, f"support.spies.{spy}", "--only", only)
    (line,) = lines.values()
    assert line.startswith(f"FAIL {NAMES[only]}: ") and says in line, line
    assert status == 1


def test_the_same_system_passes_those_checks_when_it_is_not_broken(tiny, tmp_path, capsys):
    config = str(TESTS / "conf" / "memory" / "pixel_spy.yaml")  # a YAML path, as a user's plug-in is given
    status, lines = check(capsys, tiny, tmp_path, config)
    assert list(lines) == list(CHECKS) and all(line.startswith("PASS ") for line in lines.values()), lines
    assert status == 0


def test_a_feed_that_repeats_a_frame_fails_the_order_check(tiny, tmp_path, capsys, monkeypatch):
    def repeated(cache, session, limit):  # the runner merges events by time: a repeat is what a feed can get wrong
        frames = list(session_frames(cache, session, limit))
        frames[4] = frames[3]
        return tuple(frames)

    monkeypatch.setattr(replay, "session_frames", repeated)
    status, lines = check(capsys, tiny, tmp_path, "support.spies.PixelSpy", "--only", "order")
    assert lines["order"].startswith("FAIL order: ") and "frame 4 of a replay showed second" in lines["order"]
    assert status == 1


@pytest.mark.parametrize(("args", "says"), [
    (["nonesuch"], "memory=nonesuch: no such option (did you mean none?)"),
    (["missing.yaml"], "missing.yaml: no such YAML file"),
    (["no_module.System"], "memory._target_='no_module.System' cannot be imported"),
    (["support.spies.PixelSpy", "memory.delay=1"], "memory.delay: support.spies.PixelSpy takes no such argument "
                                                     "(did you mean delay_s?)"),
])
def test_a_config_that_cannot_work_is_one_line_and_writes_nothing(args, says, tiny, tmp_path, capsys):
    work = tmp_path / "work"
    assert main([*args, "--release", str(tiny), "--work", str(work)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("apm-check-system: error: ") and says in err and err.count("\n") == 1, err
    assert not work.exists()


def test_an_unknown_check_is_one_line(tiny, tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["support.spies.PixelSpy", "--only", "speed", "--release", str(tiny), "--work", str(tmp_path / "w")])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.startswith("apm-check-system: error: argument --only: no check speed")
    assert not (tmp_path / "w").exists()


def _held(root: Path, files: dict[str, bytes]) -> dict[str, dict[str, int]]:
    """Write ``files`` under ``root/syn`` and return them as a memory line's ``state`` measures them."""
    for name, data in files.items():
        (root / "syn" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "syn" / name).write_bytes(data)
    return {name: {"bytes": len(data)} for name, data in files.items()}


def test_the_state_bytes_check_counts_fast_weights_apart_as_b4_does(tmp_path):
    state = _held(tmp_path, {"notes.json": b"x" * 10, "fast_weights/lora.safetensors": b"w" * 100})
    line = {"trajectory_id": "syn", "session_index": 0, "state": state, "bytes": 10, "fast_weight_bytes": 100}
    assert checks.state_bytes(tmp_path, [line], []) == []
    added = {**line, "bytes": 110}  # the fast weights counted in per-video storage too: B.4 keeps them apart
    assert checks.state_bytes(tmp_path, [added], []) == [
        "syn: the last memory line says 110 bytes and 100 of fast weights, its files sum to 10 and 100 under "
        "fast_weights/"]
    unreported = {k: v for k, v in line.items() if k != "fast_weight_bytes"}
    assert checks.state_bytes(tmp_path, [unreported], []) == [
        "syn: the last memory line says 10 bytes and 0 of fast weights, its files sum to 10 and 100 under "
        "fast_weights/"]
