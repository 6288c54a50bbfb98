"""The score screen ``apm-run`` ends with: per task, what the records of the instances it just ran say,
from the gate alone (no judge has scored an adaptive answer yet), and how many outputs did not parse.
``apm-reduce`` computes the paper's scores; this is the glance that shows a broken prompt or parser
before a sweep is judged."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from apm.data.tasks import ADAPTIVE, EA, TASKS

GATE_ONLY = ("gate only: MCQA/EA is accuracy, adaptive the gate pass rate, not the judged score "
             "(apm-judge, then apm-reduce)")


def score_summary(records: Iterable[dict[str, Any]], subset: str = "") -> str:
    """One screen: a row per task (instances, score, errors, parse failures) and a totals line; ``subset``
    names the selection when the job ran part of its shard, so the numbers are not taken for the run's."""
    by_task: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_task.setdefault(record["task"], []).append(record)
    rows = [_row(task, by_task[task]) for task in (*TASKS, EA) if task in by_task]
    failed = sum(_parse_failures(rs) for rs in by_task.values())
    errors = sum(_errors(rs) for rs in by_task.values())
    total = sum(len(rs) for rs in by_task.values())
    head = f"apm-run: scores of {total} instances{f' (a subset: {subset})' if subset else ''} — {GATE_ONLY}"
    table = [f"  {'task':<5} {'n':>5} {'score':>7} {'errors':>7} {'parse failures':>15}", *rows]
    return "\n".join([head, *table, f"  {failed} parse failures, {errors} errors"])


def _row(task: str, records: list[dict[str, Any]]) -> str:
    field = "gate_pass" if task in ADAPTIVE else "correct"
    hits = sum(r.get(field) is True for r in records)
    score = f"{100 * hits / len(records):.1f}%"
    return f"  {task:<5} {len(records):>5} {score:>7} {_errors(records):>7} {_parse_failures(records):>15}"


def _parse_failures(records: list[dict[str, Any]]) -> int:
    return sum(r.get("parse_status") == "failed" for r in records)


def _errors(records: list[dict[str, Any]]) -> int:
    return sum(r.get("error") is not None for r in records)
