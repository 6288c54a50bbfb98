"""apm-data end to end: synth → validate → stats --json covers every task, split and polarity."""

from __future__ import annotations

import json

from apm.cli.data import main as apm_data
from apm.data.tasks import ADAPTIVE, TASKS


def test_synth_validate_stats(tmp_path, capsys):
    root = tmp_path / "tiny"
    assert apm_data(["synth", "--out", str(root), "--scale", "tiny", "--seed", "5"]) == 0
    assert apm_data(["validate", str(root)]) == 0
    capsys.readouterr()
    assert apm_data(["stats", str(root), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert all(stats["candidates_per_task"][t] > 0 for t in TASKS)
    assert stats["ea_candidates"]["evidence_available"] > 0 and stats["ea_candidates"]["evidence_unavailable"] > 0
    for task in ADAPTIVE:
        assert stats["instances_per_task_polarity"][f"{task}/positive"] > 0
        assert stats["instances_per_task_polarity"][f"{task}/negative"] > 0
    assert stats["trajectories"] <= 3 and stats["sessions_per_trajectory"] <= 4
    assert stats["max_real_world_span_hours"] > 24  # sessions span days


def test_synth_refuses_a_non_empty_out(tmp_path, capsys):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "keep.txt").write_text("mine")
    assert apm_data(["synth", "--out", str(tmp_path / "x")]) == 1
    assert "error:" in capsys.readouterr().err
    assert (tmp_path / "x" / "keep.txt").read_text() == "mine"


def test_overlay_command(tmp_path, capsys):
    from support.release import write_video

    src, dst = tmp_path / "in.mp4", tmp_path / "out.mp4"
    write_video(src, 3, size=(64, 48))
    assert apm_data(["overlay", str(src), str(dst), "--day", "DAY2", "--start", "09:00:00"]) == 0
    assert dst.stat().st_size > 0
