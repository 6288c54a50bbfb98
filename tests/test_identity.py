"""What names a run's inputs: prompt and rubric versions are digests of their templates, and the
release is named by its content, not by the path typed to reach it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from apm.judge import rubric
from apm.prompts import render


@pytest.mark.parametrize("version,templates,current", [
    (render.prompt_version, render.TEMPLATES, render.PROMPT_VERSION),
    (rubric.rubric_version, rubric.TEMPLATES, rubric.RUBRIC_VERSION),
])
def test_versions_are_digests_of_every_template_byte(version, templates, current, tmp_path):
    folder = tmp_path / "templates"
    shutil.copytree(Path(str(templates)), folder)
    assert version(folder) == version(folder) == current  # stable, and what records carry
    seen = {current}
    for path in sorted(folder.iterdir()):
        original = path.read_bytes()
        path.write_bytes(original.replace(b" ", b"  ", 1) if b" " in original else original + b"\n")
        seen.add(version(folder))
        path.write_bytes(original)
    assert len(seen) == 1 + len(list(folder.iterdir()))  # each one-byte edit gives a new version
    assert version(folder) == current


def test_rubric_version_covers_the_reply_schema_sent_to_the_judge(monkeypatch):
    monkeypatch.setitem(rubric.CRITERIA, "usefulness", ("pass", "fail"))
    assert rubric.rubric_version(rubric.TEMPLATES) != rubric.RUBRIC_VERSION
