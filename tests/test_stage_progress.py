"""Every long stage reports while it works, as ``apm-run`` does (apm/live/progress.py): into a file or a
pipe (a SLURM log, ``2> log``), a plain line every ``$APM_PROGRESS_EVERY_S`` seconds with the count, the
rate and the ETA, before the stage ends; a stage quicker than one period says nothing."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from support.runner import GOOD_JUDGEMENT, compose_run, run, served

from apm.cli.data import main as data_main
from apm.cli.judge import main as judge_main
from apm.cli.publish import main as publish_main
from apm.cli.reduce import main as reduce_main
from apm.cli.view import main as view_main
from apm.synth import generate

LINE = re.compile(
    r"^(?P<desc>.+): (?P<done>\d+)/(?P<total>\d+) (?P<unit>[A-Za-z&. ]+) \(\d+%\)(, \d+ errors)?, "
    r"(?P<rate>[\d.e+-]+) \S+/s, ETA (\d+:\d\d:\d\d|unknown)$"
)


def progress_lines(text: str, desc: str) -> list[re.Match[str]]:
    """The progress lines of ``text`` whose description starts with ``desc``."""
    return [m for m in map(LINE.match, text.splitlines()) if m and m["desc"].startswith(desc)]


def reported_while_working(text: str, desc: str, unit: str) -> None:
    """A line of ``desc`` counting ``unit`` was written before its stage ended: one with work still left."""
    lines = [m for m in progress_lines(text, desc) if m["unit"] == unit]
    assert any(0 < int(m["done"]) < int(m["total"]) for m in lines), text[-3000:]
    assert "\r" not in text


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The tiny release and an oracle run over the adaptive tasks (every probe passes the gate), beside a
    random baseline's run of them (two methods under ``runs/``)."""
    tmp = tmp_path_factory.mktemp("stages")
    release = generate(tmp / "tiny", seed=3, scale="tiny")
    oracle, _ = (
        run(
            compose_run(
                release,
                tmp / "runs",
                tmp / "cache",
                ["memory=none", f"backbone={backbone}", "dataset.tasks=[RCR,MPA,ER]"],
            )
        )
        for backbone in ("oracle", "random")
    )
    return release, oracle


@pytest.fixture
def every_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APM_PROGRESS_EVERY_S", "0")


def test_apm_judge_reports_judgements_rate_and_eta_against_a_slow_judge(
    judged, tmp_path, monkeypatch, capsys, every_line
) -> None:
    run_dir = Path(shutil.copytree(judged[1], tmp_path / "run"))
    monkeypatch.setenv("APM_JUDGE_KEY", "sk-progress-0123456789")
    with served(reply=GOOD_JUDGEMENT, latency_s=0.05) as judge:
        assert (
            judge_main(
                [
                    str(run_dir),
                    "judge=deepseek_v4_flash",
                    f"judge.base_url={judge.base_url}",
                    "judge.api_key_env=APM_JUDGE_KEY",
                    "--concurrency",
                    "2",
                ]
            )
            == 0
        )
    err = capsys.readouterr().err
    reported_while_working(err, "apm-judge (DeepSeek-V4-Flash)", "judgements")
    assert progress_lines(err, "apm-judge")[-1]["done"] == progress_lines(err, "apm-judge")[-1]["total"]


def test_a_quick_stage_says_nothing(judged, tmp_path, capsys) -> None:
    """The default period (30 s) is longer than a tiny judge: no line, only the summary."""
    run_dir = Path(shutil.copytree(judged[1], tmp_path / "run"))
    assert judge_main([str(run_dir), "judge=gate_only"]) == 0
    assert not progress_lines(capsys.readouterr().err, "apm-judge")


def test_apm_data_synth_reports_trajectories_and_each_trajectorys_sessions(tmp_path, capsys, every_line) -> None:
    assert data_main(["synth", "--out", str(tmp_path / "rel"), "--scale", "tiny", "--trajectories", "2"]) == 0
    err = capsys.readouterr().err
    reported_while_working(err, "apm-data synth", "trajectories")
    reported_while_working(err, "apm-data synth: syn001", "sessions")


def test_apm_data_cache_reports_videos(judged, tmp_path, capsys, every_line) -> None:
    assert data_main(["cache", str(judged[0]), "--cache-dir", str(tmp_path / "c"), "--workers", "1"]) == 0
    reported_while_working(capsys.readouterr().err, "apm-data cache", "videos")


def test_apm_reduce_reports_its_load(judged, tmp_path, capsys, every_line) -> None:
    run_dir = Path(shutil.copytree(judged[1], tmp_path / "run"))
    assert judge_main([str(run_dir), "judge=gate_only"]) == 0
    assert reduce_main([str(run_dir), "--out", str(tmp_path / "report"), "--bootstrap", "0", "--no-figures"]) == 0
    reported_while_working(capsys.readouterr().err, "reading run files", "files")


def test_apm_view_reports_records(judged, tmp_path, capsys, every_line) -> None:
    assert view_main([str(judged[1]), "--out", str(tmp_path / "site")]) == 0
    reported_while_working(capsys.readouterr().err, "apm-view", "records")


def test_apm_publish_reports_methods(judged, tmp_path, monkeypatch, capsys, every_line) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_SERVICE", raising=False)
    runs = Path(shutil.copytree(judged[1].parents[1], tmp_path / "runs"))
    assert publish_main([str(runs), "--dir", str(tmp_path / "pub"), "--bootstrap", "0"]) == 0
    reported_while_working(capsys.readouterr().err, "apm-publish", "methods")
