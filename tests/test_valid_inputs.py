"""Every valid input runs and every bad one is one line (issue 35): a FIFO in a run's folders, long or
odd session ids, damaged run files, a video outside the release."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.runner import GOOD_JUDGEMENT, compose_run, run, served

from apm.data.model import Trajectory
from apm.data.problems import ReleaseError
from apm.data.release import load_release
from apm.runner.streaming import keep_visible_state, visible_state_dir

BLOCKED_S = 60
"""Longer than any of these commands takes on the tiny run; a reader blocked on a FIFO never returns."""


@pytest.fixture(scope="module")
def oracle_run(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("inputs")
    overrides = ["memory=none", "backbone=oracle", "dataset.tasks=[ER,RCR]"]
    return run(compose_run(tiny, tmp / "runs", tmp / "cache", overrides))


def _run_cli(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``apm-<name> args`` as a user would (killed, failing the test, if it blocks)."""
    return subprocess.run(
        [sys.executable, "-m", f"apm.cli.{name}", *args],
        capture_output=True,
        text=True,
        timeout=BLOCKED_S,
        env={**os.environ, "WANDB_MODE": "disabled", "APM_JUDGE_KEY": "k"},
    )


def _command(name: str, *args: str) -> str:
    """``apm-<name> args``, which must succeed; what it said."""
    done = _run_cli(name, *args)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    return done.stdout + done.stderr


def _failing(name: str, *args: str) -> str:
    """``apm-<name> args``, which must refuse (exit 1 or 2, no traceback); what it said on stderr."""
    done = _run_cli(name, *args)
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr, done.stderr[-2000:]
    return done.stderr


def test_a_fifo_among_a_runs_files_is_skipped_unopened(oracle_run: Path, tmp_path: Path) -> None:
    """A FIFO named like a line file in ``records/``, ``judgements/`` and ``memory/``, and one in place of a
    kept prompt text, block no command: ``apm-judge``, ``apm-status``, ``apm-reduce`` and ``apm-view``
    finish, the readers naming it."""
    run_dir = shutil.copytree(oracle_run, tmp_path / "run")
    for kind in ("records", "judgements", "memory"):
        (run_dir / kind).mkdir(exist_ok=True)
        os.mkfifo(run_dir / kind / "zz-pipe.jsonl")
    for text in sorted((run_dir / "prompts").glob("*.txt")):
        text.unlink()
        os.mkfifo(text)
    with served(reply=GOOD_JUDGEMENT) as server:
        judged = _command(
            "judge",
            str(run_dir),
            "judge=deepseek_v4_flash",
            f"judge.base_url={server.base_url}",
            "judge.api_key_env=APM_JUDGE_KEY",
            "--no-preflight",
        )
    _command("status", str(run_dir))
    reduced = _command("reduce", str(run_dir), "--out", str(tmp_path / "out"), "--bootstrap", "0", "--no-figures")
    viewed = _command("view", str(run_dir), "--out", str(tmp_path / "site"))
    for said in (judged, reduced, viewed):
        assert "zz-pipe.jsonl" in said and "not a regular file (a FIFO)" in said, said[-2000:]


LONG_ID = "S" + "x" * 104
"""A session id the validator allows (120 characters at most as a file name) that named a 255+ byte folder."""


@pytest.mark.parametrize(
    "visible",
    [
        (f"DAY1/{LONG_ID}1", f"DAY1/{LONG_ID}2", f"DAY2/{LONG_ID}3"),
        (f"DAY1/{'%' * 40}", f"DAY2/{'é' * 40}", "DAY3/S3"),
    ],
)
def test_a_visible_sets_state_folder_has_a_usable_name(visible: tuple[str, ...], tmp_path: Path) -> None:
    """An EA instance's visible-set state folder (and its ``.built.json``) can be made for any valid ids."""
    state_dir = visible_state_dir(SimpleNamespace(run_dir=tmp_path), _trajectory("T1"), visible)
    state_dir.mkdir(parents=True)
    keep_visible_state(state_dir)
    assert state_dir.is_dir() and len(state_dir.name.encode()) <= 255 - len(".built.json")


