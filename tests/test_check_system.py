"""``apm-check-system`` end to end: it passes on the reference systems, a plug-in from outside the
package and a memory protocol (whose stream checks are skipped, never passed), and fails with one clear
line on a system broken on purpose for each check (tests/support/spies.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import apm.runner.online as replay
from apm.check import checks
from apm.check.runs import Subject
from apm.check.system import CHECKS
from apm.cli.check_system import NAMES, main
from apm.runner.online import session_frames

TESTS = Path(__file__).resolve().parent
EXAMPLES = TESTS.parent / "examples"
SPIES = f"hydra.searchpath=[file://{TESTS / 'conf'}]"


CHECKED = ("PASS", "FAIL", "SKIP")
"""How a check's line starts; the command's other lines are ``USING`` (the backbone the runs used) and ``NOT
CHECKED`` (what it cannot see)."""


def printed(capsys, release: Path, work: Path, *args: str) -> tuple[int, list[str]]:
    """``apm-check-system`` as typed, in this process: its exit status and every line it printed."""
    status = main([*args, "--release", str(release), "--work", str(work)])
    return status, capsys.readouterr().out.splitlines()


def check(capsys, release: Path, work: Path, *args: str) -> tuple[int, dict[str, str]]:
    """``apm-check-system`` as typed, in this process: its exit status and each check's line by check name."""
    status, out = printed(capsys, release, work, *args)
    checked = [line for line in out if line.split(" ", 1)[0] in CHECKED]
    lines = {line.split(" ", 1)[1].split(":", 1)[0]: line for line in checked}
    assert len(lines) == len(checked), out  # one line per check
    assert all(line.startswith(("USING ", "NOT CHECKED ")) for line in out if line not in checked), out  # nothing else
    return status, lines


PASSING = [
    pytest.param("event_memory", [], "perceiver", id="event_memory"),  # the default backbone writes its memory too
    pytest.param("thought_memory", [], "perceiver", id="thought_memory"),
    pytest.param("keyframe_stream", [f"hydra.searchpath=[file://{EXAMPLES / 'conf'}]"], "perceiver",
                 id="examples-keyframe_stream"),  # it calls generate itself, as a plug-in may
    pytest.param("keyframe_stream", [f"hydra.searchpath=[file://{EXAMPLES / 'conf'}]", "--backbone", "my_backbone"],
                 "my_backbone", id="examples-keyframe_stream-my_backbone"),  # a plug-in backbone
]
"""A streaming system the command must pass, with its arguments (no --backbone: the default) and the backbone
its runs use; a new reference is one more line."""


