"""Before a shard's first instance, and before the run writes anything: the engines answer, and the
shard's largest request fits.

Every engine's ``preflight`` (each OpenAI-compatible backbone, vLLM servers included, checks its
endpoint, key and model name; the others check nothing); a run's backbone that ``checks_requests``
then gets the shard's largest request with ``max_tokens=1`` (``check_request``). A failure raises
``EndpointError``: one line saying what to change. In latency mode that largest request is also the
run's one warm-up request (its answer is not recorded); a backbone that checks no requests is sent it
directly.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from apm.data.instances import Instance
from apm.data.model import Trajectory
from apm.runner.request import largest_request
from apm.runner.setup import RunSetup


async def preflight(setup: RunSetup, trajectories: list[Trajectory], instances: list[Instance], *,
                    check: bool, warm_up: bool) -> None:
    """Check the engines (``check``) and send the shard's largest request (``check``, or ``warm_up``)."""
    if check:
        engines = {id(setup.writer): ("writer", setup.writer), id(setup.backbone): ("backbone", setup.backbone)}
        for where, engine in engines.values():
            await engine.preflight(where)
    checks = check and setup.backbone.checks_requests
    if not (checks or warm_up):
        return
    request = await asyncio.to_thread(largest_request, setup, trajectories, instances)
    if request is None:
        return
    if checks:
        await setup.backbone.check_request(request, "backbone")
    else:
        await setup.backbone.generate(replace(request, settings=replace(request.settings, max_tokens=1)))
