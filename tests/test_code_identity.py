"""Code is identity (issue 19): records name the code that made them; a rerun with other code is
refused in one line (``rerun=all`` redoes what other code made); ``rerun_errors`` is refused with the
key that replaced it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from support.runner import release_sessions

from apm.records.jsonl import latest_records
from apm.runner import code

REPO = Path(__file__).resolve().parents[1]
PLUGIN = '''"""A plug-in backbone outside the apm package, as examples/ has them."""

from apm.backbones.baselines import RandomBaseline


class Mine(RandomBaseline):
    """The random baseline under another name."""

    name = "mine"
'''


def _apm_run(tiny: Path, tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp / "plugins"), str(REPO)]), "WANDB_MODE": "disabled"}
    return subprocess.run(
        [sys.executable, "-m", "apm.cli.run", f"dataset.root={tiny}", f"output_root={tmp / 'runs'}",
         f"frames.cache_dir={tmp / 'cache'}", "logging.wandb.mode=disabled", "logging.progress=false",
         "memory=none", "backbone=random", "backbone._target_=mybackbone.Mine", "dataset.tasks=[ER,CT]", *extra],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=300)


def _run_dir(tmp: Path) -> Path:
    return next((tmp / "runs").rglob("config.json")).parent


def test_an_edited_plugin_module_is_refused_until_rerun_all(tiny, tmp_path):
    (tmp_path / "plugins").mkdir()
    module = tmp_path / "plugins" / "mybackbone.py"
    module.write_text(PLUGIN)
    first = _apm_run(tiny, tmp_path)
    assert first.returncode == 0, first.stderr
    run_dir = _run_dir(tmp_path)
    saved = json.loads((run_dir / "config.json").read_text())
    assert set(saved["code"]["modules"]) == {"mybackbone"}
    assert saved["code"]["apm"]["source_sha256"] == code.apm_code()["source_sha256"]
    before = latest_records(run_dir / "records")
    assert {r["run"]["code"] for r in before.values()} == {saved["code_identity"]}

    module.write_text(PLUGIN.replace("under another name", "under another name, edited"))
    files = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and "locks" not in p.parts}
    refused = _apm_run(tiny, tmp_path)
    assert refused.returncode != 0
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert f"{len(before)} records and {release_sessions(tiny)} memory lines" in lines[0], lines[0]
    assert "made by other code" in lines[0], lines[0]
    assert "module mybackbone changed" in lines[0] and "rerun=all" in lines[0], lines[0]
    assert {p: p.read_bytes() for p in files} == files  # nothing written, config.json included
    assert json.loads((run_dir / "config.json").read_text())["code_identity"] == saved["code_identity"]

    redone = _apm_run(tiny, tmp_path, "rerun=all")
    assert redone.returncode == 0, redone.stderr
    assert f"0 already on record, {len(before)} new" in redone.stdout, redone.stdout
    now = json.loads((run_dir / "config.json").read_text())["code_identity"]
    assert now != saved["code_identity"]
    assert {r["run"]["code"] for r in latest_records(run_dir / "records").values()} == {now}
    for repeated in ("rerun=all", None):  # a requeued rerun=all resumes; then a plain run finds it done
        again = _apm_run(tiny, tmp_path, *([repeated] if repeated else []))
        assert again.returncode == 0 and f"{len(before)} already on record, 0 new" in again.stdout, again.stderr


def test_rerun_all_redoes_only_what_other_code_made(tiny, tmp_path):
    """A ``rerun=all`` stopped after part of the run (here: a try of 5) and run again redoes the rest only."""
    (tmp_path / "plugins").mkdir()
    module = tmp_path / "plugins" / "mybackbone.py"
    module.write_text(PLUGIN)
    assert _apm_run(tiny, tmp_path).returncode == 0
    total = len(latest_records(_run_dir(tmp_path) / "records"))
    module.write_text(PLUGIN + "\n# edited\n")
    part = _apm_run(tiny, tmp_path, "rerun=all", "dataset.limit=5")
    assert part.returncode == 0 and "0 already on record, 5 new" in part.stdout, part.stdout
    refused = _apm_run(tiny, tmp_path)
    assert refused.returncode != 0 and f"holds {total - 5} records" in refused.stderr, refused.stderr
    rest = _apm_run(tiny, tmp_path, "rerun=all")
    assert rest.returncode == 0 and f"5 already on record, {total - 5} new" in rest.stdout, rest.stdout


def test_an_edit_of_apm_answer_path_changes_its_identity(tmp_path, monkeypatch):
    package = tmp_path / "apm"
    for sub in code.ANSWER_PATH:
        shutil.copytree(Path(code.__file__).parents[1] / sub, package / sub,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(Path(code.__file__).parents[1] / "reduce", package / "reduce")
    monkeypatch.setattr(code, "_PACKAGE", package)
    original = code.apm_code.__wrapped__()
    assert original["source_sha256"] == code.apm_code()["source_sha256"]  # the installed sources, read alike
    (package / "reduce" / "tables.py").write_text("# after the records: not the answers' code\n")
    assert code.apm_code.__wrapped__() == original
    prompts = package / "prompts" / "templates"
    template = sorted(p for p in prompts.rglob("*") if p.is_file())[0]
    template.write_text(template.read_text() + "\n")
    assert code.apm_code.__wrapped__()["source_sha256"] != original["source_sha256"]


def test_the_old_rerun_errors_key_is_refused_naming_its_replacement(tiny, tmp_path):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "mybackbone.py").write_text(PLUGIN)
    said = _apm_run(tiny, tmp_path, "rerun_errors=true")
    assert said.returncode != 0
    lines = said.stderr.strip().splitlines()
    assert len(lines) == 1 and "rerun=errors" in lines[0] and "rerun=all" in lines[0], said.stderr
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").rglob("*.jsonl"))
