"""A system in an environment with transformers 4.x (Python 3.9, ``.ci/tf4-env.sh``) passes
``apm-check-system`` through the process boundary, and its memory lines say what it ran with. CI builds
the environment (``APM_REQUIRE_TF4=1``); elsewhere the test needs ``APM_TF4_PYTHON``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.runner import compose_run, memory_records, run

SUPPORT = Path(__file__).resolve().parent / "support"
TF4_PYTHON = os.environ.get("APM_TF4_PYTHON")

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not TF4_PYTHON and os.environ.get("APM_REQUIRE_TF4") != "1",
                                 reason="no transformers 4.x environment (APM_TF4_PYTHON; CI builds it)")]


def tf4_config(tmp_path: Path) -> Path:
    """The memory config of tests/support/tf4_system.py run by the side environment's Python."""
    assert TF4_PYTHON, "APM_REQUIRE_TF4=1 but APM_TF4_PYTHON is not set"
    node = {"_target_": "apm.boundary.ChildSystem", "name": "Keyframes on transformers 4.x (test)",
            "command": [TF4_PYTHON, "-m", "apm_child", f"{SUPPORT / 'tf4_system.py'}:Tf4Keyframes"],
            "declaration": {"family": "specialised", "streaming": True, "persistent": True, "representation": ""},
            "options": {"every_s": 10}, "read": [str(SUPPORT)], "env": {}, "seal": "auto", "network": False,
            "deviations": []}
    path = tmp_path / "tf4_keyframes.yaml"
    path.write_text(yaml.safe_dump(node))
    return path


def test_a_transformers_4_system_passes_apm_check_system_through_the_boundary(tmp_path) -> None:
    done = subprocess.run([str(Path(sys.executable).parent / "apm-check-system"), str(tf4_config(tmp_path)),
                           "--backbone", "perceiver"], capture_output=True, text=True, timeout=900)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert [x for x in lines if x.startswith("FAIL")] == [] and sum(x.startswith("PASS") for x in lines) >= 9


def test_its_memory_lines_name_the_environment_it_ran_in(tiny, tmp_path) -> None:
    command = [TF4_PYTHON, "-m", "apm_child", f"{SUPPORT / 'tf4_system.py'}:Tf4Keyframes"]
    run_dir = run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", [
        "memory=child_template", "backbone=perceiver", f"memory.command=[{','.join(map(repr, command))}]",
        f"memory.read=[{str(SUPPORT)!r}]", "memory.name=tf4"]))
    lines = memory_records(run_dir)
    assert {m["error"] for m in lines} == {None}
    assert {(m["boundary"]["child"]["python"], m["boundary"]["child"]["transformers"][:2]) for m in lines} == {
        ("3.9", "4.")}
