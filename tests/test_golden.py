"""Golden regression: the pixel-perceiver reference under each main protocol, and the reference baselines,
on the synthetic ``small`` release give pinned scores, value for value, CI bounds included.

The perceiver answers from what a request shows, so its cells differ by protocol: the pin holds what each
protocol shows (SimpleStream, raw video, the text summary it writes itself, as in ``make demo``). The
baselines need no frames and score the same under every protocol, so they are pinned once (SimpleStream).
The pin is one CSV per metric under ``tests/golden/scores/`` holding the run's identity and its numbers
(:data:`PINNED`): a new metric adds a file, a new label or column changes none. A metric the pin lacks
is reported, not failed; a pinned metric that is gone, or any pinned number that moved, fails.

Everything here is deterministic (the release is byte-identical per seed, the perceiver and baselines
answer from what they are shown, the gate-only judge needs no model, the bootstrap is seeded) except
latency, which is left out. Updating the pin is a deliberate commit that says why:
``APM_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_golden.py`` rewrites the files that changed.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
from support.runner import run_as_app

from apm.cli.judge import main as judge_main
from apm.cli.reduce import main as reduce_main
from apm.memory.base import History
from apm.memory.video import RawVideo
from apm.reduce.scores import read_scores
from apm.synth import generate

PIN = Path(__file__).parent / "golden" / "scores"
LATENCY = {"ttft_s", "latency_total_s", "rtf"}
"""Wall-clock metrics: never the same twice, so not pinned."""
METHOD = ["memory_config", "backbone_config", "memory_variant", "backbone_variant"]
"""What identifies a row's method (its configs and the settings off their defaults), never a display name."""
PINNED = [*METHOD, "task", "value", "n", "n_error", "n_unparsed", "n_unjudged", "ci_low", "ci_high", "n_planned",
          "coverage"]
WRITER = ["memory.max_tokens=160", "+backbone@writer=perceiver"]
"""The demo's text summary: the perceiver writes it, within 160 tokens a session."""
PERCEIVER = {"none": [], "raw_video": [], "text_summary": WRITER}
BASELINES = ("random", "always_silent", "always_intervene", "oracle")


def scores_of(tmp: Path, runs: list[list[str]]) -> pd.DataFrame:
    """Run each override list on the ``small`` release (seed 0), judge gate-only, reduce: the pinned view."""
    release = generate(tmp / "release", seed=0, scale="small")
    run_dirs = [str(run_as_app(release, tmp / "runs", tmp / "cache", overrides)) for overrides in runs]
    assert judge_main([*run_dirs, "judge=gate_only"]) == 0
    assert reduce_main([*run_dirs, "--out", str(tmp / "report"), "--seed", "0", "--bootstrap", "200",
                        "--no-figures"]) == 0
    return comparable(read_scores(tmp / "report" / "scores.csv"))


def perceiver_runs() -> list[list[str]]:
    return [[f"memory={memory}", "backbone=perceiver", *extra] for memory, extra in PERCEIVER.items()]


def comparable(scores: pd.DataFrame) -> pd.DataFrame:
    """The pinned view: latency rows out, the :data:`PINNED` columns, rows in a stable order."""
    kept = scores[~scores["metric"].str.removesuffix("_answered").isin(LATENCY)]
    return kept[["metric", *PINNED]].sort_values(["metric", *METHOD, "task"], kind="stable").reset_index(drop=True)


def pinned() -> dict[str, pd.DataFrame]:
    """The pin, metric by metric."""
    return {path.stem: comparable(read_scores(path).assign(metric=path.stem)) for path in sorted(PIN.glob("*.csv"))}


def by_metric(scores: pd.DataFrame) -> Iterator[tuple[str, pd.DataFrame]]:
    for metric, rows in scores.groupby("metric", sort=True):
        yield str(metric), rows.reset_index(drop=True)


