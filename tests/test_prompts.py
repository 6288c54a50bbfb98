"""The prompt templates are Appendix E word for word, and fill exactly the instance's fields."""

from __future__ import annotations

import re

import pytest
from support.release import base_release, write_release

from apm.data import clock
from apm.data.instances import Turn, release_instances
from apm.data.release import load_release
from apm.prompts import probe_prompt, read_fields, read_probe, render, said_text, template
from apm.prompts.layout import CURRENT, CURRENT_END, CURRENT_TIME, HEADER, SAID
from apm.prompts.render import PROBE_TEMPLATES, fill, summary_prompts, turn_text


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


@pytest.fixture(scope="module")
def spec_text(paper_excerpt: str) -> str:
    return _squash(paper_excerpt)


@pytest.mark.parametrize("name", [
    "system", "mcqa", "mcqa_stu", "era_question", "era_probe", "rcr_probe", "interval_marker",
    "mpa_interval", "prm_interval", "tpg_interval", "ea", "summary_writer", "summary_request",
])
def test_template_is_verbatim_appendix_e(name, spec_text):
    """Only whitespace may differ (the paper's text lost the spaces after punctuation)."""
    assert _squash(template(name)) in spec_text


@pytest.fixture(scope="module")
def instances(tmp_path_factory):
    root = write_release(tmp_path_factory.mktemp("rel"), base_release(), videos=True)
    release = load_release(root)
    return {i.key: i for i in release_instances(release)}, release


def test_prompts_fill_fields_from_the_instance(instances):
    by_key, release = instances
    mcqa = probe_prompt(by_key["T1/c-er/query"])
    assert "Where was the mug?" in mcqa and "B. option B" in mcqa and "<" not in mcqa
    ea = probe_prompt(by_key["T1/ea-1/ea"])
    assert "E. option E" in ea and '{"answer":"A|B|C|D|E"}' in ea
    tpg = probe_prompt(by_key["T1/c-tpg/pos0"])
    assert "[DAY2 12:00:05, DAY2 12:00:08)" in tpg
    marker = by_key["T1/c-tpg/pos0"].turns[-1]
    assert turn_text(marker, by_key["T1/c-tpg/pos0"]).startswith(
        "The unlabeled evaluation interval begins now at DAY2 12:00:05."
    )
    era = by_key["T1/c-era/pos"]
    assert "delayed-answer question" in turn_text(era.turns[0], era) and "A. option A" in turn_text(era.turns[0], era)
    assert probe_prompt(era) == template("era_probe")
    rcr = by_key["T1/c-rcr/pos"]
    assert turn_text(rcr.turns[0], rcr) == "remind me when the kettle boils"
    _, request = summary_prompts(release.trajectories[0].sessions[1])
    assert "- session: S002" in request and "[15:00:00, 15:00:20)" in request


def test_stu_uses_its_own_guidance(instances):
    by_key, _ = instances
    er = by_key["T1/c-er/query"]
    stu = type(er)(**{**er.__dict__, "task": "STU"})
    assert "camera wearer’s egocentric viewpoint" in probe_prompt(stu)
    assert "egocentric viewpoint" not in probe_prompt(er)


FILLED = ["mcqa", "mcqa_stu", "ea", "era_question", "interval_marker", "mpa_interval", "prm_interval", "tpg_interval",
          "summary_request"]
"""Every template with fields (the others are sent as they are)."""


def _fields(name: str) -> dict[str, str]:
    """A value per field of ``name``, each distinct and full of regex metacharacters."""
    return {f: f"{f.lower()} (a+b)? [x] *{i}" for i, f in enumerate(re.findall(r"<([A-Z][A-Z_ ]*)>", template(name)))}


@pytest.mark.parametrize("name", FILLED)
def test_every_template_reads_back_what_it_was_filled_with(name):
    fields = _fields(name)
    text = f"before\n\n{fill(name, fields)}"
    assert read_fields(name, text) == fields
    assert all(read_fields(other, text) is None for other in FILLED if other != name)


@pytest.mark.parametrize("name", PROBE_TEMPLATES)
def test_a_request_s_last_part_reads_back_as_its_probe(name):
    """The probe closes the request's last part, after what the user said and the current time."""
    fields = _fields(name) if name in FILLED else {}
    question = fill("era_question", _fields("era_question"))
    said = [Turn(time=clock.absolute("DAY1", "08:00:00"), kind="question", text=question)]
    text = said_text(said, f"{CURRENT_TIME.write(now='DAY1 08:00:09')}\n\n{fill(name, fields)}")
    assert read_probe(text) == (name, fields)
    assert read_fields("era_question", text) == _fields("era_question")  # the ERA question, among the turns
    assert read_probe(f"{text}\n\nsomething after the probe") is None


def test_every_instance_s_probe_reads_back_as_its_task_s_template(instances):
    by_key, _ = instances
    assert {i.task for i in by_key.values()} >= {"ER", "EA", "ERA", "RCR", "MPA", "PRM", "TPG"}
    for instance in by_key.values():
        name, fields = read_probe(probe_prompt(instance))
        assert name == render._PROBE_TEMPLATE.get(instance.task, "mcqa")
        assert fill(name, fields) == probe_prompt(instance)  # read back whole: filled again, the same text


@pytest.mark.parametrize("marker", [HEADER, CURRENT_TIME, SAID])
def test_the_request_s_markers_read_back(marker):
    values = {"kind": CURRENT, "key": "DAY1/S001", "start": "DAY1 08:00:00", "end": CURRENT_END,
              "now": "DAY1 08:00:09", "at": "DAY1 08:00:03", "text": "put the mug (red) on the tray"}
    mine = {name: values[name] for name in marker.fields}
    found = marker.pattern(line=True).search(f"x\n{marker.write(**mine)}\ny")
    assert found is not None and found.groupdict() == mine


def test_a_reworded_template_is_still_read(monkeypatch):
    """The reader is the template: rewording one moves its parse-back with it."""
    original = render.template
    monkeypatch.setattr(render, "template", lambda name: original(name).replace("Choices:", "Options:"))
    render._body.cache_clear()
    try:
        fields = _fields("mcqa")
        assert "Options:" in fill("mcqa", fields)
        assert read_probe(fill("mcqa", fields)) == ("mcqa", fields)
    finally:
        render._body.cache_clear()
