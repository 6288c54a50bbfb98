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
