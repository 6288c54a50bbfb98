"""The parametric-memory reference (Video-SALMONN-S-like) on the tiny Qwen2-VL and Qwen3-VL: fast weights
trained on the stream through the run's shared backbone, reported apart from per-video storage (B.4) on the
memory lines and in reduce's Table 10, deterministic on replay, answers independent of the probes asked,
and the base model left exactly as it was."""

from __future__ import annotations

import asyncio
import json
from importlib import resources
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest
from support.runner import assert_storage_is_on_disk, compose_run, memory_records, records, run
from support.tiny_vlm import frames_request, make_frames

from apm.backbones.hf import HFBackbone
from apm.reduce.load import load_judgements, load_memory, load_records
from apm.reduce.names import human_bytes
from apm.reduce.scores import score_table
from apm.reduce.tables import write_tables
from apm.streaming.base import FAST_WEIGHTS
from apm.streaming.internals import UnsupportedArchitecture
from apm.streaming.parametric import FAST_WEIGHTS_FILE, Adapter, ParametricMemory, adapted, train_on_chunk

pytestmark = pytest.mark.slow
ARCHITECTURES = ["tiny_model", "tiny_qwen25vl", "tiny_qwen3vl"]
"""The fixtures of the tiny models the system must run on: Qwen2-VL, Qwen2.5-VL and Qwen3-VL."""
TASKS = "ER,ERA,EA"


def _parametric(model: Path, tasks: str) -> list[str]:
    return ["memory=parametric_memory", "backbone=tiny_qwen2vl_hf", f"backbone.model={model}",
            "generation.max_tokens=6", f"dataset.tasks=[{tasks}]"]


@pytest.fixture(scope="module", params=ARCHITECTURES)
def runs(request, one, tmp_path_factory) -> tuple[Path, Path]:
    """Per architecture: the run of ER, ERA and EA, and a run of ER alone into another run folder."""
    model = request.getfixturevalue(request.param)
    tmp = tmp_path_factory.mktemp(request.param)
    full = run(compose_run(one, tmp / "full", tmp / "cache", _parametric(model, TASKS)))
    subset = run(compose_run(one, tmp / "subset", tmp / "cache", _parametric(model, "ER")))
    return full, subset


def _schema(name: str) -> dict:
    return json.loads(resources.files("apm.records").joinpath("schemas", name).read_text())


def test_records_validate_and_answers_come_from_the_adapted_model(runs):
    full, _ = runs
    recs = records(full)
    assert {r["task"] for r in recs} == set(TASKS.split(","))
    for r in recs:
        jsonschema.validate(r, _schema("record.schema.json"))
        assert r["error"] is None and r["tokens"]["completion"] > 0 and r["frames"]
        assert r["latency"]["ttft_from"] == "last_update" and r["latency"]["ttft_s"] > 0
        assert r["run"]["declarations"]["memory"]["representation"] == "parametric"
    for line in memory_records(full):
        jsonschema.validate(line, _schema("memory.schema.json"))


def test_fast_weights_are_reported_apart_from_per_video_storage(runs):
    """B.4: the fast weights are measured (``fast_weight_bytes``) and never added to ``bytes``."""
    full, _ = runs
    lines = sorted(memory_records(full), key=lambda m: m["session_index"])
    assert len(lines) > 1 and all(m["error"] is None and m["chunks"] > 0 for m in lines)
    for m in lines:
        fast = {p: e for p, e in m["state"].items() if p.startswith(f"{FAST_WEIGHTS}/")}
        assert list(fast) == [FAST_WEIGHTS_FILE]
        assert m["fast_weight_bytes"] == fast[FAST_WEIGHTS_FILE]["bytes"] > 0
        assert m["bytes"] == sum(e["bytes"] for p, e in m["state"].items() if p not in fast) > 0
    assert len({m["fast_weight_bytes"] for m in lines}) == 1  # constant, whatever the video seen
    assert len({m["state"][FAST_WEIGHTS_FILE]["sha256"] for m in lines}) == len(lines)  # trained each session
    state = full / "memory_state" / lines[-1]["trajectory_id"]
    assert (state / FAST_WEIGHTS_FILE).stat().st_size == lines[-1]["fast_weight_bytes"]
    assert_storage_is_on_disk(full)


