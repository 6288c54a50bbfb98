"""Imports follow the data flow (docs/architecture.md): every arrow between ``apm``'s folders is one
the doc's table allows, the table has no cycle and draws no arrow the code lacks, and the light
stages load nothing heavy. Each kind of violation is built in a temporary tree and must fail."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "apm"
PICTURE = ROOT / "docs" / "architecture.md"
HEADER = re.compile(r"^\|\s*folder\s*\|\s*may import\s*\|")

Graph = dict[str, set[str]]


def allowed_arrows(doc: str) -> Graph:
    """The doc's table (``| folder | may import | … |``): each folder and the folders it may import."""
    lines = iter(doc.splitlines())
    for line in lines:
        if HEADER.match(line):
            break
    else:
        raise AssertionError("no '| folder | may import |' table in the doc")
    next(lines)  # the |---| row
    graph: Graph = {}
    for line in lines:
        if not line.startswith("|"):
            break
        folder, imports = (cell.strip() for cell in line.strip("|").split("|")[:2])
        graph[_name(folder)] = {_name(n) for n in re.findall(r"`([^`]+)`", imports)}
    return graph


def _name(cell: str) -> str:
    """``data/`` or ``errors.py`` (with or without backticks) as the node name ``data`` / ``errors``."""
    return cell.strip("` ").removesuffix("/").removesuffix(".py")


