"""Reference baselines: Appendix E output formats, order-independent randomness, a correct oracle."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
from support.release import base_release, write_release

from apm.backbones import Request, Response
from apm.backbones.base import ask as send
from apm.backbones.baselines import AlwaysIntervene, AlwaysSilent, Oracle, RandomBaseline
from apm.data.instances import Instance, release_instances
from apm.data.release import load_release
from apm.data.tasks import ADAPTIVE, EA, EA_OPTIONS, MCQA_OPTIONS


@pytest.fixture(scope="module")
def instances(tmp_path_factory: pytest.TempPathFactory) -> list[Instance]:
    root = write_release(tmp_path_factory.mktemp("rel") / "r", base_release(), videos=False)
    return release_instances(load_release(root, check_videos=False))


def ask(backbone, instances: list[Instance]) -> dict[str, Response]:
    async def main() -> list[Response]:
        async with backbone:
            return await asyncio.gather(*(send(backbone, Request((), request_id=i.key), i) for i in instances))

    return {i.key: r for i, r in zip(instances, asyncio.run(main()))}


def check_format(instance: Instance, text: str) -> dict:
    """Parse an answer and check it is exactly one of the Appendix E shapes for the instance's task."""
    obj = json.loads(text)
    if instance.task not in ADAPTIVE:
        assert list(obj) == ["answer"] and obj["answer"] in (EA_OPTIONS if instance.task == EA else MCQA_OPTIONS)
    elif obj["decision"] == "SILENT":
        assert list(obj) == ["decision", "reason"] and isinstance(obj["reason"], str)
    elif instance.task == "ERA":
        assert list(obj) == ["decision", "answer", "reason"] and obj["answer"] in MCQA_OPTIONS
    else:
        assert list(obj) == ["decision", "proactive_response", "reason"] and obj["decision"] == "INTERVENE"
    return obj


def test_random_is_deterministic_per_key_whatever_the_order(instances):
    first = ask(RandomBaseline(), instances)
    shuffled = instances[:]
    random.Random(7).shuffle(shuffled)
    again = ask(RandomBaseline(), shuffled)
    assert {k: r.text for k, r in first.items()} == {k: r.text for k, r in again.items()}
    for i in instances:
        check_format(i, first[i.key].text)
    other_seed = ask(RandomBaseline(seed=1), instances)
    assert any(other_seed[k].text != first[k].text for k in first)


def test_random_is_roughly_uniform():
    from apm.backbones.baselines import stable_rng

    draws = [stable_rng(f"T/c{i}/query").choice(MCQA_OPTIONS) for i in range(4000)]
    assert all(900 < draws.count(o) < 1100 for o in MCQA_OPTIONS)


def test_oracle_answers_from_the_annotations(instances):
    out = ask(Oracle(), instances)
    by_key = {i.key: i for i in instances}
    expect = {
        "T1/c-er/query": {"answer": "B"},
        "T1/ea-2/ea": {"answer": "E"},
        "T1/c-era/pos": {"decision": "INTERVENE", "answer": "B", "reason": "now visible"},
        "T1/c-era/neg0": {"decision": "SILENT", "reason": "not yet"},
        "T1/c-rcr/pos": {"decision": "INTERVENE", "proactive_response": "the kettle boils", "reason": "steam"},
        "T1/c-mpa/pos": {"decision": "INTERVENE", "proactive_response": "use the blue mug", "reason": "same activity"},
        "T1/c-mpa/neg0": {"decision": "SILENT", "reason": "idle"},
        "T1/c-prm/pos": {"decision": "INTERVENE", "proactive_response": "the kettle", "reason": "kettle visible"},
        "T1/c-tpg/pos0": {"decision": "INTERVENE", "proactive_response": "add salt", "reason": "resumes"},
        "T1/c-tpg/neg0": {"decision": "SILENT", "reason": "done"},
    }
    for key, obj in expect.items():
        assert json.loads(out[key].text) == obj
    assert out["T1/c-er/query"].text == '{"answer":"B"}'  # compact, as Appendix E prints it
    for key, r in out.items():
        i = by_key[key]
        obj = check_format(i, r.text)
        assert (obj.get("decision") == "SILENT") == (i.polarity == "negative")
        if i.task not in ADAPTIVE or i.task == "ERA" and i.polarity == "positive":
            assert obj["answer"] == i.candidate.fields["correct_option_id"]
    assert "upper bound" in Oracle().name


def test_always_silent_and_always_intervene(instances):
    silent, loud = ask(AlwaysSilent(), instances), ask(AlwaysIntervene(), instances)
    for i in instances:
        if i.task in ADAPTIVE:
            assert check_format(i, silent[i.key].text)["decision"] == "SILENT"
            assert check_format(i, loud[i.key].text)["decision"] == "INTERVENE"
        else:
            assert not silent[i.key].ok and "Adaptive probes only" in silent[i.key].error
            assert not loud[i.key].ok


def test_a_baseline_asked_without_its_channel_has_no_answer(instances: list[Instance]) -> None:
    response = asyncio.run(Oracle().generate(Request((), request_id=instances[0].key)))
    assert not response.ok and "answers from the instance" in response.error
