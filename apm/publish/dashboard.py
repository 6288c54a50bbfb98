"""A W&B Report and a saved workspace view of one group's ``reduce`` runs that are the paper's Tables 3
and 4 (the runs table, its columns in the paper's order), Figure 2 (Overall against latency and against
storage) and the per-task scores a radar chart draws (Figures 7–8), built with wandb-workspaces;
offline, their specification is written as JSON instead (docs/publish.md, "The Report")."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from apm.data.tasks import TASKS
from apm.publish.axes import LOG_STORAGE
from apm.records.atomic import write_json_atomically
from apm.reduce.tables import TABLES, Table
from apm.reduce.units import ALL

REPORT_FILE = "report.json"
"""The Reports' specification, offline, in the publish folder."""
FIGURE2 = {"x": f"ttft_s/{ALL}", "y": f"overall/{ALL}", "storage": LOG_STORAGE}
"""Figure 2's axes as summary keys: latency (x), Overall (y) and storage per video hour (bubble size) as
log10(1 + B/h) on a linear axis, so 0 B/h methods are drawn (:data:`~apm.publish.axes.LOG_STORAGE`)."""
PAPER_ORDER = "paper_order"
"""The config key the runs tables sort by: the paper's row order (:func:`~apm.publish.axes.paper_order`)."""
RADAR = tuple(f"task_score/{t}" for t in TASKS)
"""The 12 task scores of Figures 7–8, on the radar's axes, in its order."""


def table_columns(name: str) -> list[str]:
    """A paper table's columns as runs-table columns, in the paper's order: the run's name (the paper's
    row name), its ✓/✗ attributes as config keys (Table 3's Streaming and Persistent), then its numbers
    as summary keys (``task_score/ER``, …)."""
    table: Table = next(t for t in TABLES if t.name == name)
    return [
        "run:displayName",
        *(f"config:{key}.value" for _, key in table.attributes),
        *(f"summary:{c.metric}/{c.task}" for c in table.columns),
    ]


def reduce_filter(expr: Any, group: str) -> Any:
    """The ``reduce`` runs (one per method, the paper's metrics) of ``group``."""
    return expr.And(expr.Metric("JobType") == "reduce", expr.Metric("Group") == group)


def _modules() -> tuple[Any, Any, Any]:
    """wandb-workspaces' reports, workspaces and filter expressions (imported when used)."""
    reports, workspaces, expr = (
        importlib.import_module(f"wandb_workspaces.{m}") for m in ("reports.v2", "workspaces", "expr")
    )
    return reports, workspaces, expr


def task_bars(wr: Any) -> Any:
    """The per-task scores of each run: the data of the radar charts (Figures 7–8)."""
    return wr.BarPlot(title="Task scores (the radar axes of Figures 7–8)", metrics=list(RADAR), orientation="v")


def figure2(wr: Any) -> list[Any]:
    """Figure 2 as two scatters: Overall against latency (its axes) and against storage (its bubbles)."""
    return [
        wr.ScatterPlot(title="Figure 2: Overall against latency (TTFT, s)", x=FIGURE2["x"], y=FIGURE2["y"], log_x=True),
        wr.ScatterPlot(
            title="Figure 2: Overall against storage per video hour (x: log10(1 + B/h); 0 B/h at 0)",
            x=FIGURE2["storage"],
            y=FIGURE2["y"],
        ),
    ]


def report(group: str, project: str, entity: str | None) -> Any:
    """The Report of ``group``: Table 4 with the per-task bars, Table 3 with Figure 2's scatters (no
    ``entity``: the W&B account's default entity)."""
    wr, _, expr = _modules()

    whose = {"entity": entity} if entity is not None else {}

    def runs(title: str, shown: list[str]) -> Any:
        return wr.Runset(
            project=project,
            name=title,
            filters=reduce_filter(expr, group),
            pinned_columns=shown,
            visible_columns=shown,
            column_order=shown,
            lock_columns=True,
            order=[wr.OrderBy(wr.Config(PAPER_ORDER), ascending=True)],
            **whose,
        )

    return wr.Report(
        project=project,
        title=f"APM-Bench: Tables 3–4 and Figure 2 · {group}",
        **whose,
        description="The reduce run of each method (apm-publish); every number as apm-reduce computes it.",
        width="fluid",
        blocks=[
            wr.H2("Table 4: task-level results"),
            wr.PanelGrid(runsets=[runs("Table 4", table_columns("table4"))], panels=[task_bars(wr)]),
            wr.H2("Table 3: capabilities and efficiency; Figure 2"),
            wr.PanelGrid(runsets=[runs("Table 3", table_columns("table3"))], panels=figure2(wr)),
        ],
    )


def workspace(group: str, project: str, entity: str) -> Any:
    """A saved workspace view of ``group``'s ``reduce`` runs: Table 4's columns pinned in order, Figure 2's
    scatters and the per-task bars."""
    wr, ws, expr = _modules()
    return ws.Workspace(
        entity=entity,
        project=project,
        name=f"APM-Bench Table 4 · {group}",
        sections=[ws.Section(name="Figure 2 and task scores", is_open=True, panels=[*figure2(wr), task_bars(wr)])],
        runset_settings=ws.RunsetSettings(filters=reduce_filter(expr, group), pinned_columns=table_columns("table4")),
    )


def specification(groups: Iterable[str], project: str, entity: str | None) -> dict[str, Any]:
    """The Report and workspace view of each group as wandb-workspaces would save them (no entity:
    ``""``, the one the upload's account chooses)."""
    who = entity or ""
    return {
        "project": project,
        "entity": entity,
        "groups": {
            g: {
                "report": report(g, project, who)._to_model().model_dump(mode="json", by_alias=True),
                "workspace": workspace(g, project, who)._to_model().model_dump(mode="json", by_alias=True),
            }
            for g in sorted(set(groups))
        },
    }


def build(groups: Iterable[str], project: str, entity: str | None, mode: str, folder: Path) -> list[str]:
    """Online, save each group's Report and workspace view (their URLs); offline, write their
    specification to ``folder/report.json`` (its path)."""
    if mode == "online":
        urls = []
        for g in sorted(set(groups)):
            saved = report(g, project, entity).save()
            urls += [saved.url, workspace(g, project, saved.entity).save().url]
        return urls
    path = folder / REPORT_FILE
    write_json_atomically(path, specification(groups, project, entity))
    return [str(path)]
