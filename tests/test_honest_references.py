"""Honest references (issue 19, item 10): the perceiver is beaten by no variant reading a subset of
its inputs; "Balanced" needs both sides; † means one thing in every cell; the judge prompt's added
lines are declared in docs/prompts.md."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from support.runner import compose_run, records, run

from apm.cli.reduce import main as reduce_main
from apm.data.tasks import ADAPTIVE, EA
from apm.judge.rubric import JUDGE_SYSTEM, judge_prompt, rubric
from apm.reduce.load import load_runs
from apm.reduce.scores import score_table
from apm.synth import generate
from apm.testing import fixtures

DOCS = Path(__file__).resolve().parents[1] / "docs"
PROTOCOLS = {"none": [], "raw_video": [], "text_summary": ["memory.max_tokens=160", "+backbone@writer=perceiver"]}
"""The demo's three protocols (its text summary written by the perceiver, 160 tokens a session)."""
VARIANT = "backbone._target_=support.backbones.CurrentFramesOnly"


def _decision_ba(run_dir: Path) -> dict[str, float]:
    """Per adaptive task, the gate's balanced accuracy over positive and negative probes (%)."""
    passed: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for r in records(run_dir):
        if r["task"] in ADAPTIVE:
            passed[r["task"], r["polarity"]].append(bool(r["gate_pass"]))
    return {t: 50.0 * (np.mean(passed[t, "positive"]) + np.mean(passed[t, "negative"])) for t in ADAPTIVE}


def test_no_variant_reading_a_subset_of_its_inputs_beats_the_perceiver(tmp_path: Path) -> None:
    """The variant answers TPG and MPA from the current frames alone; before, it beat the perceiver
    on TPG under SimpleStream (100 against 50)."""
    release = generate(tmp_path / "tiny", seed=0, scale="tiny")
    for memory, extra in PROTOCOLS.items():
        common = [f"memory={memory}", "backbone=perceiver", "dataset.include_ea=false", *extra]
        perceiver = _decision_ba(run(compose_run(release, tmp_path / "runs", tmp_path / "cache", common)))
        variant = _decision_ba(run(compose_run(release, tmp_path / "runs", tmp_path / "cache", [*common, VARIANT])))
        assert all(perceiver[t] >= variant[t] for t in ADAPTIVE), (memory, perceiver, variant)


def test_balanced_ea_needs_both_sides(tmp_path: Path) -> None:
    """EU missing (no evidence-unavailable instance): Balanced is '–', not the EA accuracy alone."""
    ea = [fixtures.record(EA, f"X{i}", "ea", evidence_available=True, original_candidate_id=None) for i in range(3)]
    runs = load_runs([fixtures.write_run(tmp_path / "run", ea)])
    scores = score_table(runs.records, runs.judgements, runs.memory, seed=0, reps=0)
    value = scores.set_index("metric")["value"]
    assert value["ea_accuracy"] == pytest.approx(100.0) and "ea_balanced" not in value  # Table 13 prints '–'


@pytest.fixture(scope="module")
def reduced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = fixtures.small_run_set(tmp_path_factory.mktemp("runs"))  # ER C4: a backbone error, timed
    assert reduce_main([str(root), "--out", str(root / "out"), "--bootstrap", "0", "--no-figures"]) == 0
    return root / "out" / "tables"


def test_the_error_mark_means_one_thing_in_every_cell(reduced: Path) -> None:
    """† marks a score whose instances include errors counted wrong; latency cells (errors left out)
    carry none, and the note says only what is true of every marked cell."""
    table4, latency = (reduced / name for name in ("table4.md", "table_latency.md"))
    assert "25.00†" in table4.read_text() and "†" not in latency.read_text()
    (row,) = [line.split("|") for line in (reduced / "table3.md").read_text().splitlines()
              if line.startswith("| Raw Video")]
    assert "†" in row[4] and "†" not in row[-3] + row[-2]  # CS Und. (ER's error) marked; Storage/hr, Latency not


def test_the_judge_prompts_added_lines_are_declared() -> None:
    prompt = judge_prompt("TPG", "negative", "DAY1 11:00:00", {"evidence_moments": []}, "{}")
    assert prompt.startswith(rubric())
    a3 = ("Task-specific guidance field:", "TPG: ", "Causal cutoff:", "Reference annotations:", "Model response:")
    added = [block for block in prompt.removeprefix(rubric()).strip().split("\n\n")
             if not block.startswith(a3) and block not in ("{}", '{\n "evidence_moments": []\n}')]
    declared = (DOCS / "prompts.md").read_text()
    assert added == ["Task: TPG. Probe polarity: negative (the correct decision, already checked: SILENT)."]
    assert "`Task: <TASK>. Probe polarity: <positive\\|negative> (the correct decision, already checked: " \
           "<INTERVENE\\|SILENT>).`" in declared
    assert f"system message `{JUDGE_SYSTEM}`" in declared
