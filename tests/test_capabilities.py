"""The backbone contract declares its optional capabilities (issue 21, item 3): nothing in the product
discovers them by probing, a backbone with only the required members runs (preflight, latency mode,
judging) with every capability at its default, and docs/backbones.md lists the whole contract."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import json
import re
from pathlib import Path

from support.runner import compose_run, records, run

from apm import backbones as contract
from apm.backbones import Backbone, BackboneLike, Bare, Message, Request, Response, TextPart, as_backbone
from apm.judge.rubric import CRITERIA
from apm.judge.stage import JudgeStage
from apm.records.declaration import Declaration
from apm.synth import generate

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "apm"
ENGINE_WORDS = ("backbone", "writer", "engine", "judge")
"""Names the product gives a backbone; probing an object so named is probing a backbone."""
READ_FOR_EVERY_METHOD = {"declaration"}
"""Contract members read generically for memories, systems and backbones alike
(``apm.records.declaration.declared``, below the backbones in the layers)."""


class Minimal:
    """A backbone with the required members only, and no base class: it answers "A" to everything."""

    declaration = Declaration("general", tag="minimal")

    def __init__(self, name: str = "Minimal") -> None:
        self.name = name

    async def start(self) -> None:
        """Nothing to acquire."""

    async def close(self) -> None:
        """Nothing to release."""

    async def generate(self, request: Request) -> Response:
        adaptive = any("decision" in p.text for m in request.messages for p in m.parts if isinstance(p, TextPart))
        text = '{"decision":"SILENT","reason":"minimal"}' if adaptive else '{"answer":"A"}'
        return Response(text=text, ttft_s=0.0, total_s=0.0, finish_reason="stop")


class MinimalJudge(Minimal):
    """A judge with the required members only: the rubric's JSON, score 3."""

    async def generate(self, request: Request) -> Response:
        reply = {"score": 3, "criterion_checks": {name: "pass" for name in CRITERIA}, "critical_issues": [],
                 "justification": "minimal"}
        return Response(text=json.dumps(reply), ttft_s=0.0, total_s=0.0, finish_reason="stop")


def contract_members() -> set[str]:
    """Every public member :class:`Backbone` declares (required and optional)."""
    return {name for cls in Backbone.__mro__[:-1] for name in vars(cls) if not name.startswith("_")}


def probes(path: Path) -> list[str]:
    """Each ``getattr``/``hasattr`` in ``path`` that reads a contract member by name, or any member of
    an object named as a backbone is (``line: call``)."""
    members = contract_members() - READ_FOR_EVERY_METHOD
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2):
            continue
        target, attr = node.args[0], node.args[1]
        named = isinstance(attr, ast.Constant) and attr.value in members
        of_engine = any(word in ast.unparse(target).lower() for word in ENGINE_WORDS)
        if named or of_engine:
            where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_product_module_probes_a_backbone_for_a_capability() -> None:
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if "testing" not in path.parts for hit in probes(path)]
    assert not found, "\n".join(found)


def test_the_scan_sees_a_probe(tmp_path: Path) -> None:
    """The scan is not vacuous: a probe of a contract member, or of anything on an object named as a
    backbone, is caught; a ``getattr`` of something else is not."""
    sample = tmp_path / "sample.py"
    sample.write_text("def f(backbone, x):\n    getattr(backbone, 'anything')\n    hasattr(x, 'guard')\n"
                      "    getattr(x, 'retry_after')\n")
    assert [hit.split(": ", 1)[1] for hit in probes(sample)] == ["getattr(backbone, 'anything')",
                                                                 "hasattr(x, 'guard')"]


def test_a_minimal_backbone_has_every_capability_at_its_default() -> None:
    minimal = Minimal()
    assert isinstance(minimal, BackboneLike) and not isinstance(minimal, Backbone)
    full = as_backbone(minimal)
    assert isinstance(full, Bare) and full.inner is minimal and full.name == "Minimal"
    assert full.declaration == Minimal.declaration  # its own declaration is kept
    assert (full.max_frames, full.guard, full.api_key_env, full.prefix_caching, full.model_id) == (None,) * 5
    assert not full.answers_from_annotations and not full.checks_requests
    assert full.implementation == f"{__name__}.Minimal"
    failed = Response(error="boom", error_kind="server")
    assert full.advice(failed, "backbone") == "boom"
    asyncio.run(full.preflight("backbone"))  # nothing to check: returns
    full.log_into("/nonexistent")  # writes no log: nothing happens, nothing is created
    assert not Path("/nonexistent").exists()
    request = Request((Message.text("user", "Which?"),))
    assert asyncio.run(full.generate(request)).text == '{"answer":"A"}'
    backbone = Minimal()
    assert as_backbone(full) is full and as_backbone(as_backbone(backbone)).inner is backbone  # wrapped once


def test_a_minimal_backbone_runs_checked_in_latency_mode_and_is_judged(tmp_path: Path) -> None:
    """``apm-run`` with the preflight on and latency mode (the warm-up path), then the judge stage with
    a minimal judge (its preflight and fail-fast advice at their defaults)."""
    root = generate(tmp_path / "release", seed=2, scale="tiny", limit_trajectories=1)
    cfg = compose_run(root, tmp_path / "out", tmp_path / "cache", [
        "memory=none", "backbone=random", f"backbone._target_={__name__}.Minimal", "~backbone.seed",
        "~backbone.max_frames", "backbone.name=Minimal", "preflight=true", "latency_mode=true",
        "dataset.tasks=[ER,RCR]"])
    run_dir = run(cfg)
    recs = records(run_dir)
    assert recs and all(r["error"] is None for r in recs)
    assert {r["run"]["backbone"] for r in recs} == {"Minimal"}
    assert {r["latency"]["mode"] for r in recs} == {"isolated"}
    assert {r["latency"]["prefix_caching"] for r in recs} == {None}
    assert {r["output"] for r in recs} == {'{"answer":"A"}', '{"decision":"SILENT","reason":"minimal"}'}
    assert recs[0]["run"]["declarations"]["backbone"]["tag"] == "minimal, not sealed"  # a plug-in in process
    stage = JudgeStage(MinimalJudge("Minimal judge"), concurrency=2, preflight=True, fail_fast=3)
    stats = asyncio.run(stage.run([run_dir]))
    judged = [json.loads(line) for p in (run_dir / "judgements").glob("*.jsonl") for line in p.read_text().splitlines()]
    adaptive = [r for r in recs if r["task"] == "RCR" and r["gate_pass"]]
    assert stats.failed == 0 and stats.judged == len(judged) == len(adaptive) > 0
    assert {j["judge_model"] for j in judged} == {f"{__name__}.MinimalJudge"}  # its class: it has no model


def contract_section() -> str:
    text = (ROOT / "docs" / "backbones.md").read_text(encoding="utf-8")
    return text.split("## The contract", 1)[1].split("\n## ", 1)[0]


def test_docs_list_the_whole_contract() -> None:
    """Every field of the data types the contract exports (``apm.backbones.__all__``) and every member of
    :class:`Backbone` is named in docs/backbones.md's contract section (FramePart.still,
    Response.cached_tokens and error_kind among them)."""
    spans = re.findall(r"`([^`]+)`", contract_section().replace("```", ""))  # code spans, not fences
    named = {word for code in spans for word in re.findall(r"\w+", code)}
    types = [t for t in map(vars(contract).get, contract.__all__) if dataclasses.is_dataclass(t)]
    assert {Request, Response, Message} <= set(types)
    wanted = {f.name for t in types for f in dataclasses.fields(t)} | contract_members()
    assert wanted - named == set()
