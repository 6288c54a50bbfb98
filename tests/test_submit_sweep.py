"""apm-submit expands a sweep exactly as Hydra's basic sweeper does, on Hydra's public override API."""

from __future__ import annotations

import pytest
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper  # the reference only: the product uses none
from hydra.core.override_parser.overrides_parser import OverridesParser

from apm.runner.config import ConfigError
from apm.scale.submit import _combinations


@pytest.mark.parametrize("overrides", [
    ["memory=none,raw_video", "backbone=random,oracle", "shard.count=2"],
    ["memory=a,b", "memory=c", "x=1"],
    ["+experiment=general_grid", "shard.index=range(0,3)"],
    ["memory=choice(a,b)", "~backbone.seed", "backbone=x"],
])
def test_combinations_match_hydras_basic_sweeper(overrides: list[str]) -> None:
    parsed = OverridesParser.create().parse_overrides(overrides)
    assert _combinations(parsed) == BasicSweeper.split_arguments(parsed, None)[0]


def test_a_range_sweep_of_floats_is_refused() -> None:
    with pytest.raises(ConfigError, match="only discrete sweeps"):
        _combinations(OverridesParser.create().parse_overrides(["lr=interval(0,1)"]))


def test_a_done_shard_is_submitted_again_only_by_a_rerun(tmp_path, monkeypatch) -> None:
    """``apm-submit rerun=all`` after a code change must reach the shards that are all on record."""
    from support.runner import compose_run, run

    from apm.scale import scheduler
    from apm.scale.submit import ShardJob, pending
    from apm.synth import generate

    monkeypatch.setattr(scheduler, "available", lambda: False)
    tiny = generate(tmp_path / "rel" / "tiny", seed=1, scale="tiny")
    run_dir = run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache",
                              ["memory=none", "backbone=random", "dataset.tasks=[ER]"]))
    plain, rerun = (ShardJob((), run_dir, "shard-0-of-1", reruns) for reruns in (False, True))
    assert pending([plain]) == ([], [(plain, "done")])
    assert pending([rerun]) == ([rerun], [])
