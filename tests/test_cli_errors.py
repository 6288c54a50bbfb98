"""Every command-line error is one line and a non-zero exit; ``--debug`` shows the traceback."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError

from apm.errors import one_line
from apm.synth import generate


def command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=300)


def test_hydra_and_omegaconf_messages_become_one_line():
    try:
        raise ConfigCompositionException("Could not override 'concurency'.\nTo append use +concurency=4") \
            from ConfigKeyError("Key 'concurency' is not in struct\n    full_key: concurency\n    object_type=dict")
    except ConfigCompositionException as e:
        line = one_line(e)
    assert line == "Could not override 'concurency'; To append use +concurency=4; Key 'concurency' is not in struct"


def test_apm_status_and_apm_data_errors_are_one_line(tmp_path):
    for args in (("apm.cli.status", str(tmp_path / "nowhere")), ("apm.cli.data", "synth", "--out", str(tmp_path))):
        if args[1] == "synth":
            (tmp_path / "keep").write_text("mine")
        done = command(*args)
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and ": error: " in done.stderr


def test_debug_shows_the_traceback(tmp_path):
    done = command("apm.cli.status", str(tmp_path / "nowhere"), "--debug")
    assert done.returncode == 1 and "Traceback" in done.stderr and "FileNotFoundError" in done.stderr


# Every console script, attacked the ways a user gets it wrong: one line, non-zero, no traceback, nothing
# created. A read-only dir is denied to root too: the command runs without CAP_DAC_OVERRIDE (setpriv).

NO_OVERRIDE = ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
               "--bounding-set=-dac_override,-dac_read_search", "--"]
LIMIT = ("memory=none", "dataset.limit=6", "logging.progress=false", "logging.wandb.mode=disabled", "preflight=false")


@dataclass(frozen=True)
class Made:
    """The module fixture: the release and two finished runs (two methods) under one output root."""

    release: Path
    root: Path
    runs: tuple[Path, Path]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    base = tmp_path_factory.mktemp("made")
    release = generate(base / "rel", seed=3, scale="tiny")
    for backbone in ("random", "always_silent"):
        done = command("apm.cli.run", f"dataset.root={release}", f"output_root={base / 'runs'}",
                       f"frames.cache_dir={base / 'cache'}", f"backbone={backbone}", *LIMIT)
        assert done.returncode == 0, done.stderr
    first, second = sorted(p.parent for p in (base / "runs").rglob("config.json"))
    return Made(release, base / "runs", (first, second))


def _tree(*roots: Path) -> set[Path]:
    return {p for root in roots for p in root.rglob("*")}


def refused(tmp_path: Path, made: Made, *args: str, env: dict[str, str] | None = None,
            read_only: Path | None = None) -> str:
    """Run ``python -m ARGS`` and assert the user-error contract; its one line."""
    if read_only is not None:
        for p in (read_only, *read_only.rglob("*")):
            p.chmod(p.stat().st_mode & ~0o222)
    before = _tree(tmp_path, made.root)
    prefix = NO_OVERRIDE if read_only is not None else []
    done = subprocess.run([*prefix, sys.executable, "-m", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})
    lines = done.stderr.strip().splitlines()
    assert done.returncode not in (0, None) and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert len(lines) == 1 and re.match(r"apm-[a-z]+(-[a-z]+)*: ", lines[0]), done.stderr[-2000:]  # names its command
    assert _tree(tmp_path, made.root) == before
    return lines[0]


def _copy_run(made: Made, tmp_path: Path, damage: bool = False) -> Path:
    run = shutil.copytree(made.runs[0], tmp_path / "copied" / made.runs[0].name)
    if damage:
        (run / "config.json").write_text('{"config_hash": "abc", "config": {')
    return run


def _changed_release(made: Made, tmp_path: Path) -> Path:
    """A copy of the run whose release lost the candidates its records name."""
    run = _copy_run(made, tmp_path)
    release = shutil.copytree(made.release, tmp_path / "changed-release")
    named = {json.loads(line)["candidate_id"] for line in next(run.glob("records/*.jsonl")).read_text().splitlines()}
    kept = [line for line in (release / "candidates.jsonl").read_text().splitlines()
            if json.loads(line)["candidate_id"] not in named]
    (release / "candidates.jsonl").write_text("\n".join(kept) + "\n")
    saved = json.loads((run / "config.json").read_text())
    saved["config"]["dataset"]["root"] = str(release)
    (run / "config.json").write_text(json.dumps(saved))
    return run


def _read_only_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "read-only"
    folder.mkdir()
    return folder


CASES: dict[str, Callable[[Made, Path], dict]] = {
    "apm-data: unknown command": lambda m, t: {"args": ("apm.cli.data", "frobnicate")},
    "apm-data: missing release": lambda m, t: {"args": ("apm.cli.data", "stats", str(t / "nowhere"))},
    "apm-run: unknown flag": lambda m, t: {"args": ("apm.cli.run", "--frobnicate", f"output_root={t / 'out'}")},
    "apm-run: config typo": lambda m, t: {"args": ("apm.cli.run", f"dataset.root={m.release}", "concurency=3",
                                                   f"output_root={t / 'out'}")},
    "apm-run: missing release": lambda m, t: {"args": ("apm.cli.run", f"dataset.root={t / 'nowhere'}",
                                                       f"output_root={t / 'out'}", *LIMIT)},
    "apm-run: read-only output root": lambda m, t: {
        "args": ("apm.cli.run", f"dataset.root={m.release}", f"output_root={_read_only_folder(t) / 'runs'}",
                 f"frames.cache_dir={t / 'read-only' / 'cache'}", "backbone=random", *LIMIT),
        "read_only": t / "read-only"},
    "apm-run: missing key": lambda m, t: {"args": ("apm.cli.run", f"dataset.root={m.release}",
                                                   f"output_root={t / 'out'}", "backbone=gemini_3_6_flash", *LIMIT),
                                          "env": {"GEMINI_API_KEY": ""}},
    "apm-run: missing engine (vLLM)": lambda m, t: {
        "args": ("apm.cli.run", f"dataset.root={m.release}", f"output_root={t / 'out'}",
                 "backbone=tiny_qwen2vl_vllm_offline", *LIMIT)},
    "apm-run: missing engine (vLLM server, no such python)": lambda m, t: {
        "args": ("apm.cli.run", f"dataset.root={m.release}", f"output_root={t / 'out'}",
                 "backbone=tiny_qwen2vl_vllm", *LIMIT),
        "env": {"APM_VLLM_PYTHON": str(t / "no-vllm" / "python")}, "says": "is not an executable Python"},
    "apm-run: missing engine (vLLM server, no vllm on PATH)": lambda m, t: {
        "args": ("apm.cli.run", f"dataset.root={m.release}", f"output_root={t / 'out'}",
                 "backbone=tiny_qwen2vl_vllm", "backbone.python=null", *LIMIT),
        "env": {"PATH": str(Path(sys.executable).parent)},
        "says": "'vllm' is not installed (not on PATH); pip install vllm"},
    "apm-run: a task that is none": lambda m, t: {
        "args": ("apm.cli.run", f"dataset.root={m.release}", f"output_root={t / 'out'}", "dataset.tasks=[EAR]",
                 *LIMIT), "says": "dataset.tasks: 'EAR' is no task (did you mean ER or EA or ERA?)"},
    "apm-run: a trajectory that is none": lambda m, t: {
        "args": ("apm.cli.run", f"dataset.root={m.release}", f"output_root={t / 'out'}",
                 "dataset.trajectories=[syn0001]", *LIMIT),
        "says": "dataset.trajectories: 'syn0001' is no trajectory of the release (did you mean syn001"},
    "apm-run: a selection of nothing": lambda m, t: {
        "args": ("apm.cli.run", f"dataset.root={m.release}", f"output_root={t / 'out'}", "dataset.tasks=[EA]",
                 "dataset.include_ea=false", *LIMIT),
        "says": "dataset.tasks=[EA] dataset.include_ea=false dataset.limit=6 selects no instance of shard-0-of-1"},
    "apm-run: no tasks": lambda m, t: {
        "args": ("apm.cli.run", f"dataset.root={m.release}", f"output_root={t / 'out'}", "dataset.tasks=[]",
                 *LIMIT), "says": "selects no instance"},
    "apm-run: shard.count=0": lambda m, t: {
        "args": ("apm.cli.run", f"dataset.root={m.release}", f"output_root={t / 'out'}", "shard.count=0", *LIMIT),
        "says": "shard.count=0: give at least 1"},
    "apm-run: shard.index past the count": lambda m, t: {
        "args": ("apm.cli.run", f"dataset.root={m.release}", f"output_root={t / 'out'}", "shard.count=2",
                 "shard.index=2", *LIMIT), "says": "shard.index=2: give 0..1 for shard.count=2"},
    "apm-run: config group typo": lambda m, t: {
        "args": ("apm.cli.run", f"dataset.root={m.release}", f"output_root={t / 'out'}", "memory=raw_vide"),
        "says": "memory=raw_vide: no such option (did you mean raw_video?"},
    "apm-run: unknown key": lambda m, t: {
        "args": ("apm.cli.run", f"dataset.root={m.release}", f"output_root={t / 'out'}", "dataset.limt=3"),
        "says": "dataset.limt: no such key (did you mean dataset.limit?"},
    "apm-judge: no run dir": lambda m, t: {"args": ("apm.cli.judge", "judge=gate_only")},
    "apm-judge: override error": lambda m, t: {"args": ("apm.cli.judge", str(_copy_run(m, t)), "judge=no_such_judge")},
    "apm-judge: damaged config.json": lambda m, t: {
        "args": ("apm.cli.judge", str(_copy_run(m, t, damage=True)), "judge=gate_only"),
        "says": "config.json: damaged"},
    "apm-judge: changed release": lambda m, t: {
        "args": ("apm.cli.judge", str(_changed_release(m, t)), "judge=gate_only"), "says": "no longer has"},
    "apm-judge: read-only run dir": lambda m, t: {
        "args": ("apm.cli.judge", str(_copy_run(m, t)), "judge=gate_only"), "read_only": t / "copied"},
    "apm-judge: missing key": lambda m, t: {"args": ("apm.cli.judge", str(_copy_run(m, t)), "judge=deepseek_v4_flash"),
                                            "env": {"DEEPSEEK_API_KEY": ""}},
    "apm-status: unknown option": lambda m, t: {"args": ("apm.cli.status", "--frobnicate", str(m.root))},
    "apm-submit: config typo": lambda m, t: {"args": ("apm.cli.submit", f"dataset.root={m.release}", "concurency=3")},
    "apm-submit: credentials in a URL": lambda m, t: {
        "args": ("apm.cli.submit", f"dataset.root={m.release}", f"output_root={t / 'out'}",
                 "backbone=openai_compatible", "backbone.model=m", "backbone.base_url=http://tok-0123456789@h:9/v1",
                 *LIMIT),
        "says": "backbone.base_url: credentials in the URL (http://***@h:9/v1) are refused"},
    "apm-submit: no srun": lambda m, t: {
        "args": ("apm.cli.submit", f"dataset.root={m.release}", f"output_root={t / 'out'}", "hydra/launcher=slurm",
                 f"hydra.launcher.submitit_folder={t / 'submitit'}", *LIMIT),
        "env": {"PATH": str(Path(sys.executable).parent)}},  # CI's SLURM client lives in /usr/bin
    "apm-submit: shard.count=0": lambda m, t: {
        "args": ("apm.cli.submit", f"dataset.root={m.release}", f"output_root={t / 'out'}", "shard.count=0",
                 *LIMIT, "--dry-run"), "says": "shard.count=0: give at least 1"},
    "apm-reduce: no --out": lambda m, t: {"args": ("apm.cli.reduce", str(m.root))},
    "apm-reduce: a judge that judged nothing": lambda m, t: {
        "args": ("apm.cli.reduce", str(m.root), "--out", str(t / "report"), "--judge", "gate_onyl",
                 "--allow-unjudged"), "says": "--judge gate_onyl: no judgement on record has it"},
    "apm-reduce: --compare a folder of two methods": lambda m, t: {
        "args": ("apm.cli.reduce", "--compare", str(m.root), str(m.runs[0]), "--out", str(t / "report"))},
    "apm-publish: no run dir given": lambda m, t: {"args": ("apm.cli.publish",)},
    "apm-publish: read-only run dir": lambda m, t: {
        "args": ("apm.cli.publish", str(_copy_run(m, t)), "--bootstrap", "0"), "read_only": t / "copied",
        "env": {"WANDB_DIR": ""}},  # no WANDB_DIR (CI sets one): the runs would go to the read-only sweep root
    "apm-view: no --out": lambda m, t: {"args": ("apm.cli.view", str(m.root))},
    "apm-view: damaged config.json": lambda m, t: {
        "args": ("apm.cli.view", str(_copy_run(m, t, damage=True)), "--out", str(t / "site")),
        "says": "config.json: damaged"},
    "apm-view: read-only --out": lambda m, t: {
        "args": ("apm.cli.view", str(m.root), "--out", str(_read_only_folder(t) / "site")),
        "read_only": t / "read-only"},
    "apm-check-system: config group typo": lambda m, t: {
        "args": ("apm.cli.check_system", "raw_vide", "--release", str(m.release), "--work", str(t / "work")),
        "says": "memory=raw_vide: no such option (did you mean raw_video?"},
    "apm-check-system: read-only --work": lambda m, t: {
        "args": ("apm.cli.check_system", "raw_video", "--release", str(m.release),
                 "--work", str(_read_only_folder(t) / "work")), "read_only": t / "read-only"},
}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_every_console_script_refuses_in_one_line(made: Made, tmp_path: Path, case: str) -> None:
    prepared = CASES[case](made, tmp_path)
    line = refused(tmp_path, made, *prepared["args"], env=prepared.get("env"), read_only=prepared.get("read_only"))
    assert prepared.get("says", "") in line


def test_a_read_only_dir_really_denies_writes(tmp_path: Path) -> None:
    """The rig's premise: without CAP_DAC_OVERRIDE, root cannot write into a folder without write bits."""
    folder = _read_only_folder(tmp_path)
    folder.chmod(0o555)
    done = subprocess.run([*NO_OVERRIDE, "touch", str(folder / "x")], capture_output=True, text=True)
    assert done.returncode != 0 and not (folder / "x").exists()
