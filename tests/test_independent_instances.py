"""Every probe is an independent instance (Section 3.3): a request carries its own candidate's turns
(its ERA question, its registration, its interval marker) and nobody else's, whatever the memory."""

from __future__ import annotations

import re

import pytest
from support.runner import compose_run, run
from support.spies import ShownFrames

from apm.backbones.base import TextPart
from apm.data.instances import candidate_instances
from apm.data.release import load_release
from apm.data.tasks import MCQA_TASKS
from apm.prompts import turn_text
from apm.synth import generate

SAID = re.compile(r"^\[DAY\d+ \d\d:\d\d:\d\d\] User: ", re.M)


@pytest.fixture(scope="module", params=["uniform", "session_stable"])
def shown(request, tmp_path_factory):
    """Every request of a raw-video run on the tiny synthetic release under each frame layout, and what
    each candidate's user says to be remembered (its ERA question, its registration), by candidate."""
    root = generate(tmp_path_factory.mktemp("rel") / "tiny", seed=0, scale="tiny")
    out = tmp_path_factory.mktemp("runs")
    run(compose_run(root, out, out / "cache", ["memory=raw_video", "backbone=oracle", "backbone.max_frames=16",
                                              f"frames.layout={request.param}",
                                              "backbone._target_=support.spies.ShownFrames"]))
    release = load_release(root)
    said: dict[str, set[str]] = {}
    for c in release.candidates:
        instances = candidate_instances(c, release.trajectory(c.trajectory_id))
        said[c.candidate_id] = {turn_text(t, i) for i in instances for t in i.turns if t.kind != "interval_marker"}
    return dict(ShownFrames.seen), said


def _text(request) -> str:
    return "\n".join(p.text for m in request.messages for p in m.parts if isinstance(p, TextPart))


def test_an_mcqa_request_carries_no_registration_or_question_of_another_candidate(shown):
    requests, said = shown
    everything = set().union(*said.values())
    checked = 0
    for request in requests.values():
        inst = request.instance
        if inst is None or inst.task not in MCQA_TASKS or inst.session == inst.visible_sessions[0]:
            continue
        text = _text(request)
        assert not SAID.search(text), inst.key  # nobody said anything to this instance
        assert not [t for t in everything if t in text], inst.key
        checked += 1
    assert checked > 0


def test_no_request_carries_another_candidates_turns(shown):
    requests, said = shown
    for request in requests.values():
        inst = request.instance
        if inst is None:
            continue
        text = _text(request)
        others = set().union(*(v for k, v in said.items() if k != inst.candidate_id))
        others -= said.get(inst.candidate_id, set())
        assert not [t for t in others if t in text], inst.key


def test_a_prm_probe_still_hears_its_own_earlier_session_registration(shown):
    requests, _ = shown
    checked = 0
    for request in requests.values():
        inst = request.instance
        if inst is None or inst.task != "PRM":
            continue
        registration = inst.candidate.fields["registration_event"]["registration_text"]
        assert _text(request).count(f"User: {registration}") == 1, inst.key
        checked += 1
    assert checked > 0
