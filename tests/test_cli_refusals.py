"""Selections that select nothing are refused with the nearest name; Hydra's whole message is behind
``--verbose``; ``apm-submit --dry-run`` says what the sweep asks of the cluster. (The one-line contract
of each refusal is attacked in test_cli_errors.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.runner import compose_run, run

from apm.cli.judge import main as judge_main
from apm.cli.publish import main as publish_main
from apm.cli.reduce import main as reduce_main
from apm.cli.view import main as view_main
from apm.scale.submit import request_totals, unset_slurm_settings
from apm.synth import generate
from apm.testing import fixtures


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=300,
                          env=base | (env or {}))


def test_a_judge_typo_names_the_judges_on_record_and_writes_nothing(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    root = fixtures.small_run_set(tmp_path / "runs")
    out = tmp_path / "report"
    assert reduce_main([str(root), "--out", str(out), "--judge", "judge-y", "--bootstrap", "0", "--no-figures"]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert said == ["apm-reduce: --judge judge-y: no judgement on record has it (on record: judge-x; did you mean "
                    "judge-x?); nothing written"]
    assert not out.exists()
    assert reduce_main([str(root), "--out", str(out), "--judge", "judge-x", "--bootstrap", "0", "--no-figures"]) == 0


@pytest.fixture(scope="module")
def judged_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run of the tiny release, judged gate-only (judge ``Gate-only reference judge (no LLM)``)."""
    tmp = tmp_path_factory.mktemp("judged")
    release = generate(tmp / "rel", seed=3, scale="tiny")
    run_dir = run(compose_run(release, tmp / "runs", tmp / "cache", ["memory=none", "backbone=random"]))
    assert judge_main([str(run_dir), "judge=gate_only"]) == 0
    return tmp / "runs"


@pytest.mark.parametrize("prog, main, flags", [
    ("apm-reduce", reduce_main, ["--out", "{out}", "--bootstrap", "0", "--no-figures"]),
    ("apm-publish", publish_main, ["--dir", "{out}", "--bootstrap", "0"]),
    ("apm-view", view_main, ["--out", "{out}"]),
])
def test_every_tool_refuses_a_judge_typo_in_the_same_line(judged_run: Path, tmp_path: Path, prog: str, main,
                                                          flags: list[str], capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-home"))
    monkeypatch.delenv("WANDB_SERVICE", raising=False)
    out = tmp_path / "out"
    argv = [str(judged_run), *(f.format(out=out) for f in flags)]
    assert main([*argv, "--judge", "Gate-only reference judge"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"{prog}: --judge Gate-only reference judge: no judgement on record has it (on record: Gate-only reference "
        "judge (no LLM); did you mean Gate-only reference judge (no LLM)?); nothing written")
    assert not out.exists() and not (tmp_path / "wandb-home").exists()


def test_verbose_shows_hydras_whole_message(tmp_path: Path) -> None:
    release = generate(tmp_path / "rel", seed=3, scale="tiny")
    args = ("apm.cli.run", f"dataset.root={release}", f"output_root={tmp_path / 'out'}", "memory=raw_vide")
    short, full = _cli(*args), _cli(*args, "--verbose")
    assert short.returncode == full.returncode == 2
    assert short.stderr.strip() == ("apm-run: error: memory=raw_vide: no such option (did you mean raw_video?); "
                                    "--verbose shows Hydra's message")
    assert "Available options in 'memory'" in full.stderr and "Config search path" in full.stderr
    assert "Traceback" not in full.stderr and not (tmp_path / "out").exists()


def test_the_dry_run_totals_what_the_sweep_requests_and_warns_of_unset_slurm_settings(tmp_path: Path) -> None:
    release = generate(tmp_path / "rel", seed=3, scale="tiny")
    done = _cli("apm.cli.submit", "hydra/launcher=slurm", f"dataset.root={release}", f"output_root={tmp_path / 'o'}",
                "memory=none,raw_video", "backbone=random", "shard.count=2", "--dry-run",
                env={"APM_SLURM_PARTITION": "", "APM_SLURM_ACCOUNT": "acct"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("would submit   ") == 4
    assert done.stdout.splitlines()[-1] == ("apm-submit: would submit 4 jobs · 1 GPU(s) each, 4 in all (4 at once) · "
                                            "12 h limit each: 48 job-hours, 48 GPU-hours at most; 0 skipped")
    assert done.stderr.strip().splitlines() == [
        "apm-submit: warning: hydra.launcher.partition is not set ($APM_SLURM_PARTITION); sbatch uses the "
        "cluster's default or refuses the jobs"]
    assert not (tmp_path / "o").exists()


def test_totals_count_nodes_tasks_and_gpus() -> None:
    launcher = {"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher",
                "gpus_per_task": 2, "tasks_per_node": 1, "nodes": 2, "timeout_min": 90, "partition": "p",
                "account": None}
    assert request_totals(3, launcher) == ("3 jobs · 4 GPU(s) each, 12 in all · 1.5 h limit each: 4.5 job-hours, "
                                           "18 GPU-hours at most")
    assert [w.split(" is not")[0] for w in unset_slurm_settings(launcher)] == ["apm-submit: warning: "
                                                                              "hydra.launcher.account"]
    assert unset_slurm_settings({"_target_": "x.LocalLauncher"}) == []
