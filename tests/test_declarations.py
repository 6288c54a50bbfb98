"""Methods declare what they are (issue 19, item 7): every configured class declares its family,
Streaming and Persistent; records carry the declarations; reduce groups and tags by them, never by
config name; and a label names every choice that changes the number, so no two configs share one."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from support.runner import compose_run, records, run

from apm.backbones.baselines import Baseline, RandomBaseline
from apm.cli.reduce import main as reduce_main
from apm.configs import CONF_DIR
from apm.memory.base import History, MemoryProtocol
from apm.memory.simple import SimpleStream
from apm.records.declaration import Declaration, declared, run_declarations
from apm.reduce.load import CONFIG, METHOD, RUN_FIELDS
from apm.reduce.names import row_label
from apm.reduce.scores import read_scores
from apm.runner.config import _locate, method_identity, register
from apm.scale.submit import sweep_combinations
from apm.synth import generate
from apm.testing import fixtures

GROUPS = ("memory", "backbone")
STATELESS = {"none", "oracle"}
REFERENCE_SYSTEMS = {"kv_cache", "event_memory", "feature_memory", "parametric_memory", "thought_memory"}
CHILD_SYSTEMS = {"child_template"}
"""Systems behind the process boundary: one class (``apm.boundary.ChildSystem``), declared per config."""
HOSTED = {"hosted"}
"""An in-process system hosted behind the boundary (``apm.boundary.host.HostedSystem``): declared as the system
it hosts declares itself (tests/test_boundary_host.py)."""


def _options(group: str) -> dict[str, dict[str, Any]]:
    return {p.stem: yaml.safe_load(p.read_text()) for p in sorted((Path(CONF_DIR) / group).glob("*.yaml"))}


@pytest.mark.parametrize("group", GROUPS)
def test_every_configured_class_declares_what_it_is(group: str) -> None:
    for option, node in _options(group).items():
        if option in HOSTED:
            continue
        per_config = option in CHILD_SYSTEMS
        declaration = Declaration(**node["declaration"]) if per_config else declared(_locate(node["_target_"]))
        assert declaration is not None, f"{group}={option}: {node['_target_']} declares nothing"
        if group == "memory":
            assert declaration.persistent is (option not in STATELESS), option
            assert (declaration.tag == "reference system") is (option in REFERENCE_SYSTEMS), option
            assert (declaration.family == "specialised") is (option in REFERENCE_SYSTEMS | CHILD_SYSTEMS), option


def test_the_protocol_base_declares_nothing_so_a_new_protocol_is_never_persistent_by_default() -> None:
    class Mine(MemoryProtocol):
        def history(self, instance, trajectory, state_dir) -> History:  # type: ignore[no-untyped-def]
            return History()

    assert declared(Mine()) is None
    block = run_declarations(Mine(), RandomBaseline(), None)
    assert block["capabilities"] == {"streaming": None, "persistent": None}


def _label(run_block: dict[str, Any]) -> str:
    """The row label reduce gives a run block (through the loader's own fields)."""
    wanted = set(METHOD + CONFIG)
    return row_label(SimpleNamespace(**{n: get(run_block) for n, get in RUN_FIELDS if n in wanted}))


def _run_block(cfg: Any) -> dict[str, Any]:
    parts = {key: _locate(cfg[key]._target_) if cfg.get(key) is not None else None
             for key in ("memory", "backbone", "writer")}
    return {"dataset": "synthetic", "memory": cfg.memory.name, "backbone": cfg.backbone.name,
            "config_hash": "0" * 12, **method_identity(cfg, cfg.hydra),
            **run_declarations(parts["memory"], parts["backbone"], parts["writer"])}


VARIANTS = (["+backbone@writer=perceiver"], ["+backbone@writer=random"], ["frames.layout=session_stable"],
            ["generation.max_tokens=8"], ["generation.temperature=0.7"], ["frames.fps=2.0"],
            ["memory.name=Renamed"])
"""Settings off the defaults that change what a method is shown or answers."""


def _labels(configs: list[list[str]]) -> dict[str, list[str]]:
    """Each config's label, with the configs that got it."""
    register()
    labels: dict[str, list[str]] = {}
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        for overrides in configs:
            cfg = compose("config", overrides=overrides, return_hydra_config=True)
            labels.setdefault(_label(_run_block(cfg)), []).append(" ".join(overrides))
    return labels


def test_two_different_configs_never_share_a_label() -> None:
    """A label is '<memory part> · <backbone part>': distinct memory parts over conf/memory and
    distinct backbone parts over conf/backbone make every pair distinct; so do the settings off the
    defaults."""
    memories = [[f"memory={m}", "backbone=qwen3_vl_8b"] for m in _options("memory")]
    backbones = [["memory=none", f"backbone={b}", *(["backbone.model=m", "backbone.base_url=u"]
                                                    if b == "openai_compatible" else [])]
                 for b in _options("backbone")]
    variants = [["memory=text_summary", "backbone=qwen3_vl_8b", *v] for v in VARIANTS]
    for configs, part in ((memories, 0), (backbones, 1), (memories[-1:] + variants, None)):
        labels = _labels(configs)
        assert all(len(cs) == 1 for cs in labels.values()), labels
        if part is not None:  # and so does the part of the label that belongs to the group
            assert len({label.split(" · ", 1)[part] for label in labels}) == len(configs), labels
    labels = _labels(variants[:1] + variants[2:3])
    assert set(labels) == {"Text Summary as Memory (writer=perceiver) · Qwen3-VL-8B-Instruct",
                           "Text Summary as Memory · Qwen3-VL-8B-Instruct [frames.layout=session_stable]"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("rel") / "tiny", seed=3, scale="tiny")


def test_records_carry_the_declarations(tiny: Path, tmp_path: Path) -> None:
    cfg = compose_run(tiny, tmp_path / "runs", tmp_path / "cache", ["memory=none", "backbone=random",
                                                                     "dataset.tasks=[ER]"])
    (block,) = {OmegaConf.to_yaml(OmegaConf.create(r["run"])) for r in records(run(cfg))}
    found = yaml.safe_load(block)
    assert found["declarations"] == {"memory": SimpleStream.declaration.as_record(),
                                     "backbone": RandomBaseline.declaration.as_record(), "writer": None}
    assert found["capabilities"] == {"streaming": False, "persistent": False}


class CoinFlip(Baseline):
    """A baseline no list of config names knows."""

    declaration = Declaration("baseline", tag="baseline")

    def answer(self, instance):  # type: ignore[no-untyped-def]
        raise ValueError("never called")


def test_a_new_baseline_is_tagged_and_placed_with_the_references(tmp_path: Path) -> None:
    methods = {("SimpleStream", "Qwen3-VL-8B-Instruct"): (SimpleStream.declaration, Declaration("general")),
               ("SimpleStream", "Coin Flip"): (SimpleStream.declaration, CoinFlip.declaration)}
    for i, ((memory, backbone), (mine, theirs)) in enumerate(methods.items()):
        run_block = fixtures.run_info(memory, backbone, declarations={"memory": mine, "backbone": theirs})
        run_block["choices"] = {"memory": "none", "backbone": f"plugin_{i}"}
        fixtures.synthetic_run(tmp_path / f"m{i}", run_block, trajectories=2, seed=40 + i)
    assert reduce_main([str(tmp_path), "--out", str(tmp_path / "out"), "--bootstrap", "0"]) == 0
    table = pd.read_csv(tmp_path / "out" / "tables" / "table3.csv", index_col=0)
    assert list(table.index) == ["SimpleStream · Qwen3-VL-8B-Instruct", "SimpleStream · Coin Flip (baseline)"]
    scores = read_scores(tmp_path / "out" / "scores.csv")
    assert set(scores["method_family"]) == {"baseline", "reference"}


def test_simplestream_is_one_method_in_the_presets_the_papers() -> None:
    """Over every preset's sweep, SimpleStream runs once: Qwen3-VL-8B with 4 recent frames (Section 4.1)."""
    register()
    found = []
    for preset in sorted((Path(CONF_DIR) / "experiment").glob("*.yaml")):
        for combo in sweep_combinations([f"+experiment={preset.stem}"]):
            with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
                cfg = compose("config", overrides=combo)
            if _locate(cfg.memory._target_) is SimpleStream:
                found.append((preset.stem, cfg.backbone.model, cfg.memory.recent_frames))
    assert found == [("simplestream", "Qwen/Qwen3-VL-8B-Instruct", 4)]
