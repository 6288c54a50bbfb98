"""One row, one identity (issue 35, item 1): every record names the code (a plug-in's own imports and the
engine stack included) and the model (a local folder's content, or what a server lists) that made it;
``apm-run`` refuses to resume a shard under another identity, and ``apm-reduce`` refuses a method whose
lines carry more than one."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest
from support.runner import compose_run, records, run, served

from apm.backbones.hf import HFBackbone
from apm.backbones.openai_api import OpenAIBackbone
from apm.backbones.vllm_offline import VLLMOfflineBackbone
from apm.backbones.vllm_server import VLLMServerBackbone
from apm.cli import reduce as apm_reduce
from apm.runner import code
from apm.runner.config import ConfigError
from apm.scale import scheduler

PLUGIN = '''"""A plug-in backbone outside apm that imports a module of its own."""

from {helper} import NAME

from apm.backbones.baselines import RandomBaseline


class Mine(RandomBaseline):
    """The random baseline under the helper's name."""

    name = NAME


class Local(Mine):
    """As :class:`Mine`, its model read from a local folder (``model_path``: named by its content)."""

    def __init__(self, model_path: str, **kw) -> None:
        super().__init__(**kw)
        self.model_path = model_path
'''
HELPER = 'NAME = "mine"\n'
BASE = ["memory=none", "dataset.tasks=[ER,CT]"]


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No scheduler, and a weights-digest cache of the test's own."""
    monkeypatch.setattr(scheduler, "available", lambda: False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stem: str) -> tuple[Path, Path]:
    """A plug-in module ``<stem>_plug`` importing ``<stem>_help``, importable from here; their files."""
    folder = tmp_path / "plugins"
    folder.mkdir(exist_ok=True)
    module, helper = folder / f"{stem}_plug.py", folder / f"{stem}_help.py"
    module.write_text(PLUGIN.format(helper=f"{stem}_help"))
    helper.write_text(HELPER)
    monkeypatch.syspath_prepend(str(folder))
    return module, helper


def reduce(runs: Path, out: Path, *extra: str) -> int:
    return apm_reduce.main(
        [str(runs), "--out", str(out), "--bootstrap", "0", "--allow-unjudged", "--no-figures", *extra]
    )


def fingerprint(run_dir: Path) -> dict[Path, bytes]:
    """Every file of a run dir but its locks, with its bytes."""
    return {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and "locks" not in p.parts}


@pytest.mark.parametrize("edited", ["plugin", "helper"])
def test_shards_of_other_code_are_refused_by_reduce(tiny, tmp_path, monkeypatch, capsys, edited):
    stem = f"shards_{edited}"
    module, helper = plugin(tmp_path, monkeypatch, stem)
    overrides = [*BASE, "backbone=random", f"backbone._target_={stem}_plug.Mine", "shard.count=2"]
    run_dir = run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", [*overrides, "shard.index=0"]))
    first = {r["run"]["code"] for r in records(run_dir)}
    touched = module if edited == "plugin" else helper
    touched.write_text(touched.read_text() + "# edited between the shards\n")
    run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", [*overrides, "shard.index=1"]))
    assert len({r["run"]["code"] for r in records(run_dir)} - first) == 1  # the edit is a new identity
    capsys.readouterr()

    compare = ["--compare", str(run_dir), str(run_dir), "--out", str(tmp_path / "report"), "--bootstrap", "0"]
    for ask in (
        lambda: reduce(tmp_path / "runs", tmp_path / "report"),
        lambda: reduce(tmp_path / "runs", tmp_path / "report", "--complete"),
        lambda: apm_reduce.main(compare),
    ):
        assert ask() == 2
        said = capsys.readouterr().err.strip().splitlines()
        refusal = [line for line in said if "identities" in line]
        assert len(refusal) == 1 and "Traceback" not in "\n".join(said), said
        assert "2 identities" in refusal[0] and "nothing written" in refusal[0], refusal[0]
        assert not (tmp_path / "report").exists()


def test_a_module_a_plugin_imports_is_part_of_the_code(tmp_path, monkeypatch):
    _, helper = plugin(tmp_path, monkeypatch, "closure")
    cfg = compose_run(
        tmp_path,
        tmp_path / "runs",
        tmp_path / "cache",
        ["memory=none", "backbone=random", "backbone._target_=closure_plug.Mine"],
    )
    parts = code.code_parts(cfg)
    assert set(parts["modules"]) == {"closure_plug", "closure_help"}
    assert {"torch", "transformers", "vllm", "av"} <= set(parts["packages"])
    helper.write_text(HELPER + "# edited\n")
    assert "module closure_help changed" in code.what_changed(parts, code.code_parts(cfg))


def fake_weights(folder: Path, weights: bytes) -> Path:
    """A model folder as a checkpoint has it: a config and a weights file (its bytes ``weights``)."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2_vl"}))
    (folder / "model.safetensors").write_bytes(weights)
    return folder


def test_a_resume_after_the_weights_were_rebuilt_is_refused(tiny, tmp_path, monkeypatch):
    plugin(tmp_path, monkeypatch, "weights")
    folder = fake_weights(tmp_path / "model", b"\x00" * 4096)
    cfg = compose_run(
        tiny,
        tmp_path / "runs",
        tmp_path / "cache",
        [
            *BASE,
            "backbone=random",
            "backbone._target_=weights_plug.Local",
            f"+backbone.model_path={folder}",
            "dataset.limit=5",
        ],
    )
    run_dir = run(cfg)
    assert len({r["run"]["model"] for r in records(run_dir)}) == 1
    fake_weights(folder, b"\x01" * 4096)  # rebuilt at the same path: another model
    before = fingerprint(run_dir)
    with pytest.raises(ConfigError) as refused:
        run(cfg)
    said = str(refused.value)
    assert "\n" not in said and "5 records" in said and "made by another model" in said, said
    assert "rerun=all" in said, said
    assert fingerprint(run_dir) == before  # nothing written


@pytest.mark.parametrize(
    "make",
    [
        lambda path: HFBackbone(str(path)),
        lambda path: VLLMOfflineBackbone(str(path)),
        lambda path: VLLMServerBackbone(model=str(path)),
    ],
)
def test_a_local_model_is_named_by_its_folders_content(tmp_path, make):
    folder = fake_weights(tmp_path / "model", b"\x00" * 4096)
    first = asyncio.run(make(folder).model_identity())
    assert asyncio.run(make(shutil.copytree(folder, tmp_path / "copy")).model_identity()) == first  # not its path
    fake_weights(folder, b"\x02" * 4096)
    assert asyncio.run(make(folder).model_identity()) != first


def test_weight_digests_are_cached_by_path_size_and_mtime(tmp_path):
    folder = fake_weights(tmp_path / "model", b"\x00" * 4096)
    first = asyncio.run(HFBackbone(str(folder)).model_identity())
    weights = folder / "model.safetensors"
    stamp = weights.stat()
    weights.write_bytes(b"\x03" * 4096)  # same size; the mtime put back: the cache answers
    os.utime(weights, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert asyncio.run(HFBackbone(str(folder)).model_identity()) == first
    os.utime(weights)  # touched: read again
    assert asyncio.run(HFBackbone(str(folder)).model_identity()) != first


def test_a_resume_against_a_server_serving_another_model_is_refused(tiny, tmp_path):
    def overrides(url: str) -> list[str]:
        return [
            *BASE,
            "backbone=openai_compatible",
            f"backbone.base_url={url}",
            "backbone.model=served",
            "dataset.limit=5",
            "concurrency=2",
        ]

    with served(models=("served",), model_info={"root": "/models/a"}) as first:
        run_dir = run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", overrides(first.base_url)))
    assert len(records(run_dir)) == 5
    with served(models=("served",), model_info={"root": "/models/a"}) as moved:  # the same model elsewhere
        run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", overrides(moved.base_url)))
    before = fingerprint(run_dir)
    with served(models=("served",), model_info={"root": "/models/b"}) as other:
        with pytest.raises(ConfigError) as refused:
            run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", overrides(other.base_url)))
    said = str(refused.value)
    assert "\n" not in said and "5 records" in said and "made by another model" in said, said
    assert fingerprint(run_dir) == before


def test_a_server_is_named_by_its_listing_not_by_volatile_fields(tmp_path):
    async def identity(**settings) -> object:
        with served(**settings) as server:
            return await OpenAIBackbone(model="served", base_url=server.base_url).model_identity()

    a = asyncio.run(identity(models=("served",), model_info={"root": "/models/a", "created": 1}))
    assert asyncio.run(identity(models=("served",), model_info={"root": "/models/a", "created": 2})) == a
    assert asyncio.run(identity(models=("served",), model_info={"root": "/models/a", "revision": "r2"})) != a
