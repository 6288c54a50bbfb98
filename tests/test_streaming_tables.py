"""The five reference streaming systems (one per memory representation) in a multirun sweep beside the
general protocols, on the tiny Qwen2-VL (one trajectory), judged and reduced: their rows reach Tables 3,
4, 8, 10 and 11 and Figures 2 and 8, and Table 3 groups them under the paper's representation headings."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pandas as pd
import pytest
from support.runner import console, first_trajectory

from apm.records.declaration import REPRESENTATIONS
from apm.reduce.figures import radar_figure, tradeoff_figure
from apm.reduce.scores import read_scores
from apm.synth import generate

pytestmark = pytest.mark.slow
REFERENCES = {"kv_cache": "KV-Cache Memory",
              "feature_memory": "Feature Memory (Flash-VStream-like, reference)",
              "event_memory": "Event Memory",
              "parametric_memory": "Parametric Memory (Video-SALMONN-S-like, reference)",
              "thought_memory": "Thought Memory (VST-like)"}
"""Each representation's reference system, config name to the name its rows print, in Table 3's order."""
SPECIALIZED = tuple(REFERENCES.values())


@pytest.fixture(scope="module")
def report(tiny_model, tmp_path_factory) -> Path:  # noqa: F811
    tmp = tmp_path_factory.mktemp("sweep")
    release = first_trajectory(generate(tmp / "tiny", seed=1, scale="tiny"), tmp / "release")
    env = {**os.environ, "APM_CACHE_DIR": str(tmp / "cache"), "APM_TINY_MODEL": str(tiny_model),
           "WANDB_MODE": "disabled"}
    common = [f"dataset.root={release}", f"output_root={tmp / 'runs'}", "backbone=tiny_qwen2vl_hf",
              "generation.max_tokens=8", "dataset.include_ea=false", "logging.progress=false",
              "logging.wandb.mode=disabled", "latency.sample=1"]  # Figure 2 needs isolated latency
    console("apm-run", "-m", *common, "memory=none,raw_video,event_memory,kv_cache,feature_memory,parametric_memory",
            env=env)
    console("apm-run", *common, "memory=text_summary", "memory.max_tokens=16", env=env)
    console("apm-run", *common, "memory=thought_memory", "memory.max_tokens=16", env=env)
    run_dirs = sorted(str(p.parent) for p in (tmp / "runs").rglob("config.json"))
    assert len(run_dirs) == 8
    console("apm-judge", *run_dirs, "judge=gate_only", env=env)
    console("apm-reduce", *run_dirs, "--out", str(tmp / "report"), "--bootstrap", "0", env=env)
    return tmp / "report"


@pytest.mark.parametrize("table", ["table3", "table4", "table8", "table10", "table11"])
def test_specialized_rows_reach_the_tables(report, table):
    text = (report / "tables" / f"{table}.md").read_text()
    # each system's row, its name followed by a variant's settings where it has any
    rows = [re.escape(name) + r"(?: \([^)]*\))? · .*\(reference system\)" for name in SPECIALIZED]
    assert all(re.search(row, text) for row in rows), text


def test_table3_marks_the_declared_capabilities(report):
    scores = read_scores(report / "scores.csv")
    declared = scores.drop_duplicates("memory_config").set_index("memory_config")[["streaming", "persistent"]]
    assert all(declared.loc[m].tolist() == [True, True] for m in REFERENCES)
    assert not declared.loc["raw_video", "streaming"]


def test_specialized_systems_are_in_figures_2_and_8(report):
    scores = read_scores(report / "scores.csv")
    assert {"figure2_tradeoff.png", "figure8_radar.png"} <= {p.name for p in (report / "figures").iterdir()}
    keyed = " ".join(t.get_text() for ax in tradeoff_figure(scores).axes for t in ax.texts)
    titled = [ax.get_title() for ax in radar_figure(scores, kind="specialised").axes if ax.get_visible()]
    assert all(name in keyed for name in SPECIALIZED) and set(SPECIALIZED) <= set(titled)
    storage = scores[(scores["metric"] == "storage_bytes_per_hour") & scores["memory_config"].isin(list(REFERENCES))]
    assert len(storage) == len(REFERENCES) and (pd.to_numeric(storage["value"]) > 0).all()


def test_table3_groups_the_five_references_by_representation_in_the_papers_order(report):
    lines = (report / "tables" / "table3.md").read_text().splitlines()
    headings = [i for i, line in enumerate(lines) if any(f"**{h}**" in line for h in REPRESENTATIONS.values())]
    assert [h for i in headings for h in REPRESENTATIONS.values() if f"**{h}**" in lines[i]] == list(
        REPRESENTATIONS.values())
    for start, end, name in zip(headings, [*headings[1:], len(lines)], SPECIALIZED):
        assert any(line.startswith(f"| {name}") for line in lines[start + 1:end]), (name, lines[start:end])