@pytest.mark.slow
@pytest.mark.parametrize(("config", "args", "backbone"), PASSING)
def test_the_command_passes_on_the_references_and_a_plug_in(config, args, backbone, one, tmp_path, capsys,
                                                            monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    status, out = printed(capsys, one, tmp_path, config, *args)
    assert out[0].startswith(f"USING backbone={backbone}: "), out  # the output says which backbone the runs used
    checked = [line for line in out if line.split(" ", 1)[0] in CHECKED]
    assert [line.split(" ", 1)[1].split(":", 1)[0] for line in checked] == list(CHECKS), out
    assert all(line.startswith("PASS ") for line in checked), out
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
    ("schema", "MisreportingSpy", "not a valid line: MemoryLine: Expected `float`, got `str` - at `$.update_s`"),
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
    # the runner merges events by time: a repeat is what a feed can get wrong
    def repeated(cache, session, limit, previews=False):
        frames = list(session_frames(cache, session, limit, previews))
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
    parametric = {"declarations": {"memory": {"family": "specialised", "representation": "parametric"}}}
    line = {"run": parametric, "trajectory_id": "syn", "session_index": 0, "state": state, "bytes": 10,
            "fast_weight_bytes": 100}
    assert checks.state_bytes(tmp_path, [line], []) == []
    other = {**line, "run": {"declarations": {"memory": {"family": "specialised", "representation": ""}}}}
    assert checks.state_bytes(tmp_path, [{**other, "bytes": 110, "fast_weight_bytes": 0}], []) == []  # not apart
    added = {**line, "bytes": 110}  # the fast weights counted in per-video storage too: B.4 keeps them apart
    assert checks.state_bytes(tmp_path, [added], []) == [
        "syn: the last memory line says 110 bytes and 100 of fast weights, its files sum to 10 and 100 under "
        "fast_weights/"]
    unreported = {k: v for k, v in line.items() if k != "fast_weight_bytes"}
    assert checks.state_bytes(tmp_path, [unreported], []) == [
        "syn: the last memory line says 10 bytes and 0 of fast weights, its files sum to 10 and 100 under "
        "fast_weights/"]


@pytest.mark.slow
def test_the_default_backbone_of_a_system_inside_a_transformers_model_is_the_tiny_qwen2vl(one, tmp_path, capsys,
                                                                                       monkeypatch):
    monkeypatch.delenv("APM_TINY_MODEL", raising=False)
    monkeypatch.chdir(tmp_path)  # no out/tiny-qwen2vl here: the command builds the tiny model in its work folder
    status, out = printed(capsys, one, tmp_path / "work", "kv_cache", "dataset.tasks=[ER]", "--only", "run")
    built = tmp_path / "work" / "tiny-qwen2vl"
    assert out[0].startswith(f"USING backbone=tiny_qwen2vl_hf backbone.model={built} generation.max_tokens=8: "), out
    assert out[1].startswith("PASS run: "), out
    assert status == 0


RUN_FAILED = [
    pytest.param("kv_cache", ["--backbone", "random"], id="the run stopped"),  # refused at its first begin
    pytest.param("support.spies.CrashingSpy", [], id="every answer raised"),
]


@pytest.mark.parametrize(("config", "args"), RUN_FAILED)
def test_a_check_whose_run_failed_is_skipped_with_its_reason_never_passed(config, args, one, tmp_path, capsys):
    status, lines = check(capsys, one, tmp_path, config, *args)
    assert lines["run"].startswith("FAIL run: "), lines
    assert not [line for line in lines.values() if line.startswith("PASS ")], lines
    skipped = [line for line in lines.values() if line.startswith("SKIP ")]
    assert skipped and all("the full run failed" in line for line in skipped), lines
    assert status == 1


def test_a_skip_because_the_run_failed_is_a_non_zero_exit_even_alone(one, tmp_path, capsys):
    status, lines = check(capsys, one, tmp_path, "kv_cache", "--backbone", "random", "--only", "state-bytes")
    assert list(lines.values()) == [lines["state bytes"]] and lines["state bytes"].startswith("SKIP state bytes: ")
    assert status == 1


def test_a_failing_comparison_shows_the_values_that_differ():
    frames = [{"session": "DAY1/S001", "wall_clock": 10}]
    full = {"k": {"key": "k", "output": "", "error": None, "prompt_sha256": "a" * 64, "frames": frames}}
    part = {"k": {**full["k"], "prompt_sha256": "b" * 64, "frames": [{"session": "DAY1/S002", "wall_clock": 99}]}}
    (line,) = checks.non_mutating(full, part)
    assert "output" not in line, line  # the outputs are the same: saying ''  against '' shows nothing
    assert "prompt_sha256 'bbbbbbbbbbbb" in line and "against 'aaaaaaaaaaaa" in line, line
    assert "DAY1/S002" in line and "DAY1/S001" in line, line
    (line,) = checks.same_outcome(full, part, [], [], "losing records")
    assert "output" not in line and "prompt_sha256" in line and "DAY1/S002" in line, line
    long = {"k": {**full["k"], "output": "x" * 5000}}
    (line,) = checks.non_mutating(full, long)
    assert len(line) < 400 and "output 'xxxx" in line, line  # values are cut short, the line stays one line


def test_what_the_checklist_cannot_see_is_said_as_not_checked(one, tmp_path, capsys):
    status, out = printed(capsys, one, tmp_path, "support.spies.PixelSpy", "--only", "schema")
    unseen = [line for line in out if line.startswith("NOT CHECKED ")]
    assert any("annotations" in line for line in unseen), out  # it could read the release's files itself
    assert any("class or module attributes" in line for line in unseen), out  # its copies could share state
    assert all("cannot" in line for line in unseen), out
    assert status == 0  # what the checklist cannot see is said, never passed and never failed


def test_flags_and_overrides_combine_as_documented(one, tmp_path, capsys):
    args = ["support.spies.BackboneSpy", "--backbone", "perceiver", "backbone.max_frames=3", "memory.delay_s=0.01",
            "--only", "schema"]  # a flag before the overrides, as the docs' first example types it
    status, lines = check(capsys, one, tmp_path, *args)
    assert lines["schema"].startswith("PASS ") and status == 0, lines
    (config,) = (tmp_path / "full").rglob("config.json")
    cfg = json.loads(config.read_text())["config"]
    assert cfg["backbone"]["_target_"] == "apm.backbones.perceiver.PixelPerceiver"
    assert cfg["backbone"]["max_frames"] == 3 and cfg["memory"]["system"]["delay_s"] == 0.01


@pytest.mark.parametrize(("args", "says"), [
    (["--backbone", "perceiver", "backbone=random"], "backbone=random: the runs' backbone is named twice"),
    (["memory=raw_video"], "memory=raw_video: the system under check is CONFIG"),
    (["output_root=elsewhere"], "output_root=elsewhere: the checklist's runs go under --work"),
    (["dataset.root=elsewhere"], "dataset.root=elsewhere: give the release as --release"),
    (["generation.max_tokns=6"], "generation.max_tokns: no such key (did you mean generation.max_tokens?"),
    (["~memory.window"], "~memory.window: the system's config has no window to remove"),
])
def test_an_override_the_checklist_would_lose_is_refused_in_one_line(args, says, one, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where output_root=elsewhere would have written without the refusal
    work = tmp_path / "work"
    assert main(["support.spies.PixelSpy", *args, "--release", str(one), "--work", str(work)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("apm-check-system: error: ") and says in err and err.count("\n") == 1, err
    assert not work.exists()


def test_memory_settings_apply_in_order_over_the_config_as_hydra_reads_them():
    yaml = str(TESTS / "conf" / "memory" / "pixel_spy.yaml")
    subject = Subject.of(yaml, ["memory.delay_s=1e-3", "memory.delay_s=2e-3", "~memory.name"])
    assert subject.memory == {"_target_": "support.spies.PixelSpy", "delay_s": 0.002}  # the later wins; 2e-3 a number
    assert Subject.of("support.spies.PixelSpy", ["+memory.delay_s=0.5"]).memory["delay_s"] == 0.5
