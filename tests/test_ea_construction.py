"""EA restriction and ground truth by construction for streaming systems (docs/streaming-systems.md,
"Restricted instances"): an EA instance is answered by a fresh copy of the system fed its visible
sessions alone, and a system is handed an instance view without the annotations — so a system that
reads everything it can reach still cannot answer EA's hidden-evidence questions above chance."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.adversaries import Omniscient
from support.runner import compose_run, records, run, unsealed

from apm.data.instances import SHOWN_FIELDS, instance_view, opaque_id, release_instances, release_seal
from apm.data.model import Release
from apm.data.release import load_release
from apm.synth import generate

SEEDS = (1, 2, 3)
OMNISCIENT = ["memory=none", "memory._target_=support.adversaries.Omniscient", "~memory.recent_frames",
              "backbone=random", "dataset.tasks=[EA,RCR]"]


Runs = list[tuple[Release, list[dict[str, Any]], Any]]


@pytest.fixture(scope="module")
def omniscient_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Runs, dict[str, dict[str, Any]]]:
    """The Omniscient adversary over the EA and RCR instances of three tiny releases, and what it read."""
    out = []
    for seed in SEEDS:
        root = tmp_path_factory.mktemp(f"ea{seed}")
        release = generate(root / "rel", seed=seed, scale="tiny")
        cfg = compose_run(release, root / "runs", root / "cache", OMNISCIENT)
        out.append((load_release(release), records(run(cfg)), cfg))
    return out, dict(Omniscient.READ)


@pytest.fixture(scope="module")
def omniscient(omniscient_runs: tuple[Runs, dict[str, dict[str, Any]]]) -> Runs:
    return omniscient_runs[0]


def _content(release: Release, recs: list[dict[str, Any]], available: bool) -> list[tuple[bool, bool]]:
    """Per EA record of that split: (its answer is the original question's correct option, it rests on
    evidence the perceiver was shown)."""
    original = {c.candidate_id: c.fields.get("correct_option_id") for c in release.candidates}
    ea = [r for r in recs if r["task"] == "EA" and r["evidence_available"] is available]
    return [(r["answer"] == original[r["original_candidate_id"]],
             json.loads(r["output"])["reason"].startswith("shown:")) for r in ea]


def test_a_system_that_reads_everything_cannot_answer_ea_hidden_evidence_questions_above_chance(omniscient):
    hidden = [x for release, recs, _ in omniscient for x in _content(release, recs, available=False)]
    available = [x for release, recs, _ in omniscient for x in _content(release, recs, available=True)]
    assert len(hidden) >= 10 and available
    assert sum(found for _, found in available) >= 0.75 * len(available)  # it reads what it is fed
    assert not any(found for _, found in hidden)  # fed the visible sessions alone: the evidence is not there
    assert sum(right for right, _ in hidden) <= len(hidden) / 2  # its content answers are guesses (chance: 1/4)


def test_a_streaming_system_is_handed_an_instance_view_without_the_annotations(omniscient, omniscient_runs):
    keys = {opaque: key for release, _, _ in omniscient for opaque, key in unsealed(release.root).items()}
    read = {keys[opaque]: seen for opaque, seen in omniscient_runs[1].items()}  # read by its opaque id
    tasks = {i.key: i.task for release, _, _ in omniscient for i in release_instances(release)}
    assert {tasks[key] for key in read} == {"EA", "RCR"}
    for seen in read.values():
        assert seen["correct_option"] is None and seen["evidence_available"] is None and seen["polarity"] is None
        assert set(seen["fields"]) <= set(SHOWN_FIELDS)
    release = omniscient[0][0]
    seal = release_seal(release)
    for inst in release_instances(release):
        view = instance_view(inst, seal)
        assert view.key == opaque_id(seal, inst.key) != inst.key and not view.probe_id
        assert view.turns == inst.turns and view.visible_sessions == inst.visible_sessions
        text = json.dumps(dict(view.candidate.fields))
        assert "correct_option_id" not in text and "evidence_moments" not in text and "proactive_response" not in text


def test_the_state_of_a_visible_set_is_cached_a_rerun_feeds_nothing(omniscient):
    release, recs, cfg = omniscient[0]
    run_dir = next(Path(cfg.output_root).rglob("records")).parent
    built = sorted((run_dir / "memory_state_visible").rglob("*.built.json"))
    restricted = {(i.trajectory_id, i.visible_sessions) for i in release_instances(release) if i.task == "EA"
                  and len(i.visible_sessions) <= release.trajectory(i.trajectory_id).session(i.session).index}
    assert restricted and len(built) == len(restricted)  # one state per visible set
    run(cfg)
    assert Omniscient.OBSERVED == [] and records(run_dir) == recs
