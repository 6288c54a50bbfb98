"""Ids are data, never paths: every path built from an id stays directly inside its folder, and the
validator refuses ids that are path-like, unprintable or that file systems would merge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.release import mutated, write_release

from apm.cli.data import main as apm_data
from apm.data.ids import PLAIN, fold, id_path, id_problem, session_path
from apm.data.model import Session
from apm.synth import generate

REPO = Path(__file__).resolve().parents[1]
HOSTILE = ["/abs/dir", "../x", "x", "x/", "x\\y", ".", "..", "...", "a\x00b", "a\nb", "S*", "[ab]", "é", "e\u0301",
           "%2F", "\ud800", "~", " x", "x ", "X", "x.", "C:", "0000_DAY1_S001.mp4"]


def test_plain_ids_keep_their_names(tmp_path):
    assert id_path(tmp_path, "syn001") == tmp_path / "syn001"
    assert id_path(tmp_path, "EgoLife_A1-JAKE") == tmp_path / "EgoLife_A1-JAKE"
    session = Session("syn001", "DAY1", "S002", 3, 0, 10, tmp_path / "v.mp4")
    assert session_path(tmp_path, session, ".turns.json") == tmp_path / "0003_DAY1_S002.turns.json"


def test_every_id_names_its_own_file_directly_inside_the_folder(tmp_path):
    names = [id_path(tmp_path, id_).name for id_ in HOSTILE]
    assert all(id_path(tmp_path, id_).parent == tmp_path for id_ in HOSTILE)
    assert all(set(name) <= PLAIN | {"%"} for name in names), names  # no separator, dot, glob or control char
    assert len(set(names)) == len(HOSTILE)  # distinct ids never share a file: "x" and "x/" included
    assert id_path(tmp_path, "/abs/dir").name == "%2Fabs%2Fdir"


@pytest.mark.parametrize("id_,suffix", [("", ""), ("", ".json"), ("x", "/../y"), ("x", "/y")])
def test_a_name_that_would_leave_its_folder_raises(tmp_path, id_, suffix):
    with pytest.raises(ValueError, match="does not name a file inside"):
        id_path(tmp_path, id_, suffix)


@pytest.mark.parametrize("id_,message", [
    ("", "must not be empty"),
    ("/tmp/victim", "contains a path separator"),
    ("../x", "contains a path separator"),
    ("x/", "contains a path separator"),
    ("x\\y", "contains a path separator"),
    ("a\x00b", "contains a control character"),
    ("S001\n", "contains a control character"),
    ("a..b", "contains '..'"),
    (".", "only dots and spaces"),
    (" . ", "only dots and spaces"),
    ("x" * 121, "is too long: 121 characters as a file name, at most 120"),
    ("é" * 30, "is too long: 180 characters"),
])
def test_unusable_ids_are_named(id_, message):
    assert message in id_problem(id_)


@pytest.mark.parametrize("id_", ["syn001", "S001", "DAY12", "a.b", "x.", " x", "é", "S*", "x" * 120])
def test_usable_ids_pass(id_):
    assert id_problem(id_) is None


def test_fold_merges_what_file_systems_merge():
    assert fold("T1") == fold("t1") == fold("T1.") == fold("T1 ") == fold("T1. .")
    assert fold("é") == fold("e\u0301") and fold("Straße") == fold("STRASSE")
    assert fold("T1") != fold("T2") and fold(".T1") != fold("T1")


def _write(tmp_path: Path, data: dict) -> Path:
    return write_release(tmp_path / "release", data, videos=False)


def _retarget(data: dict, trajectory_id: str) -> None:
    """Give trajectory T1 a new id, and point every candidate at it."""
    data["trajectories"][0]["trajectory_id"] = trajectory_id
    for c in data["candidates"] + data["ea"]:
        c["trajectory_id"] = trajectory_id


def _problems(capsys) -> list[str]:
    """The problem lines of a refusal (without the ``error: …`` header)."""
    header, *lines = capsys.readouterr().err.splitlines()
    assert header.startswith("error: ") and "in the release" in header
    return lines


@pytest.mark.parametrize("id_", ["../x", "x/", "/tmp", "a\\b", ".", "", "T\x001", "T1\n", "..T1"])
def test_a_path_like_trajectory_id_is_one_problem(tmp_path, capsys, id_):
    root = _write(tmp_path, mutated(lambda d: _retarget(d, id_)))
    assert apm_data(["validate", "--skip-videos", str(root)]) == 2
    [line] = _problems(capsys)  # its candidates wait for their trajectory: one problem, not one per candidate
    assert line.startswith("trajectories.json:3: [0].trajectory_id: "), line


@pytest.mark.parametrize("second,message", [
    ("x/", "[1].trajectory_id: 'x/' contains a path separator"),
    ("x", "[1].trajectory_id: duplicate trajectory id 'x' (first on line"),
    ("X", "[1].trajectory_id: duplicate trajectory id 'X': the same name as 'x' (line 3) to file systems that"),
    ("x.", "duplicate trajectory id 'x.': the same name as 'x'"),
    ("x ", "duplicate trajectory id 'x ': the same name as 'x'"),
])
def test_ids_that_would_share_a_folder_are_refused(tmp_path, capsys, second, message):
    def two(d):
        _retarget(d, "x")
        d["trajectories"].append({**d["trajectories"][0], "trajectory_id": second})
    assert apm_data(["validate", "--skip-videos", str(_write(tmp_path, mutated(two)))]) == 2
    [line] = _problems(capsys)
    assert message in line, line


SESSION = ("trajectories", 0, "sessions")


@pytest.mark.parametrize("where,value,message", [
    ((*SESSION, 1, "session_id"), "S/2", "trajectories.json:16: [0].sessions[1].session_id: 'S/2' contains a path"),
    ((*SESSION, 1, "session_id"), "s001", "duplicate session DAY1/s001 in trajectory T1: the same name as 'DAY1/S001'"),
    ((*SESSION, 0, "day_id"), "DAY1\n", "trajectories.json:8: [0].sessions[0].day_id: not DAYn: 'DAY1\\n'"),
    (("candidates", 1, "candidate_id"), "c/acr", "candidates.jsonl:2: candidate_id: 'c/acr' contains a path"),
    (("candidates", 1, "candidate_id"), "C-ER", "candidates.jsonl:2: candidate_id: duplicate candidate id 'C-ER': "
                                                "the same name as 'c-er' (line 1)"),
])
def test_session_and_candidate_ids_obey_the_same_rules(tmp_path, capsys, where, value, message):
    def change(d):
        node = d
        for part in where[:-1]:
            node = node[part]
        node[where[-1]] = value
    assert apm_data(["validate", "--skip-videos", str(_write(tmp_path, mutated(change)))]) == 2
    assert any(message in line for line in _problems(capsys)), message


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``folder``: its bytes and modification time."""
    files = (p for p in folder.rglob("*") if p.is_file())
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns) for p in files}


