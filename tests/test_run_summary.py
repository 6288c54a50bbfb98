"""What ``apm-run`` tells a user who tries it: a score screen of what it just ran (gate only, parse
failures counted), a subset that says so in every output, instance keys to print a request with, and
an ``apm-status`` that calls a finished try ``partial``, not failed."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import deque
from pathlib import Path

import pytest

from apm.data.instances import release_instances
from apm.data.release import load_release
from apm.runner.summary import score_summary
from apm.synth import generate


def _record(task: str, **fields: object) -> dict[str, object]:
    return {"task": task, "error": None, "parse_status": "ok", "correct": None, "gate_pass": None, **fields}


def test_the_score_screen_is_gate_only_per_task_with_parse_failures() -> None:
    records = [_record("ER", correct=True), _record("ER", correct=False, parse_status="failed"),
               _record("ERA", gate_pass=True), _record("ERA", gate_pass=False, parse_status="failed"),
               _record("ERA", gate_pass=None, parse_status=None, error="HTTP 500")]
    screen = score_summary(records, "dataset.limit=5").splitlines()
    assert screen[0].startswith("apm-run: scores of 5 instances (a subset: dataset.limit=5) — gate only")
    assert screen[2].split() == ["ER", "2", "50.0%", "0", "1"]
    assert screen[3].split() == ["ERA", "3", "33.3%", "1", "1"]  # an errored instance counts, as wrong
    assert screen[-1] == "  2 parse failures, 1 errors"


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=300, env=env, cwd=cwd)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("rel") / "tiny", seed=3, scale="tiny")


@pytest.mark.slow
def test_the_readmes_try_is_loud_and_leaves_a_partial_shard(tiny: Path, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    run = ("apm.cli.run", f"dataset.root={tiny}", f"output_root={root}", f"frames.cache_dir={tmp_path / 'c'}",
           "memory=none", "backbone=random", "logging.wandb.mode=disabled", "logging.progress=false")
    tried = _cli(*run, "dataset.limit=13")
    assert tried.returncode == 0, tried.stderr
    assert "dataset.limit=13: this job runs 13 of shard-0-of-1's" in tried.stderr
    assert "(a subset, dataset.limit=13: 13 of the shard's" in tried.stdout
    assert "apm-run: scores of 13 instances (a subset: dataset.limit=13) — gate only" in tried.stdout
    assert "parse failures" in tried.stdout.splitlines()[-1]
    (manifest,) = root.rglob("jobs/shard-0-of-1/manifest.json")
    assert json.loads(manifest.read_text())["subset"] == ["dataset.limit=13"]

    status = _cli("apm.cli.status", str(root))
    assert status.returncode == 0, status.stdout + status.stderr
    assert " partial " in status.stdout and "1 partial" in status.stdout
    reduced = _cli("apm.cli.reduce", str(root), "--out", str(tmp_path / "report"), "--bootstrap", "0", "--no-figures",
                   "--allow-unjudged")
    assert reduced.returncode == 0, reduced.stderr
    assert "(partial)" in (tmp_path / "report" / "tables" / "table4.md").read_text()

    full = _cli(*run)
    assert full.returncode == 0, full.stderr
    assert "subset" not in full.stdout and "apm-run: scores of " in full.stdout
    assert json.loads(manifest.read_text())["subset"] == []
    status = _cli("apm.cli.status", str(root))
    assert status.returncode == 0 and "1 done" in status.stdout, status.stdout


@pytest.mark.slow
def test_apm_data_keys_lists_the_keys_print_request_takes(tiny: Path, tmp_path: Path) -> None:
    listed = _cli("apm.cli.data", "keys", str(tiny), "--task", "ERA")
    assert listed.returncode == 0, listed.stderr
    keys = [line.split("\t") for line in listed.stdout.splitlines()]
    expected = [i.key for i in release_instances(load_release(tiny, check_videos=False)) if i.task == "ERA"]
    assert [k for k, _ in keys] == expected and {t for _, t in keys} == {"ERA"}
    shown = _cli("apm.cli.run", f"dataset.root={tiny}", f"output_root={tmp_path / 'runs'}",
                 f"frames.cache_dir={tmp_path / 'c'}", "memory=none", "backbone=random", f"print_request={keys[0][0]}")
    assert shown.returncode == 0 and keys[0][0] in shown.stdout, shown.stderr
    nothing = _cli("apm.cli.data", "keys", str(tiny), "--trajectory", "no-such")
    assert nothing.returncode == 2 and nothing.stdout == "" and len(nothing.stderr.splitlines()) == 1


def _totals(screen: str) -> tuple[int, int]:
    """The run line's and the score screen's error counts, from ``apm-run``'s stdout."""
    run_line = next(line for line in screen.splitlines() if line.startswith("apm-run: ") and " · shard-" in line)
    said = int(run_line.split(" with an error")[0].rsplit(" ", 1)[1])
    return said, int(screen.splitlines()[-1].split(", ")[1].split()[0])


