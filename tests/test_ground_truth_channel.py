"""Ground truth on its own channel: a model backbone's request carries no annotation, so it cannot
reach the correct option; only a reference baseline is handed the instance (``ask``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from support.runner import compose_run, records, run

from apm.backbones.base import Backbone, Request, Response
from apm.data.instances import Instance
from apm.synth import generate


class Spy(Backbone):
    """A model-like backbone that keeps every request it is sent and answers ``A``."""

    seen: list[Request] = []

    def __init__(self, name: str = "Spy", max_frames: int | None = 8):
        self.name, self.max_frames = name, max_frames

    async def generate(self, request: Request) -> Response:
        Spy.seen.append(request)
        return Response(text='{"answer":"A"}', ttft_s=0.0, total_s=0.0, finish_reason="stop")


def _objects(value: Any) -> list[Any]:
    """Every object reachable from ``value`` through dataclass fields, tuples, lists and dicts."""
    out, todo = [], [value]
    while todo:
        item = todo.pop()
        out.append(item)
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            todo += [getattr(item, f.name) for f in dataclasses.fields(item)]
        elif isinstance(item, list | tuple):
            todo += list(item)
        elif isinstance(item, dict):
            todo += list(item.values())
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("rel") / "tiny", seed=4, scale="tiny")


def test_a_model_backbone_cannot_reach_the_correct_option(tiny: Path, tmp_path: Path) -> None:
    Spy.seen = []
    cfg = compose_run(tiny, tmp_path / "runs", tmp_path / "cache",
                      ["memory=raw_video", "backbone=random", "backbone._target_=test_ground_truth_channel.Spy",
                       "~backbone.seed", "dataset.tasks=[ER,EST,TR]"])
    run_dir = run(cfg)
    assert Spy.seen and len(Spy.seen) == len(records(run_dir))
    assert {f.name for f in dataclasses.fields(Request)} == {"messages", "settings", "request_id", "trajectory_id"}
    for request in Spy.seen:
        reached = _objects(request)
        assert not [o for o in reached if isinstance(o, Instance)]
        texts = " ".join(o for o in reached if isinstance(o, str))
        assert "correct_option" not in texts and "evidence_moments" not in texts
