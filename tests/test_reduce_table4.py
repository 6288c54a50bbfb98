"""Capability scores and Overall reproduce the paper's Table 4 from its own task scores."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from conftest import SPEC_EXCERPT

from apm.data.tasks import TASKS
from apm.reduce.scores import evaluate, sample
from apm.reduce.units import STATS

ROW = re.compile(r"^(?P<name>.+?) (?P<values>(?:\d+\.\d+ ){12}\d+\.\d+)")


def table4_rows() -> list[tuple[str, list[float]]]:
    """(method, 12 task scores + Overall) for every parseable row of the spec's Table 4."""
    text = SPEC_EXCERPT.read_text(encoding="utf-8")
    start = text.index("Model / Method Cross-session")
    block = text[start : text.index("\n\n", start)]
    rows = [ROW.match(line) for line in block.splitlines()]
    return [(m["name"], [float(v) for v in m["values"].split()]) for m in rows if m]


def overall_from(task_scores: list[float]) -> float:
    """Overall computed by apm.reduce from one candidate per task scoring the given values."""
    samples = {}
    for task, score in zip(TASKS, task_scores):
        unit = pd.Series(0.0, index=STATS)
        unit[["score", "scored"]] = [score, 1.0]
        samples[task] = sample(unit.to_numpy()[None, :], STATS, task, seed=0, reps=0)
    found = {(e.metric, e.task): e.value for e in evaluate(samples)}
    return found[("overall", "all")]


def test_spec_table_parses() -> None:
    rows = table4_rows()
    assert len(rows) >= 21
    assert {"SimpleStream", "Gemini 3.6 Flash"} <= {name for name, _ in rows}


@pytest.mark.parametrize(("name", "values"), table4_rows(), ids=lambda v: v if isinstance(v, str) else "")
def test_overall_matches_table4(name: str, values: list[float]) -> None:
    assert overall_from(values[:12]) == pytest.approx(values[12], abs=0.005 + 1e-9)