def cycle(graph: Mapping[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` as its nodes in order (first repeated last), or ``[]`` if it has none."""
    done: set[str] = set()

    def walk(path: list[str]) -> list[str]:
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt in path:
                return path[path.index(nxt):] + [nxt]
            if nxt not in done and (found := walk(path + [nxt])):
                return found
        done.add(path[-1])
        return []

    return next((found for start in sorted(graph) if (found := walk([start]))), [])


def module_name(path: Path, package: Path) -> str:
    """``apm/x/y.py`` as ``apm.x.y`` (a package's ``__init__`` as the package)."""
    return ".".join(path.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__")


def imported_modules(source: str, module: str, is_package: bool) -> Iterator[str]:
    """Every ``apm`` module ``source`` names in an import: ``import apm.x``, ``from apm.x import y``,
    ``from apm import x`` (as ``apm.x``), relative imports resolved against ``module``, and
    ``importlib.import_module``/``__import__`` with a literal name. Imports inside functions count too."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, package)
            yield base
            yield from (f"{base}.{a.name}" for a in node.names if a.name != "*")
        elif isinstance(node, ast.Call) and _is_import_call(node.func) and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                anchor = next((k.value for k in node.keywords if k.arg == "package"), None)
                name = first.value
                if name.startswith(".") and isinstance(anchor, ast.Constant):
                    dots = len(name) - len(name.lstrip("."))
                    name = _absolute(name[dots:] or None, dots, str(anchor.value))
                yield name


def _absolute(name: str | None, level: int, package: str) -> str:
    """The absolute module a ``from`` import names (``level`` leading dots, relative to ``package``)."""
    if level == 0:
        return name or ""
    parts = package.split(".")
    base = parts[: len(parts) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _is_import_call(func: ast.expr) -> bool:
    """A call of ``importlib.import_module``, ``import_module`` or ``__import__``."""
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in ("import_module", "__import__")


def node_of(module: str, nodes: set[str]) -> str | None:
    """The folder (``apm/<name>/`` or ``apm/<name>.py``) a module belongs to; ``None`` outside ``apm``'s
    folders (``apm`` itself, ``apm.__version__``, other packages)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "apm" and len(parts) > 1 and parts[1] in nodes else None


def nodes_of(package: Path) -> set[str]:
    """The folders of ``package``: its subpackages and its top-level modules."""
    folders = {p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    return folders | {p.stem for p in package.glob("*.py")} - {"__init__"}


def arrows(package: Path) -> dict[tuple[str, str], set[str]]:
    """Every arrow between two folders of ``package``, with the modules that draw it."""
    nodes = nodes_of(package)
    out: dict[tuple[str, str], set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        module = module_name(path, package)
        source = node_of(module, nodes)
        if source is None:
            continue
        for imported in imported_modules(path.read_text(encoding="utf-8"), module, path.name == "__init__.py"):
            target = node_of(imported, nodes)
            if target is not None and target != source:
                out.setdefault((source, target), set()).add(module)
    return out


def violations(package: Path, allowed: Graph) -> list[str]:
    """Everything wrong between ``package``'s imports and the ``allowed`` picture, one line each."""
    drawn = arrows(package)
    wrong = [f"{a} -> {b} is not in the picture: {sorted(m)}" for (a, b), m in drawn.items()
             if b not in allowed.get(a, set())]
    wrong += [f"{a} -> {b} is in the picture but no module imports it"
              for a, targets in allowed.items() for b in targets if (a, b) not in drawn]
    if loop := cycle(allowed):
        wrong.append("the picture has a cycle: " + " -> ".join(loop))
    nodes = nodes_of(package)
    wrong += [f"folder {n} is not in the picture" for n in sorted(nodes - set(allowed))]
    wrong += [f"the picture names {n}, which is not a folder" for n in sorted(set(allowed) - nodes)]
    return sorted(wrong)


def test_the_code_draws_exactly_the_picture() -> None:
    wrong = violations(PACKAGE, allowed_arrows(PICTURE.read_text(encoding="utf-8")))
    assert not wrong, "\n".join(wrong)


def test_no_folder_imports_the_test_rigs() -> None:
    picture = allowed_arrows(PICTURE.read_text(encoding="utf-8"))
    assert not [folder for folder, targets in picture.items() if "testing" in targets]


# --- each kind of violation, in a temporary tree ---------------------------------------------

TREE_PICTURE = """\
| folder | may import | its one job |
| --- | --- | --- |
| `data/` | — | the bottom |
| `records/` | `data` | lines |
| `runner/` | `records`, `data` | the run |
| `testing/` | `records` | rigs |
| `cli/` | `runner`, `records` | entry points |
"""

TREE = {
    "apm/__init__.py": "",
    "apm/data/__init__.py": "",
    "apm/data/model.py": "X = 1\n",
    "apm/records/__init__.py": "from apm.data.model import X\n",
    "apm/records/lines.py": "from . import X\n",
    "apm/runner/__init__.py": "import apm.records\nfrom apm.data import model\n",
    "apm/testing/__init__.py": "from apm.records import lines\n",
    "apm/cli/__init__.py": "",
    "apm/cli/run.py": "from apm.runner import main\nfrom apm.records import lines\n",
}


def _tree(tmp_path: Path, changes: Mapping[str, str]) -> Path:
    """The temporary tree ``TREE`` with ``changes`` (path -> source) applied; its ``apm`` folder."""
    for rel, text in {**TREE, **changes}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    return tmp_path / "apm"


def test_the_clean_tree_passes(tmp_path: Path) -> None:
    assert violations(_tree(tmp_path, {}), allowed_arrows(TREE_PICTURE)) == []


@pytest.mark.parametrize(("changes", "expected"), [
    ({"apm/records/jsonl.py": "import apm.runner\n"}, "records -> runner is not in the picture"),
    ({"apm/records/jsonl.py": "from ..runner import main\n"}, "records -> runner is not in the picture"),
    ({"apm/records/jsonl.py": "from .. import runner\n"}, "records -> runner is not in the picture"),
    ({"apm/records/jsonl.py": "from apm import runner\n"}, "records -> runner is not in the picture"),
    ({"apm/records/jsonl.py": "import importlib\nrun = importlib.import_module('apm.runner')\n"},
     "records -> runner is not in the picture"),
    ({"apm/records/jsonl.py": "from importlib import import_module\nimport_module('.runner', package='apm')\n"},
     "records -> runner is not in the picture"),
    ({"apm/records/jsonl.py": "def late():\n    from apm.runner import main\n"}, "records -> runner is not"),
    ({"apm/data/cli.py": "from apm.runner import main\n"}, "data -> runner is not in the picture"),
    ({"apm/cli/reduce.py": "from apm.testing import rig\n"}, "cli -> testing is not in the picture"),
    ({"apm/runner/app.py": "from apm.cli import run\n"}, "runner -> cli is not in the picture"),
    ({"apm/view/__init__.py": ""}, "folder view is not in the picture"),
], ids=["upward", "relative-upward", "relative-package", "from-apm-import", "importlib-literal",
        "importlib-relative", "function-level", "stage-cli-module", "cli-imports-testing", "stage-imports-cli",
        "unpictured-folder"])
def test_each_violation_fails(tmp_path: Path, changes: dict[str, str], expected: str) -> None:
    wrong = violations(_tree(tmp_path, changes), allowed_arrows(TREE_PICTURE))
    assert any(line.startswith(expected) for line in wrong), wrong


def test_a_cycle_in_the_picture_fails(tmp_path: Path) -> None:
    picture = TREE_PICTURE.replace("| `data/` | — |", "| `data/` | `runner` |")
    wrong = violations(_tree(tmp_path, {"apm/data/x.py": "from apm.runner import main\n"}),
                       allowed_arrows(picture))
    assert "the picture has a cycle: data -> runner -> data" in wrong, wrong


def test_an_arrow_no_code_draws_fails(tmp_path: Path) -> None:
    picture = TREE_PICTURE.replace("| `records/` | `data` |", "| `records/` | `data`, `testing` |")
    wrong = violations(_tree(tmp_path, {}), allowed_arrows(picture))
    assert "records -> testing is in the picture but no module imports it" in wrong, wrong


def test_a_picture_without_its_table_is_refused() -> None:
    with pytest.raises(AssertionError, match="no '| folder | may import |' table"):
        allowed_arrows("# Architecture\n\nno table here\n")


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