def update_pin(scores: pd.DataFrame) -> None:
    """Write each metric's file whose content changed, drop those of metrics gone; others keep their bytes."""
    PIN.mkdir(parents=True, exist_ok=True)
    metrics = dict(by_metric(scores))
    for path in PIN.glob("*.csv"):
        if path.stem not in metrics:
            path.unlink()
    for metric, rows in metrics.items():
        text = rows[PINNED].to_csv(index=False)
        path = PIN / f"{metric}.csv"
        if not path.exists() or path.read_text() != text:
            path.write_text(text)


def moved_cells(scores: pd.DataFrame, pin: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The pinned rows of ``scores``' methods whose numbers differ from the pin (or are missing), by metric."""
    methods = scores[METHOD].drop_duplicates()
    moved = []
    for metric, want in pin.items():
        want = want.merge(methods, on=METHOD)
        got = scores[scores["metric"] == metric]
        both = want.merge(got, on=["metric", *METHOD, "task"], how="left", suffixes=("", "_got"), indicator=True)
        numbers = [c for c in PINNED if c not in (*METHOD, "task")]
        differ = both["_merge"] != "both"
        for c in numbers:
            a, b = both[c].astype(float), both[f"{c}_got"].astype(float)
            differ |= ~((a - b).abs().le(1e-9) | (a.isna() & b.isna()))
        moved.append(both[differ])
    return pd.concat(moved, ignore_index=True)


@pytest.fixture(scope="module")
def scores(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    baselines = [["memory=none", f"backbone={b}"] for b in BASELINES]
    return scores_of(tmp_path_factory.mktemp("golden"), [*perceiver_runs(), *baselines])


def test_scores_match_the_pin(scores: pd.DataFrame) -> None:
    if os.environ.get("APM_UPDATE_GOLDEN") == "1":
        update_pin(scores)
    pin = pinned()
    assert pin, f"no pin under {PIN}"
    new = sorted(set(scores["metric"]) - set(pin))
    if new:
        warnings.warn(f"metrics not pinned yet (APM_UPDATE_GOLDEN=1 adds their files): {new}", stacklevel=1)
    gone = sorted(set(pin) - set(scores["metric"]))
    assert not gone, f"pinned metrics no longer reported: {gone}"
    for metric, rows in by_metric(scores[scores["metric"].isin(pin)]):
        pd.testing.assert_frame_equal(rows, pin[metric], check_dtype=False, rtol=1e-9, atol=1e-9, obj=metric)


def test_the_pin_tells_the_protocols_apart(scores: pd.DataFrame) -> None:
    """The perceiver's cross-session scores order the protocols as what they show does; the baselines,
    shown nothing, are perfect (oracle) and count their MCQA non-answers as wrong (always-silent)."""
    task_score = scores[scores["metric"] == "task_score"]
    perceiver = task_score[task_score["backbone_config"] == "perceiver"]
    for task in ("ER", "EST", "TR"):
        value = perceiver[perceiver["task"] == task].set_index("memory_config")["value"]
        assert value["none"] < value["text_summary"] < value["raw_video"], task
    oracle = task_score[task_score["backbone_config"] == "oracle"]
    assert len(oracle) and (oracle["value"] == 100.0).all()
    silent = task_score[(task_score["backbone_config"] == "always_silent") & (task_score["task"] == "ER")]
    assert (silent["value"] == 0.0).all() and (silent["n_error"] > 0).all()


def _without_earlier_sessions(history: Callable[..., History]) -> Callable[..., History]:
    """Raw video's frame choice, changed: no earlier session's frames (its turns are still shown)."""
    def changed(self: RawVideo, *args: object) -> History:
        return History(turns=history(self, *args).turns)
    return changed


def test_a_change_in_one_protocols_frame_choice_moves_exactly_its_cells(
        scores: pd.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RawVideo, "history", _without_earlier_sessions(RawVideo.history))
    moved = moved_cells(scores_of(tmp_path, perceiver_runs()), pinned())
    assert set(moved["memory_config"]) == {"raw_video"}
    assert {"ER", "EST", "TR"} <= set(moved["task"])
