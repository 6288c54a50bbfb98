"""The tests' support package is one place (tests/support) and its spies are fixtures: every log a spy
keeps on its class is on the one registry conftest's ``fresh_spies`` empties around each test."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import support
from support.spies import SPY_LOGS, PixelSpy

TESTS = Path(__file__).parent


CHILD_ONLY = {"vllm_offline_worker", "child_systems", "tf4_system"}
"""Modules that run only in child processes (their class attributes live and die with each child)."""


def _support_modules() -> list[str]:
    return [f"support.{m.name}" for m in pkgutil.iter_modules(support.__path__) if m.name not in CHILD_ONLY]


def _class_logs() -> dict[str, object]:
    """Every mutable container a class of the support package keeps on itself, by its dotted name."""
    logs = {}
    for name in _support_modules():
        module = importlib.import_module(name)
        for cls in vars(module).values():
            if inspect.isclass(cls) and cls.__module__ == name:
                for attr, value in vars(cls).items():
                    if isinstance(value, (dict, list, set)) and not attr.startswith("__"):
                        logs[f"{name}.{cls.__name__}.{attr}"] = value
    return logs


def test_every_log_a_spy_keeps_on_its_class_is_emptied_around_each_test() -> None:
    logs = _class_logs()
    assert {"support.spies.PixelSpy.ANSWERED", "support.adversaries.Omniscient.READ"} <= logs.keys()
    registered = {id(log) for log in SPY_LOGS}
    assert [name for name, log in logs.items() if id(log) not in registered] == []


def test_a_spy_log_left_by_a_test_is_empty_in_the_next_one_part_1() -> None:
    """Leaves an entry in a spy's log (the next test sees none)."""
    PixelSpy.ANSWERED["left"] = {}


def test_a_spy_log_left_by_a_test_is_empty_in_the_next_one_part_2() -> None:
    assert PixelSpy.ANSWERED == {}


def test_the_tests_helpers_live_in_the_support_package_alone() -> None:
    """Besides the test modules, conftest.py and the support package, tests/ holds no Python module."""
    loose = [p.name for p in TESTS.glob("*.py") if not p.name.startswith("test_") and p.name != "conftest.py"]
    assert loose == []