def test_distinct_visible_sets_have_distinct_state_folders(tmp_path: Path) -> None:
    """Ids holding ``+``, ``-`` or ``%`` cannot make two visible sets share one state folder; plain ids keep
    the readable name earlier runs made (so a resumed run finds its folders)."""
    sets = [
        ("DAY1/S1+DAY1-S2", "DAY2/S9"),
        ("DAY1/S1", "DAY1/S2", "DAY2/S9"),
        ("DAY1/S1-DAY1", "DAY1/S2", "DAY2/S9"),
        ("DAY1/S1%2B", "DAY2/S9"),
        ("DAY1/S1+", "DAY2/S9"),
    ]
    names = {visible_state_dir(SimpleNamespace(run_dir=tmp_path), _trajectory("T1"), v).name for v in sets}
    assert len(names) == len(sets)
    plain = ("DAY1/S001", "DAY1/S002", "DAY2/S3")
    named = visible_state_dir(SimpleNamespace(run_dir=tmp_path), _trajectory("T1"), plain)
    assert named == tmp_path / "memory_state_visible" / "T1" / "DAY1-S001+DAY1-S002"


def _trajectory(trajectory_id: str) -> Trajectory:
    return Trajectory(trajectory_id, "synthetic", "", ())


DAMAGES = {
    "plan.json without keys": (
        "jobs/shard-0-of-1/plan.json",
        lambda d: {k: v for k, v in d.items() if k != "keys"},
        "field keys is missing",
    ),
    "plan.json keys not a list": (
        "jobs/shard-0-of-1/plan.json",
        lambda d: {**d, "keys": 5},
        "field keys is not a list of instance keys",
    ),
    "config.json without dataset": ("config.json", lambda d: {**d, "config": {}}, "field config.dataset is missing"),
    "config.json root not a string": (
        "config.json",
        lambda d: {**d, "config": {**d["config"], "dataset": {"root": 3}}},
        "field config.dataset.root is not a path",
    ),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_run_file_is_one_line_naming_file_field_and_fix(
    damage: str, oracle_run: Path, tmp_path: Path
) -> None:
    """A ``plan.json`` or ``config.json`` whose fields are damaged: each command that reads it says, in one
    line, which file, which field and how to rewrite it (never ``KeyError: 'keys'``)."""
    name, damaged, field = DAMAGES[damage]
    copy = tmp_path / "run"
    shutil.copytree(oracle_run, copy)
    path = copy / name
    path.write_text(json.dumps(damaged(json.loads(path.read_text()))))
    readers = (
        {"status": [str(copy)], "reduce": [str(copy), "--out", str(tmp_path / "out"), "--bootstrap", "0"]}
        if name.endswith("plan.json")
        else {
            "view": [str(copy), "--out", str(tmp_path / "site")],
            "judge": [str(copy), "judge=deepseek_v4_flash", "judge.base_url=http://127.0.0.1:9/v1", "--no-preflight"],
        }
    )
    for command, args in readers.items():
        said = _failing(command, *args)
        assert f"{path}: damaged: {field}" in said and "rerun" in said and len(said.strip().splitlines()) == 1, said


@pytest.mark.parametrize("link", ["file", "folder"])
def test_a_video_linked_outside_the_release_is_refused(tiny: Path, tmp_path: Path, link: str) -> None:
    """A session video (or its folder) that is a symlink out of the release: ``apm-data validate`` and the
    release loader refuse it, naming the session's video field; a link inside the release is fine."""
    release = tmp_path / "release"
    shutil.copytree(tiny, release)
    outside = tmp_path / "elsewhere"
    shutil.copytree(release / "videos" / "syn001", outside)
    if link == "file":
        video = release / "videos" / "syn001" / "DAY1_S001.mp4"
        video.unlink()
        video.symlink_to(outside / "DAY1_S001.mp4")
    else:
        shutil.rmtree(release / "videos" / "syn001")
        (release / "videos" / "syn001").symlink_to(outside)
    with pytest.raises(ReleaseError, match=r"sessions\[0\]\.video: .*outside the release"):
        load_release(release, check_videos=False)
    said = _failing("data", "validate", str(release))
    assert "outside the release" in said and "Traceback" not in said
    folder = release / "videos" / "syn001"
    shutil.move(outside, release / "inside")
    folder.unlink() if folder.is_symlink() else shutil.rmtree(folder)
    folder.symlink_to(release / "inside")
    assert load_release(release).trajectories
