"""Import hygiene of the product (docs/architecture.md, "Import hygiene"): no function-level import of
``apm`` hides a cycle, and the file-level import graph of ``apm/`` has no circle.

The graph counts every import form, wherever it stands (module level, under ``TYPE_CHECKING``, inside a
function): ``import apm.x``, ``from apm.x import y``, relative imports and ``importlib.import_module``
with a literal name. ``from pkg import name`` draws an arrow to ``pkg.name`` when that is a module, else
to ``pkg`` (its ``__init__``); a package's ``__init__`` is not counted as imported by its submodules.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "apm"

FUNCTION_LEVEL_ALLOWED: dict[tuple[str, str], str] = {}
"""``(module, imported module)`` pairs that may import inside a function, each with its reason: only an
optional heavy engine (vLLM, a torch-based backbone) that a run without it must not load. None is needed
today: those engines import their heavy dependency (not an ``apm`` module) lazily."""
LAZY_ENTRY_POINTS = "apm.cli"
"""The console entry points (``apm/cli/``) import what they run inside their functions: a command parses its
arguments and answers ``--help`` and ``--version`` before it loads pandas, matplotlib, Hydra or torch
(docs/performance.md, "Start-up"; tests/test_cli_basics.py). Their imports still count in the graph below,
so they can hide no circle."""


def module_name(path: Path, package: Path = PACKAGE) -> str:
    """The dotted module name of a file below ``package`` (``apm/runner/__init__.py`` → ``apm.runner``)."""
    return ".".join(path.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__")


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of ``package`` by dotted name."""
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))}


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute name a ``from … import`` statement imports from (relative ones resolved)."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imported(module: str, path: Path, tree: ast.Module, known: set[str]) -> Iterator[tuple[ast.AST, str]]:
    """Each ``apm`` module that ``module`` (parsed as ``tree``) imports, every form, with the node that imports it."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node, a.name) for a in node.names if a.name.split(".")[0] == "apm")
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, is_package, node)
            if source.split(".")[0] != "apm":
                continue
            for alias in node.names:
                yield node, f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and node.args[0].value.split(".")[0] == "apm"):
            yield node, node.args[0].value


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module → the modules of ``package`` it imports (a package's own ``__init__`` left out)."""
    found = modules(package)
    known = set(found)
    graph: dict[str, set[str]] = {}
    for module, path in found.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        targets = {target for _, target in imported(module, path, tree, known) if target in known}
        graph[module] = {t for t in targets if t != module and not module.startswith(t + ".")}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def function_level_imports(package: Path = PACKAGE) -> list[str]:
    """Every ``apm`` import inside a function of ``package`` not on :data:`FUNCTION_LEVEL_ALLOWED`, as
    ``path:line module -> imported``."""
    found = modules(package)
    known = set(found)
    wrong = []
    for module, path in found.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        inner = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
        for node, target in imported(module, path, tree, known):
            lazy = module == LAZY_ENTRY_POINTS or module.startswith(LAZY_ENTRY_POINTS + ".")
            if id(node) in inner and not lazy and (module, target) not in FUNCTION_LEVEL_ALLOWED:
                wrong.append(f"{path.relative_to(package.parent)}:{getattr(node, 'lineno', '?')} {module} -> {target}")
    return wrong


def test_no_function_level_import_of_apm_in_the_product() -> None:
    wrong = function_level_imports()
    assert not wrong, "function-level imports of apm (move them to module level):\n" + "\n".join(wrong)


def test_the_file_level_import_graph_has_no_circle() -> None:
    found = circles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" ⇄ ".join(c) for c in found)


def test_every_allowed_function_level_import_exists_and_says_why() -> None:
    known = set(modules())
    for (module, target), reason in FUNCTION_LEVEL_ALLOWED.items():
        assert module in known and target in known and reason.strip(), (module, target)


def _write(root: Path, files: dict[str, str]) -> Path:
    package = root / "apm"
    for name, text in {"__init__.py": "", **files}.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    return package


@pytest.mark.parametrize("files", [
    {"a.py": "import apm.b\n", "b.py": "import apm.a\n"},
    {"a.py": "from apm import b\n", "b.py": "from apm.a import thing\n"},
    {"p/__init__.py": "", "p/a.py": "from . import b\n", "p/b.py": "from .a import thing\n"},
    {"p/__init__.py": "", "p/a.py": "from .. import c\n", "c.py": "from apm.p.a import thing\n"},
    {"a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from apm.b import B\n",
     "b.py": "def f():\n    from apm.c import g\n", "c.py": "import importlib\nimportlib.import_module('apm.a')\n"},
], ids=["import", "from-apm-import", "relative", "relative-parent", "type-checking-lazy-importlib"])
def test_a_circle_of_any_import_form_is_found(tmp_path: Path, files: dict[str, str]) -> None:
    assert circles(import_graph(_write(tmp_path, files)))


def test_a_package_reexporting_its_submodule_is_no_circle(tmp_path: Path) -> None:
    package = _write(tmp_path, {"p/__init__.py": "from apm.p.a import f\n", "p/a.py": "from apm.p.b import g\n",
                                "p/b.py": "X = 1\n"})
    assert not circles(import_graph(package))


@pytest.mark.parametrize("text", [
    "def f():\n    import apm.b\n",
    "def f():\n    from apm.b import g\n",
    "class C:\n    async def f(self):\n        from . import b\n",
])
def test_a_function_level_import_of_apm_is_found(tmp_path: Path, text: str) -> None:
    package = _write(tmp_path, {"a.py": text, "b.py": "def g():\n    import json\n"})
    assert len(function_level_imports(package)) == 1