def test_failed_memory_updates_stop_the_run_non_zero_and_every_summary_agrees(tiny: Path, tmp_path: Path,
                                                                              capsys: pytest.CaptureFixture) -> None:
    """Issue 36 item 4: every memory update failing (the random baseline writes no summary) is a
    non-zero exit naming the failure and the fix; the run line and the score screen count alike."""
    from support.runner import compose_run

    from apm.backbones.fail_fast import RunStopped
    from apm.runner.app import run_async

    cfg = compose_run(tiny, tmp_path / "runs", tmp_path / "c", ["memory=text_summary", "backbone=random",
                                                                  "dataset.tasks=[ER]"])
    with pytest.raises(RunStopped, match=r"memory updates failed.*the first: .*; .*rerun=errors"):
        asyncio.run(run_async(cfg, strict=True))
    out = capsys.readouterr().out
    said, screened = _totals(out)
    assert said == screened
    assert "memory updates (" in out and " failed)" in out


def test_an_errored_instance_is_a_non_zero_exit_naming_rerun_errors(tiny: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture) -> None:
    """Any instance error (not only every one) ends the job non-zero, the run line and the score screen
    counting the same errors, and the line says how to run them again."""
    from support.runner import compose_run, served

    from apm.backbones.fail_fast import RunStopped
    from apm.runner.app import run_async

    with served(models=("m",), faults=deque(["500"] * 2)) as srv:
        cfg = compose_run(tiny, tmp_path / "runs", tmp_path / "c", [
            "memory=none", "backbone=openai_compatible", f"backbone.base_url={srv.base_url}", "backbone.model=m",
            "backbone.max_attempts=1", "preflight=false", "concurrency=1", "dataset.tasks=[ER]"])
        with pytest.raises(RunStopped, match=r"2 of \d+ instances failed; the first: .*rerun=errors"):
            asyncio.run(run_async(cfg, strict=True))
    said, screened = _totals(capsys.readouterr().out)
    assert said == screened == 2


def test_print_request_before_the_run_shows_what_the_run_sends(tiny: Path, tmp_path: Path) -> None:
    """Issue 36 item 8: a PRM probe's request printed before the run holds the earlier session's
    registration (the user turn the memory keeps) and the prompt digest the run's record then carries."""
    from support.runner import compose_run, records, run

    from apm.runner.app import request_listing

    prm = [i for i in release_instances(load_release(tiny, check_videos=False)) if i.task == "PRM"]
    inst = max(prm, key=lambda i: (int(i.session.split("/")[1].lstrip("S") or 0), i.key))
    base = ["memory=raw_video", "backbone=random", "dataset.tasks=[PRM]"]
    before = request_listing(compose_run(tiny, tmp_path / "runs", tmp_path / "c", [*base, f"print_request={inst.key}"]))
    run_dir = run(compose_run(tiny, tmp_path / "runs", tmp_path / "c", base))
    (record,) = [r for r in records(run_dir) if r["key"] == inst.key]
    assert f"prompt sha256 {record['prompt_sha256']}" in before.splitlines()[0]
    registration = next(t.text for t in inst.turns if t.kind == "registration")
    assert registration in before


def test_print_request_of_a_streaming_system_says_in_one_line_what_it_cannot_know(tiny: Path, tmp_path: Path) -> None:
    from support.runner import compose_run

    from apm.runner.app import request_listing
    from apm.runner.config import ConfigError

    key = release_instances(load_release(tiny, check_videos=False))[0].key
    cfg = compose_run(tiny, tmp_path / "runs", tmp_path / "c", ["memory=kv_cache", "backbone=random",
                                                                  f"print_request={key}"])
    with pytest.raises(ConfigError, match="streaming system.*replay") as refused:
        request_listing(cfg)
    assert "\n" not in str(refused.value)
    late = max(release_instances(load_release(tiny, check_videos=False)), key=lambda i: i.probe_time)
    written = request_listing(compose_run(tiny, tmp_path / "runs", tmp_path / "c", [
        "memory=text_summary", "backbone=random", f"print_request={late.key}"]))
    assert written.splitlines()[1].startswith("# not known before the run: Text Summary as Memory has its memory")


def test_a_reference_baselines_own_no_answer_is_no_failure_of_the_run(tiny: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    """Always-silent has no answer for MCQA by design: counted (and shown) as errors, wrong in every
    score, the same on any rerun, so no reason to exit non-zero."""
    from support.runner import compose_run

    from apm.runner.app import run_async

    cfg = compose_run(tiny, tmp_path / "runs", tmp_path / "c", ["memory=none", "backbone=always_silent",
                                                                  "dataset.tasks=[ER]"])
    asyncio.run(run_async(cfg, strict=True))
    said, screened = _totals(capsys.readouterr().out)
    assert said == screened > 0
