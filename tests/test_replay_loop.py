"""The one replay loop (docs/architecture.md, "The replay loop"): a setup owns its streaming system's
pristine copy, and no runner module reaches into another object's private members."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from apm.memory.simple import SimpleStream
from apm.runner import latency
from apm.runner.setup import RunSetup
from apm.streaming.events import EventMemory

RUNNER = Path(__file__).resolve().parents[1] / "apm" / "runner"


def _setup(protocol, tmp_path: Path) -> RunSetup:
    return RunSetup(release=None, run_dir=tmp_path, run_info={}, protocol=protocol, backbone=None,  # type: ignore[arg-type]
                    writer=None, cache=None, max_frames=4)  # type: ignore[arg-type]


def test_a_setup_owns_the_pristine_copy_of_its_streaming_system(tmp_path: Path) -> None:
    system = EventMemory(cut=4.0)
    setup = _setup(system, tmp_path)
    system.cut = 99.0  # what a run does to the system after the setup is made
    fresh = setup.fresh_system()
    assert isinstance(fresh, EventMemory) and fresh.cut == 4.0 and fresh is not system
    assert setup.fresh_system() is not fresh  # each restricted set gets its own copy
    timed = latency.isolated(setup)  # the latency.sample pass after the main run
    assert timed.pristine is setup.pristine and timed.fresh_system().cut == 4.0
    other = _setup(EventMemory(cut=2.0), tmp_path)
    assert other.pristine is not setup.pristine and other.fresh_system().cut == 2.0


def test_a_memory_protocol_has_no_system_to_copy(tmp_path: Path) -> None:
    setup = _setup(SimpleStream(), tmp_path)
    assert setup.pristine is None
    with pytest.raises(TypeError, match="no system to copy"):
        setup.fresh_system()


def private_reaches(folder: Path) -> list[str]:
    """Every ``x._name`` in ``folder``'s modules where ``x`` is not ``self`` or ``cls``."""
    found = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
                found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    return found


def test_no_runner_module_reaches_into_another_objects_private_members() -> None:
    assert not private_reaches(RUNNER)


def test_a_reach_into_a_private_member_is_found(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("def f(run):\n    run._todo()\n    return self._ok\n")
    assert private_reaches(tmp_path) == ["m.py:2 run._todo"]
