"""The conditions a latency was measured under, recorded with it (``latency.mode``, ``in_flight``, …), and
which records latency mode measures again.

``loaded``: the run's normal mode, ``concurrency`` instances in flight, so a time to first token
includes queueing behind the others. ``isolated`` (``latency_mode=true``): one request at a time,
after one warm-up request that is not recorded; Table 3, Tables 8/9 and Figure 2 use these where a
method has them (docs/records.md, "Latency").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from apm.backbones.base import Response

if TYPE_CHECKING:
    from apm.runner.online import RunSetup

ISOLATED, LOADED = "isolated", "loaded"


def conditions(setup: RunSetup, in_flight: int, response: Response) -> dict[str, Any]:
    """The latency fields that say how a request was measured: its mode, the requests in flight when it
    was sent (itself included; 0: never sent), the run's concurrency, and the engine's cache state."""
    return {
        "mode": ISOLATED if setup.latency_mode else LOADED,
        "in_flight": in_flight,
        "concurrency": setup.concurrency,
        "prefix_caching": getattr(setup.backbone, "prefix_caching", None),
        "cached_tokens": response.cached_tokens,
    }


def needs_isolated(setup: RunSetup, record: dict[str, Any]) -> bool:
    """Whether latency mode runs a key on record again: its newest record was not measured in isolation."""
    return setup.latency_mode and (record.get("latency") or {}).get("mode") != ISOLATED
