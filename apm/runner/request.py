"""One instance's request exactly as the run sends it, the shard's largest request (what the preflight
check sends), and a readable listing of a request (``apm-run … print_request=KEY``).

Frames are chosen for the context the request's text leaves: when the backbone's context guard would
cut the full frame budget, the frames are chosen again, evenly over the same spans, at the count that
fits — so a backbone gets its full budget whenever its context allows, and otherwise the even sampling
the paper describes, with what was left out in the record's ``truncation``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from apm.backbones.base import FramePart, Request, Truncation
from apm.backbones.guard import text_chars
from apm.data import clock
from apm.data.instances import Instance, instance_view
from apm.data.model import Trajectory
from apm.memory.base import MemoryProtocol
from apm.records import prompts
from apm.records.declaration import declared
from apm.records.rundir import RunDir
from apm.runner.causality import check_shown
from apm.runner.context import Prepared, canonical, prepare
from apm.runner.setup import RunSetup


def state_dir_of(setup: RunSetup, trajectory: Trajectory) -> Path:
    """Where the memory protocol keeps a trajectory's persistent state."""
    return RunDir(setup.run_dir).memory_state(trajectory.trajectory_id)


def kept_prompt(setup: RunSetup, request: Request | None) -> list[list[Any]] | None:
    """The record's ``prompt``: the request's text parts kept by digest beside the records, its frames by
    count (``apm.records.prompts``); None without a request."""
    return None if request is None else prompts.keep(setup.run_dir, canonical(request.messages))


def reads_annotations(protocol: object) -> bool:
    """Whether a memory protocol is handed the annotated instance: only one declared a ``reference`` (a
    control that is no method, as the oracle evidence is); every other gets its view."""
    found = declared(protocol)
    return found is not None and found.family == "reference"


def protocol_instance(setup: RunSetup, instance: Instance) -> Instance:
    """The instance as the run's protocol is handed it: whole for a reference, else its view
    (``apm.data.instances.instance_view``: the question side, an opaque key, no annotations)."""
    return instance if reads_annotations(setup.protocol) else instance_view(instance, setup.seal)


def prepare_instance(setup: RunSetup, trajectory: Trajectory, instance: Instance,
                     state_dir: Path) -> tuple[Prepared, Truncation | None]:
    """The instance's request with frames chosen for the context its text leaves the backbone, and
    what that choice left out of the full budget (None: nothing); ``CausalityError`` when the
    protocol's history shows what the instance may not see (``apm.runner.causality``)."""
    if not isinstance(setup.protocol, MemoryProtocol):  # it used to fail here as an AttributeError (no .history)
        raise TypeError(f"{setup.protocol.name}: a streaming system composes its own requests; none to prepare")
    history = setup.protocol.history(protocol_instance(setup, instance), trajectory, state_dir)
    check_shown(trajectory, instance, history)
    guard = setup.backbone.guard
    still = guard.frames_per_still if guard is not None else 1.0
    request_id = setup.opaque(instance.key)
    prepared = prepare(setup.cache, trajectory, instance, history, setup.max_frames, setup.settings, setup.layout,
                       still, request_id)
    fit = guard.selection_budget(prepared.request) if guard is not None else None
    if fit is None:
        return prepared, None
    fitted = prepare(setup.cache, trajectory, instance, history, fit, setup.settings, setup.layout, still, request_id)
    if len(fitted.frames) > fit:  # the protocol picks its own frames (the most recent N): the guard cuts them
        return prepared, None
    assert guard is not None  # fit is None without a guard
    return fitted, guard.budget_truncation(prepared.request, fitted.request)


def largest_request(setup: RunSetup, trajectories: list[Trajectory], instances: list[Instance]) -> Request | None:
    """The largest request the shard will send, as the run sends it: of each task's latest probe (the
    one that sees the most video), the request with the most frames, then the most text. Memories a
    protocol writes during the run are not there yet, so a text memory's notes are not counted."""
    by_id = {t.trajectory_id: t for t in trajectories}

    def place(inst: Instance) -> tuple[int, int, str]:
        return by_id[inst.trajectory_id].session(inst.session).index, inst.probe_time, inst.key

    latest = {inst.task: inst for inst in sorted(instances, key=place)}  # the last of each task wins
    requests = []
    for inst in latest.values():
        traj = by_id[inst.trajectory_id]
        try:
            requests.append(prepare_instance(setup, traj, inst, state_dir_of(setup, traj))[0].request)
        except Exception:  # noqa: BLE001 — an instance that cannot be prepared is recorded by the run itself
            continue
    return max(requests, key=lambda r: (len(r.frames), text_chars(r)), default=None)


def describe(setup: RunSetup, prepared: Prepared, budget: Truncation | None) -> str:
    """The request the backbone is sent, as lines: a head naming the instance, its frames and prompt
    digest, then each message's parts in order — text as it is, each frame (or still) as its session,
    video offset and wall-clock time — after the backbone's context guard, and what was left out for the context."""
    guard = setup.backbone.guard
    request, cut = guard.apply(prepared.request) if guard is not None else (prepared.request, None)
    inst = prepared.instance
    lines = [f"# {inst.key} · {inst.task} · probe {inst.probe_label} · {len(request.frames)} frames · "
             f"prompt sha256 {prepared.prompt_sha256}"]
    for left in (budget, cut):
        if left is not None:
            lines.append(f"# {left.frames_before - left.frames_after} of {left.frames_before} frames left out "
                         f"for {left.reason} (estimated {left.est_tokens_after} tokens with the answer)")
    for message in request.messages:
        lines.append(f"--- {message.role}" + (f" @ {clock.label(message.time)}" if message.time is not None else ""))
        for part in message.parts:
            if isinstance(part, FramePart):
                f = part.frame
                lines.append(f"[{'still' if part.still else 'frame'} {f.session} +{f.offset:g}s {f.label}]")
            else:
                lines.append(part.text)
    return "\n".join(lines)
