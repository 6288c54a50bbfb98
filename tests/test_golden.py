"""Golden regression: the reference baselines under the three main protocols on the synthetic
``small`` release give a pinned ``scores.csv``, value for value, CI bounds included.

Everything here is deterministic (the release is byte-identical per seed, the baselines and the
gate-only judge need no model, the bootstrap is seeded) except latency, which is left out of the pin,
and config hashes, which change with any config default and are compared as labels only.
A change of any pinned number fails this test. Updating the pin is a deliberate commit that says why:
``APM_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_golden.py`` rewrites it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from apm.cli.reduce import main as reduce_main
from apm.reduce.scores import read_scores

PIN = Path(__file__).parent / "golden" / "small_reference_scores.csv"
LATENCY = {"ttft_s", "latency_total_s", "rtf"}
"""Wall-clock metrics: never the same twice, so not pinned."""
BIN = Path(sys.executable).parent


def _cli(name: str, *args: str, env: dict[str, str]) -> None:
    subprocess.run([str(BIN / name), *args], check=True, env=env, capture_output=True, timeout=600)


def _comparable(scores: pd.DataFrame) -> pd.DataFrame:
    """The pinned view: latency rows and config hashes out, rows in a stable order."""
    kept = scores[~scores["metric"].str.removesuffix("_answered").isin(LATENCY)].drop(columns="config_hash")
    keys = ["memory_config", "backbone_config", "metric", "task"]
    return kept.sort_values(keys, kind="stable").reset_index(drop=True)


@pytest.fixture(scope="module")
def scores(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    tmp = tmp_path_factory.mktemp("golden")
    env = {**os.environ, "APM_CACHE_DIR": str(tmp / "cache"), "WANDB_MODE": "disabled"}
    _cli("apm-data", "synth", "--out", str(tmp / "release"), "--scale", "small", "--seed", "0", env=env)
    _cli("apm-run", "-m", f"dataset.root={tmp / 'release'}", f"output_root={tmp / 'runs'}",
         "memory=none,raw_video,text_summary", "backbone=random,always_silent,always_intervene,oracle",
         "logging.progress=false", "logging.wandb.mode=disabled", env=env)
    run_dirs = sorted(str(p.parent) for p in (tmp / "runs").rglob("config.json"))
    assert len(run_dirs) == 12
    _cli("apm-judge", *run_dirs, "judge=gate_only", env=env)
    assert reduce_main([*run_dirs, "--out", str(tmp / "report"), "--seed", "0", "--bootstrap", "200",
                        "--no-figures"]) == 0
    return _comparable(read_scores(tmp / "report" / "scores.csv"))


def test_reference_scores_match_the_pin(scores: pd.DataFrame) -> None:
    if os.environ.get("APM_UPDATE_GOLDEN") == "1":
        PIN.parent.mkdir(exist_ok=True)
        scores.to_csv(PIN, index=False)
    pinned = _comparable(read_scores(PIN).assign(config_hash=""))
    pd.testing.assert_frame_equal(scores, pinned, check_dtype=False, rtol=1e-9, atol=1e-9)


def test_the_pin_is_the_paper_accounting(scores: pd.DataFrame) -> None:
    """Sanity of what is pinned: the oracle is perfect, always-silent's MCQA errors count as wrong."""
    oracle = scores[(scores["backbone_config"] == "oracle") & (scores["metric"] == "task_score")]
    assert len(oracle) and (oracle["value"] == 100.0).all()
    silent = scores[(scores["backbone_config"] == "always_silent") & (scores["metric"] == "task_score")
                    & (scores["task"] == "ER")]
    assert (silent["value"] == 0.0).all() and (silent["n_error"] > 0).all()