def test_an_absolute_path_as_trajectory_id_touches_nothing(tmp_path, capsys):
    """The attack: a trajectory named after a folder of 5 files, run with ``memory=restricted`` (which
    prunes old sessions' files from its state folder) deleted 3 of them. Now validate and apm-run refuse
    the release with exit 2 and one problem line, and no file outside the run directory changes."""
    victim = tmp_path / "victim"
    victim.mkdir()
    for i in range(5):
        (victim / f"{i:04d}_notes.txt").write_text(f"mine {i}")
    release = generate(tmp_path / "release", seed=0, scale="tiny")
    trajectories = json.loads((release / "trajectories.json").read_text())
    trajectories[0]["trajectory_id"] = str(victim)
    (release / "trajectories.json").write_text(json.dumps(trajectories, indent=2))
    for name in ("candidates.jsonl", "ea_candidates.jsonl"):
        rows = [json.loads(line) for line in (release / name).read_text().splitlines()]
        for row in rows:
            row["trajectory_id"] = str(victim) if row["trajectory_id"] == "syn001" else row["trajectory_id"]
        (release / name).write_text("".join(json.dumps(row) + "\n" for row in rows))
    before = _snapshot(tmp_path)

    assert apm_data(["validate", str(release)]) == 2
    [line] = _problems(capsys)
    assert line == (f"trajectories.json:3: [0].trajectory_id: {str(victim)[:40]!r} contains a path separator "
                    "(ids are names, not paths)")

    out = tmp_path / "runs"
    done = subprocess.run(
        [sys.executable, "-m", "apm.cli.run", f"dataset.root={release}", f"output_root={out}",
         f"frames.cache_dir={tmp_path / 'cache'}", "logging.wandb.mode=disabled", "logging.progress=false",
         "memory=restricted", "backbone=oracle"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{release}: 1 problem in the release" in done.stderr and "Traceback" not in done.stderr
    assert {k: v for k, v in _snapshot(tmp_path).items() if not k.startswith("runs/")} == before
    assert not list(out.rglob("memory_state"))