def test_reduce_shows_the_fast_weights_apart(runs, tmp_path):
    full, _ = runs
    records_, memory = load_records([full]), load_memory([full])
    scores = score_table(records_, load_judgements([full]), memory, reps=0)
    value = scores.set_index("metric")["value"]
    lines = sorted(memory_records(full), key=lambda m: m["session_index"])[:-1]  # states a later session reads
    assert value["peak_storage_bytes_max"] == max(m["bytes"] for m in lines)
    assert value["peak_fast_weight_bytes_mean"] == value["peak_fast_weight_bytes_max"] == lines[0]["fast_weight_bytes"]
    write_tables(scores, tmp_path)
    table10 = (tmp_path / "table10.md").read_text()
    assert "Fast weights" in table10 and human_bytes(lines[0]["fast_weight_bytes"]) in table10


def test_a_replay_rebuilds_the_same_state_and_answers_do_not_depend_on_the_probes_asked(runs):
    full, subset = runs
    digests = [{(m["session_index"], m["state_sha256"]) for m in memory_records(d)} for d in (full, subset)]
    assert digests[0] == digests[1]  # every session replayed again, fewer probes asked: the same states
    outputs = {r["key"]: r["output"] for r in records(full)}
    asked = {r["key"]: r["output"] for r in records(subset)}
    assert asked and all(outputs[k] == out for k, out in asked.items())


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_the_base_model_is_left_exactly_as_it_was(architecture, request):
    """Training and answering through fast weights change the adapted model's function, never the shared
    backbone's: its parameters, gradient flags, modules and outputs are those before."""
    backbone = HFBackbone(str(request.getfixturevalue(architecture)))
    adapter, frames = Adapter(rank=4, alpha=8, seed=0), make_frames(4, size=(112, 112))
    probe = frames_request(frames[:2], max_tokens=8)

    def logits(processor, model, weights=None):
        import torch

        ids = processor.tokenizer("what happened before?", return_tensors="pt").input_ids
        if weights is None:
            with torch.inference_mode():
                return model(input_ids=ids).logits
        with adapted(model, adapter, weights) as fast, torch.inference_mode():
            return fast(input_ids=ids).logits

    def shape_of(processor, model):
        return ({n: (p.detach().clone(), p.requires_grad) for n, p in model.named_parameters()},
                [n for n, _ in model.named_modules()], model.training)

    async def scenario():
        async with backbone:
            before, base = await backbone.with_model(shape_of), await backbone.with_model(logits)
            answered = await backbone.generate(probe)
            weights, losses = await backbone.with_model(train_on_chunk, adapter, None, frames, 3, 0.5)
            weights, more = await backbone.with_model(train_on_chunk, adapter, weights, frames, 3, 0.5)
            through = await backbone.generate_adapted(lambda model: adapted(model, adapter, weights), probe)
            fast = await backbone.with_model(logits, weights)
            after, again = await backbone.with_model(shape_of), await backbone.with_model(logits)
            return before, base, answered, losses + more, through, fast, after, again, await backbone.generate(probe)

    before, base, answered, losses, through, fast, after, again, reanswered = asyncio.run(scenario())
    assert losses[-1] < losses[0]  # test-time training lowers its own loss
    assert through.error is None and through.completion_tokens > 0
    assert not fast.equal(base)  # the fast weights change what the model computes
    assert again.equal(base) and reanswered.text == answered.text
    assert after[1] == before[1] and after[2] == before[2] and not any("lora" in n for n in after[1])
    assert all(after[0][n][0].equal(p) and after[0][n][1] == flag for n, (p, flag) in before[0].items())


def test_an_architecture_it_does_not_know_is_refused_in_one_line(tmp_path):
    class Llama(HFBackbone):
        async def with_model(self, fn, *args):
            return fn(None, SimpleNamespace(config=SimpleNamespace(model_type="llama")), *args)

    system, context = ParametricMemory(), _Context(Llama("nowhere"), tmp_path)
    with pytest.raises(UnsupportedArchitecture, match=r"^model type 'llama' is not supported .*; supported: Qwen2-VL"):
        asyncio.run(system.begin(context))  # type: ignore[arg-type]


class _Context:
    """As much of a session context as ``begin`` reads before it refuses a backbone."""

    def __init__(self, backbone: HFBackbone, state_dir: Path) -> None:
        self.backbone, self.state_dir = backbone, state_dir
