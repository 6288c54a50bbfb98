"""Imports follow the data flow (docs/architecture.md): every arrow between ``apm``'s folders is one
the picture allows, and the light stages load nothing heavy."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "apm"

ALLOWED: dict[str, set[str]] = {
    "data": set(),
    "configs": set(),
    "records": {"data"},
    "errors": {"records"},
    "video": {"data", "records"},
    "synth": {"data", "records", "video"},
    "backbones": {"data", "video", "records", "synth"},  # synth: the pixel-perceiver reference reads its scenes
    "prompts": {"data", "video", "backbones"},
    "memory": {"data", "video", "records", "backbones", "prompts"},
    "streaming": {"data", "video", "records", "backbones", "prompts", "memory"},
    "judge": {"data", "records", "backbones"},
    "runner": {"data", "configs", "records", "errors", "video", "backbones", "prompts", "memory", "streaming",
               "judge", "live"},
    "live": {"records"},
    "scale": {"data", "configs", "records", "errors", "runner"},
    "reduce": {"data", "records"},
    "publish": {"data", "records", "video", "reduce"},
    "view": {"data", "records", "video", "reduce"},
    "testing": {"data", "records"},
}
"""Which folders each folder may import (``apm/<name>/`` or ``apm/<name>.py``). A command-line module
(``apm/cli/…``, or ``<folder>/cli.py``) sits on top of everything and may import any of them; no
folder may import ``testing`` (the test rigs)."""


def _node(module: str) -> str:
    """The folder a module belongs to, or ``cli`` for a command-line module."""
    parts = module.split(".")
    return "cli" if parts[1] == "cli" or parts[-1] == "cli" else parts[1]


def _imports(path: Path) -> set[str]:
    """The ``apm.*`` modules ``path`` imports (anywhere in it: inline imports count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("apm.")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("apm."):
            found.add(node.module)
    return found


def arrows() -> dict[tuple[str, str], set[str]]:
    """Every arrow between two folders, with the modules that draw it."""
    out: dict[tuple[str, str], set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        if module == "apm":
            continue
        for imported in _imports(path):
            a, b = _node(module), imported.split(".")[1]
            if a != b and a != "cli":
                out.setdefault((a, b), set()).add(module)
    return out


def test_every_arrow_is_allowed() -> None:
    wrong = {f"{a} -> {b}: {sorted(m)}" for (a, b), m in arrows().items() if b not in ALLOWED.get(a, set())}
    assert not wrong, "\n".join(sorted(wrong))


def test_every_folder_is_in_the_picture() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()} - {"cli"}
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert folders | modules == set(ALLOWED)


@pytest.mark.parametrize(("module", "absent"), [
    ("apm.reduce", ("hydra", "apm.runner", "apm.judge")),
    ("apm.judge", ("apm.runner", "apm.video")),
    ("apm.judge.stage", ("apm.runner", "apm.video")),
    ("apm.records.lines", ("hydra", "pandas", "apm.runner")),
])
def test_light_stages_load_nothing_heavy(module: str, absent: tuple[str, ...]) -> None:
    probe = (f"import sys, {module}; print(sorted(m for m in sys.modules if m.split('.')[0] in "
             "('hydra', 'pandas') or m.startswith(('apm.runner', 'apm.judge', 'apm.video'))))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert not [a for a in absent if f"'{a}'" in loaded or f"'{a}." in loaded], loaded
