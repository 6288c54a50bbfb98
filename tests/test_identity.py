"""What names a run's inputs: prompt and rubric versions are digests of their templates, and the
release is named by its content, not by the path typed to reach it."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from hydra import compose, initialize_config_dir
from support.runner import compose_run, records, run

from apm.api.judge import judge_backbone
from apm.configs import CONF_DIR
from apm.data import fingerprint
from apm.judge import rubric
from apm.judge.stage import JudgeStage
from apm.prompts import render
from apm.runner.config import config_hash
from apm.synth import generate

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("version,templates,current", [
    (render.prompt_version, render.TEMPLATES, render.PROMPT_VERSION),
    (rubric.rubric_version, rubric.TEMPLATES, rubric.RUBRIC_VERSION),
])
def test_versions_are_digests_of_every_template_byte(version, templates, current, tmp_path):
    folder = tmp_path / "templates"
    shutil.copytree(Path(str(templates)), folder)
    assert version(folder) == version(folder) == current  # stable, and what records carry
    seen = {current}
    for path in sorted(folder.iterdir()):
        original = path.read_bytes()
        path.write_bytes(original.replace(b" ", b"  ", 1) if b" " in original else original + b"\n")
        seen.add(version(folder))
        path.write_bytes(original)
    assert len(seen) == 1 + len(list(folder.iterdir()))  # each one-byte edit gives a new version
    assert version(folder) == current


def test_rubric_version_covers_the_reply_schema_sent_to_the_judge(monkeypatch):
    monkeypatch.setitem(rubric.CRITERIA, "usefulness", ("pass", "fail"))
    assert rubric.rubric_version(rubric.TEMPLATES) != rubric.RUBRIC_VERSION


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("rel") / "tiny", seed=4, scale="tiny")


def _hash(root: Path | str, *overrides: str) -> str:
    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        return config_hash(compose("config", overrides=[f"dataset.root={root}", *overrides]))


def test_one_release_under_any_path_or_working_directory_has_one_config_hash(tiny, tmp_path, monkeypatch):
    monkeypatch.chdir(tiny.parent)
    typed = {_hash(tiny.name), _hash(f"./{tiny.name}"), _hash(tiny)}
    monkeypatch.chdir(tmp_path)
    typed |= {_hash(tiny), _hash(shutil.copytree(tiny, tmp_path / "copy"))}
    assert len(typed) == 1


def test_a_changed_annotation_or_resized_video_gives_a_new_config_hash(tiny, tmp_path):
    before = _hash(tiny)
    changed = shutil.copytree(tiny, tmp_path / "annotation")
    with (changed / "candidates.jsonl").open("a") as f:
        f.write("\n")
    resized = shutil.copytree(tiny, tmp_path / "video")
    video = sorted((resized / "videos").rglob("*.mp4"))[0]
    video.write_bytes(video.read_bytes()[:-1])
    assert len({before, _hash(changed), _hash(resized)}) == 3


def test_the_fingerprint_is_computed_once_per_release_state(tiny, tmp_path, monkeypatch):
    root = shutil.copytree(tiny, tmp_path / "rel")
    calls = []
    monkeypatch.setattr(fingerprint, "_videos", lambda r: calls.append(r) or [])
    for _ in range(3):
        fingerprint.release_fingerprint(root)
    assert len(calls) == 1
    (root / "ea_candidates.jsonl").write_bytes((root / "ea_candidates.jsonl").read_bytes() + b"\n")
    fingerprint.release_fingerprint(root)
    assert len(calls) == 2


def test_a_resume_from_another_working_directory_redoes_nothing(tiny, tmp_path, monkeypatch, caplog):
    rel = shutil.copytree(tiny, tmp_path / "rel")
    out, cache = tmp_path / "runs", tmp_path / "cache"
    overrides = ["memory=none", "backbone=oracle", "dataset.tasks=[RCR]"]
    monkeypatch.chdir(tmp_path)
    run_dir = run(compose_run("rel", out, cache, overrides))
    n = len(records(run_dir))
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["config"]["dataset"]["root"] == str(rel.resolve())
    assert saved["release_fingerprint"] == fingerprint.release_fingerprint(rel)
    monkeypatch.chdir(cache.parent.parent)
    assert run(compose_run(rel, out, cache, overrides)) == run_dir
    assert len(records(run_dir)) == n > 0  # everything was on record: nothing redone
    judge = judge_backbone(["judge=gate_only"])
    assert asyncio.run(JudgeStage(judge).run([run_dir])).judged > 0  # apm-judge finds the release from here too
    trajectories = rel / "trajectories.json"
    trajectories.write_text(json.dumps(json.loads(trajectories.read_text()), indent=1))
    asyncio.run(JudgeStage(judge).run([run_dir]))
    assert "changed since the run" in caplog.text


def apm_run(*overrides: str, cwd: Path = REPO) -> None:
    """``apm-run`` as a person types it: its own process, Hydra's command line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "examples"), str(REPO / "tests")])}
    done = subprocess.run([sys.executable, "-m", "apm.cli.run", *overrides], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_records_carry_the_config_group_choices_and_the_settings_off_their_defaults(tiny, tmp_path):
    out = tmp_path / "runs"
    common = [f"dataset.root={tiny}", f"output_root={out}", f"frames.cache_dir={tmp_path / 'cache'}",
              "logging.wandb.mode=disabled", "logging.progress=false", "dataset.tasks=[ER]"]
    apm_run(*common, "memory=none", "memory.recent_frames=8", "backbone=random", "backbone.seed=3")
    apm_run(*common, "memory=none", "backbone=random")
    apm_run(*common, f"hydra.searchpath=[file://{REPO / 'examples' / 'conf'}]", "memory=keyframes",
            "memory.every_s=5", "backbone=my_backbone", "+backbone@writer=oracle")
    recs = [r for p in out.rglob("records/*.jsonl") for r in map(json.loads, p.read_text().splitlines())]
    schema = json.loads(resources.files("apm.records").joinpath("schemas", "record.schema.json").read_text())
    for r in recs:
        jsonschema.validate(r, schema)
    runs = {(r["run"]["choices"]["memory"], json.dumps(r["run"]["overrides"])): r["run"] for r in recs}
    assert set(runs) == {("none", '{"memory.recent_frames": 8, "backbone.seed": 3}'), ("none", "{}"),
                         ("keyframes", '{"memory.every_s": 5}')}
    plain = runs["none", "{}"]
    assert plain["choices"] == {"dataset": "synthetic", "memory": "none", "backbone": "random", "writer": None,
                                "judge": None}
    outside = runs["keyframes", '{"memory.every_s": 5}']
    # the writer given is no part of a method that writes nothing (KeyframeMemory)
    assert outside["choices"] | {"dataset": None} == {"dataset": None, "memory": "keyframes",
                                                      "backbone": "my_backbone", "writer": None, "judge": None}


def test_without_a_hydra_app_choices_and_overrides_are_unknown(tiny, tmp_path):
    run_dir = run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", ["memory=none", "dataset.tasks=[ER]"]))
    (only,) = {json.dumps(r["run"], sort_keys=True) for r in records(run_dir)}
    assert json.loads(only)["choices"] == dict.fromkeys(["dataset", "memory", "backbone", "writer", "judge"])
    assert json.loads(only)["overrides"] is None


def _identity(root: Path, *overrides: str) -> tuple[str, dict]:
    """The config hash and the method identity (choices, overrides) of a config, as ``apm-run`` computes them."""
    from omegaconf import open_dict

    from apm.runner.config import method_identity

    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        cfg = compose("config", overrides=[f"dataset.root={root}", *overrides], return_hydra_config=True)
        hydra = cfg.hydra
        with open_dict(cfg):
            del cfg["hydra"]
        return config_hash(cfg), method_identity(cfg, hydra)


@pytest.mark.parametrize("memory", ["none", "raw_video", "kv_cache"])
def test_a_writer_the_method_does_not_use_is_neither_in_its_hash_nor_its_label(tiny, memory):
    """Issue 36 item 6: a summary writer swept over every method lands only in those that write."""
    plain = _identity(tiny, f"memory={memory}")
    given = _identity(tiny, f"memory={memory}", "+backbone@writer=perceiver", "writer.max_frames=8")
    assert given == plain
    assert given[1]["choices"]["writer"] is None and not any(k.startswith("writer") for k in given[1]["overrides"])


@pytest.mark.parametrize("memory", ["text_summary", "event_memory"])
def test_a_writer_the_method_uses_is_in_its_hash_and_its_label(tiny, memory):
    plain = _identity(tiny, f"memory={memory}")
    given = _identity(tiny, f"memory={memory}", "+backbone@writer=perceiver")
    assert given[0] != plain[0] and given[1]["choices"]["writer"] == "perceiver"
