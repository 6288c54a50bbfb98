"""An instance's record (the output contract, ``docs/records.md``) from what the replay loop did, for
every method (a streaming system's adds its fields on top: ``apm.runner.streaming.streaming_record``)."""

from __future__ import annotations

from typing import Any

from apm.backbones.base import Response
from apm.data import clock
from apm.data.instances import Instance
from apm.data.model import Trajectory
from apm.memory.base import manifest_sha256
from apm.prompts import PROMPT_VERSION
from apm.records.version import FORMAT_VERSION
from apm.runner import latency
from apm.runner.context import Prepared
from apm.runner.outcome import apply_gate
from apm.runner.request import kept_prompt
from apm.runner.setup import RunSetup

NO_MEMORY: dict[str, Any] = {"bytes": 0, "state_sha256": manifest_sha256({})}
"""What an instance of a trajectory's first session is shown: the empty state."""


def make_record(setup: RunSetup, inst: Instance, trajectory: Trajectory, prepared: Prepared | None,
                response: Response, prep_s: float, shown: dict[str, Any], in_flight: int = 0) -> dict[str, Any]:
    """The output contract for one instance (``docs/records.md``); ``shown``: the memory line of the
    state it saw (``NO_MEMORY`` in a trajectory's first session); ``in_flight``: requests in flight when
    it was sent, itself included."""
    session = trajectory.session(inst.session)
    outcome = apply_gate(inst, response.text, response.finish_reason) if response.ok else None
    parsed = outcome.parsed if outcome else None
    prefix_s = float(inst.probe_time - session.start)
    ttft = prep_s + response.ttft_s if response.ttft_s is not None else None
    fields = inst.candidate.fields
    return {
        "format_version": FORMAT_VERSION,
        "key": inst.key,
        "run": setup.run_info,
        "trajectory_id": inst.trajectory_id,
        "day_id": session.day_id,
        "session_id": session.session_id,
        "candidate_id": inst.candidate_id,
        "task": inst.task,
        "family": inst.family,
        "probe_id": inst.probe_id,
        "polarity": inst.polarity,
        "probe_time": clock.label(inst.probe_time),
        "window_start": clock.label(inst.window_start) if inst.window_start is not None else None,
        "evidence_available": inst.evidence_available,
        "original_candidate_id": fields.get("original_candidate_id") if inst.task == "EA" else None,
        "correct_option": inst.correct_option,
        "output": response.text,
        "finish_reason": response.finish_reason,
        "parse_status": parsed.status if parsed else None,
        "parse_error": parsed.error if parsed else None,
        "decision": parsed.decision if parsed else None,
        "answer": parsed.answer if parsed else None,
        "correct": outcome.correct if outcome else None,
        "gate_pass": outcome.gate_pass if outcome else None,
        "frames": [f.describe() for f in prepared.frames] if prepared else [],
        "prompt_version": PROMPT_VERSION,
        "prompt_sha256": prepared.prompt_sha256 if prepared else None,
        "prompt": kept_prompt(setup, prepared.request if prepared else None),
        "latency": {
            "prep_s": prep_s,
            "ttft_s": ttft,
            "total_s": prep_s + response.total_s,
            "prefix_s": prefix_s,
            "rtf": ttft / prefix_s if ttft is not None and prefix_s > 0 else None,
            "engine_ttft_s": response.ttft_s,
            "engine_total_s": response.total_s,
            "elapsed_s": response.elapsed_s,
            "encode_s": response.encode_s,
            "ttft_from": None,  # a streaming system's record says (apm.runner.streaming.streaming_record)
            "update_s": None,
            "observe_s": None,
            **latency.conditions(setup, in_flight, response),
        },
        "tokens": {"prompt": response.prompt_tokens, "completion": response.completion_tokens},
        "truncation": response.truncation.to_dict() if response.truncation else None,
        "memory_bytes": shown["bytes"],
        "memory_sha256": shown["state_sha256"],
        "error": response.error,
        "attempts": response.attempts,
        "shard": setup.shard_label,
    }
