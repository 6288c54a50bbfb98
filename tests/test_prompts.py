"""The prompt templates are Appendix E word for word, and fill exactly the instance's fields."""

from __future__ import annotations

import re

import pytest
from release_builder import base_release, write_release

from apm.data.instances import release_instances
from apm.data.release import load_release
from apm.prompts import probe_prompt, template
from apm.prompts.render import summary_prompts, turn_text


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
