"""``apm-run … print_request=KEY``: one instance's request exactly as the run would send it, before the
run or after it, without starting an engine or writing anything (docs/records.md, "The score screen").

What an instance is shown of earlier sessions is the state the protocol left after them. A protocol
that writes with no model (``needs_writer`` False: raw video keeps the videos and the user's turns) has
that state rebuilt here, in a scratch folder, by its own session-end updates, so the listing is exact
before the run. A protocol whose memory a writer model writes is shown the state on disk: exact when
that is the state after the instance's previous session (the run's memory line says so), else the
listing says in its second line that it cannot know the notes yet. A streaming system's request comes
from the state its replay builds, so it is refused in one line.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Sequence
from pathlib import Path

from apm.data.instances import Instance
from apm.data.model import Session, Trajectory
from apm.memory.base import MemoryProtocol, SessionView, manifest_sha256, state_manifest
from apm.records.rundir import RunDir
from apm.runner.config import ConfigError
from apm.runner.online import newest_memory_lines, session_frames, session_interactions
from apm.runner.request import describe, prepare_instance, state_dir_of
from apm.runner.setup import RunSetup


def request_listing(setup: RunSetup, trajectory: Trajectory, instance: Instance) -> str:
    """The instance's request as :func:`~apm.runner.request.describe` lists it, shown the memory the run
    would show it, or with a second line saying what cannot be known before the run."""
    if not isinstance(setup.protocol, MemoryProtocol):
        raise ConfigError(f"print_request: {setup.protocol.name} is a streaming system: it composes each request "
                          "from the state its replay builds, which is not known before the run; the run's record of "
                          f"{instance.key} names what was sent (apm-view shows it)")
    earlier = trajectory.sessions[: trajectory.session(instance.session).index]
    with tempfile.TemporaryDirectory(prefix="apm-print-request-") as scratch:
        state_dir, unknown = Path(scratch), ""
        if earlier and setup.protocol.needs_writer:
            state_dir = state_dir_of(setup, trajectory)
            unknown = _unknown_notes(setup, trajectory, earlier[-1], state_dir)
        else:
            asyncio.run(_replay(setup, trajectory, earlier, state_dir))
        prepared, budget = prepare_instance(setup, trajectory, instance, state_dir)
        head, *rest = describe(setup, prepared, budget).splitlines()
    return "\n".join([head, *([unknown] if unknown else []), *rest])


async def _replay(setup: RunSetup, trajectory: Trajectory, sessions: Sequence[Session], state_dir: Path) -> None:
    """The protocol's session-end updates of ``sessions`` into ``state_dir``, as the run makes them (no writer)."""
    protocol = setup.protocol
    assert isinstance(protocol, MemoryProtocol)
    for session in sessions:
        frames = session_frames(setup.cache, session, protocol.session_frames)
        view = SessionView(trajectory, session, session_interactions(setup.release, trajectory, session), frames)
        await protocol.end_session(view, state_dir, None)


def _unknown_notes(setup: RunSetup, trajectory: Trajectory, previous: Session, state_dir: Path) -> str:
    """'' when ``state_dir`` holds the state the run recorded after ``previous`` (what the instance is shown),
    else one line saying the listing shows the state on disk instead."""
    line = newest_memory_lines(RunDir(setup.run_dir).memory).get((trajectory.trajectory_id, previous.key))
    if line is not None and line.get("error") is None and line.get("state_sha256") == manifest_sha256(
            state_manifest(state_dir)):
        return ""
    return (f"# not known before the run: {setup.protocol.name} has its memory written by the writer model as "
            f"the run goes; shown with the memory on disk now, not the state after {previous.key} the run will "
            "show it, so its notes and the prompt digest may differ")
