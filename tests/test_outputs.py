"""``--out`` never destroys (issue 20.1): every writer writes only into a folder it owns — a new or
empty one, or one marked as its own earlier output — and refuses anything else in one line, leaving
the target and its surroundings byte for byte as they were."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from apm.cli.data import main as data_main
from apm.cli.publish import main as publish_main
from apm.cli.reduce import main as reduce_main
from apm.cli.view import main as view_main
from apm.testing import fixtures
from apm.video.encode import H264Writer

Command = Callable[[str, Path], int]
COMMANDS: dict[str, Command] = {
    "apm-reduce": lambda out, runs: reduce_main([str(runs), "--out", out, "--bootstrap", "0", "--no-figures",
                                                 "--allow-unjudged"]),
    "apm-view": lambda out, runs: view_main([str(runs), "--out", out]),
    "apm-data synth": lambda out, runs: data_main(["synth", "--out", out, "--trajectories", "1"]),
    "apm-publish": lambda out, runs: publish_main([str(runs), "--dir", out, "--bootstrap", "0", "--mode", "offline"]),
}


def tree(root: Path) -> dict[str, str]:
    """Every entry below ``root`` (and ``root`` itself) with its bytes' digest ('dir' for a folder)."""
    entries = [root, *root.rglob("*")] if root.is_dir() else [root]
    return {str(p.relative_to(root.parent)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in entries}


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A run root with records, a release, a file of notes, and a working directory with both inside."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-home"))
    work = tmp_path / "work"
    runs = fixtures.small_run_set(work / "runs")
    release = work / "rel"
    release.mkdir()
    (release / "trajectories.json").write_text("[]\n")
    (release / "candidates.jsonl").write_text("")
    notes = work / "notes.txt"
    notes.write_text("my notes\n")
    monkeypatch.chdir(work)
    return {"runs": runs, "release": release, "file": notes, ".": work, "/": Path("/")}


@pytest.mark.parametrize("target", ["runs", "release", "file", ".", "/"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_out_the_command_did_not_write_is_refused_in_one_line_and_left_whole(
    world: dict[str, Path], command: str, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = world[target]
    given = target if target in (".", "/") else str(path)
    watched = world["."] if target != "/" else path
    before = tree(watched) if target != "/" else sorted(os.listdir("/"))
    status = COMMANDS[command](given, world["runs"])
    err = capsys.readouterr().err.strip()
    assert status != 0
    assert len(err.splitlines()) == 1 and err.startswith(command.split()[0]) and f"refusing --out {given}" in err, err
    assert (tree(watched) if target != "/" else sorted(os.listdir("/"))) == before


def test_an_owned_out_is_replaced_and_a_foreign_entry_or_another_command_refused(
    world: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    out, empty = world["."] / "report", world["."] / "empty"
    empty.mkdir()
    assert COMMANDS["apm-reduce"](str(empty), world["runs"]) == 0  # an empty folder is fine
    assert COMMANDS["apm-reduce"](str(out), world["runs"]) == 0
    marker = json.loads((out / ".apm-output.json").read_text())
    assert marker["command"] == "apm-reduce" and {"scores.csv", "tables", "manifest.json"} <= set(marker["entries"])
    (out / "tables" / "table4.md").write_text("stale")
    assert COMMANDS["apm-reduce"](str(out), world["runs"]) == 0  # its own earlier report: replaced whole
    assert (out / "tables" / "table4.md").read_text() != "stale"
    siblings = sorted(os.listdir(world["."]))

    (out / "my-notes.md").write_text("keep me")
    capsys.readouterr()
    assert COMMANDS["apm-reduce"](str(out), world["runs"]) == 2
    assert "1 entries apm-reduce did not write (my-notes.md)" in capsys.readouterr().err
    assert (out / "my-notes.md").read_text() == "keep me"
    (out / "my-notes.md").unlink()
    assert COMMANDS["apm-view"](str(out), world["runs"]) == 2
    assert "holds the output of apm-reduce, not of apm-view" in capsys.readouterr().err
    assert sorted(os.listdir(world["."])) == siblings  # no litter beside the report


def _video(path: Path) -> None:
    with H264Writer(path, 32, 32, 2) as writer:
        for _ in range(4):
            writer.write(np.zeros((32, 32, 3), "uint8"))


def test_overlay_writes_only_a_new_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, taken, new = tmp_path / "in.mp4", tmp_path / "taken.mp4", tmp_path / "out.mp4"
    _video(src)
    taken.write_bytes(b"someone's file")
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    for dst in (src, taken):
        assert data_main(["overlay", str(src), str(dst), "--start", "11:00:00"]) != 0
        assert "it exists; apm-data overlay writes only a new file" in capsys.readouterr().err
    assert hashlib.sha256(src.read_bytes()).hexdigest() == digest and taken.read_bytes() == b"someone's file"
    assert data_main(["overlay", str(src), str(new), "--start", "11:00:00"]) == 0
    assert new.stat().st_size > 0 and sorted(p.name for p in tmp_path.iterdir()) == ["in.mp4", "out.mp4", "taken.mp4"]
