"""The conditions a latency was measured under, recorded with it (``latency.mode``, ``in_flight``, …),
which records latency mode measures again, and which probes ``latency.sample`` times.

``loaded``: the run's normal mode, ``concurrency`` instances in flight, so a time to first token
includes queueing behind the others. ``isolated`` (``latency_mode=true``, or the ``latency.sample``
probes after the main run): one request at a time, after one warm-up request that is not recorded;
Table 3, Tables 8/9 and Figure 2 use these only (docs/records.md, "Latency").
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any

from apm.backbones.base import Response
from apm.data.instances import Instance
from apm.runner.setup import RunSetup

ISOLATED, LOADED = "isolated", "loaded"


def conditions(setup: RunSetup, in_flight: int, response: Response) -> dict[str, Any]:
    """The latency fields that say how a request was measured: its mode, the requests in flight when it
    was sent (itself included; 0: never sent), the run's concurrency, and the engine's cache state."""
    return {
        "mode": ISOLATED if setup.latency_mode else LOADED,
        "in_flight": in_flight,
        "concurrency": setup.concurrency,
        "prefix_caching": setup.backbone.prefix_caching,
        "cached_tokens": response.cached_tokens,
    }


def needs_isolated(setup: RunSetup, record: dict[str, Any]) -> bool:
    """Whether latency mode runs a key on record again: its newest record was not measured in isolation."""
    return setup.latency_mode and (record.get("latency") or {}).get("mode") != ISOLATED


def isolated(setup: RunSetup) -> RunSetup:
    """The run's setup in latency mode: one request at a time, measured in isolation."""
    return replace(setup, latency_mode=True, concurrency=1)


def sampled(instances: list[Instance], per_task: int) -> list[Instance]:
    """``per_task`` instances of each task (all, if it has fewer), evenly spread over its instances in plan
    order (so over its trajectories, not the first few), in plan order."""
    by_task: dict[str, list[Instance]] = defaultdict(list)
    for inst in instances:
        by_task[inst.task].append(inst)
    chosen = {group[k * len(group) // per_task].key
              for group in by_task.values() for k in range(min(per_task, len(group)))}
    return [i for i in instances if i.key in chosen]
