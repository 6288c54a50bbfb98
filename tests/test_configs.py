"""The configs themselves: every option composes and instantiates; typos fail at compose time."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from hydra.utils import instantiate
from omegaconf.errors import ConfigKeyError, ValidationError

from apm.configs import CONF_DIR
from apm.memory.base import MemoryProtocol
from apm.runner.app import run_dir_of
from apm.runner.config import ConfigError, check_arguments, config_hash
from apm.streaming import StreamingSystem

MEMORIES = sorted(p.stem for p in (Path(CONF_DIR) / "memory").glob("*.yaml"))
BACKBONES = sorted(p.stem for p in (Path(CONF_DIR) / "backbone").glob("*.yaml"))


def _compose(*overrides: str):
    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        return compose("config", overrides=list(overrides))


MEMORY_REQUIRED = {"hosted": ["+memory@memory.system=event_memory"]}
"""The mandatory values (``???``) of memory configs that have them: the system ``hosted`` runs in a child."""


@pytest.mark.parametrize("memory", MEMORIES)
def test_every_memory_protocol_instantiates(memory):
    protocol = instantiate(_compose(f"memory={memory}", *MEMORY_REQUIRED.get(memory, [])).memory, _convert_="all")
    assert isinstance(protocol, MemoryProtocol | StreamingSystem) and protocol.name


REQUIRED = {"openai_compatible": ["backbone.base_url=http://127.0.0.1:8000/v1", "backbone.model=my-model"]}
"""The mandatory values (``???``) of presets that have them."""


@pytest.mark.parametrize("backbone", BACKBONES)
def test_every_backbone_config_composes_with_a_name_and_frame_limit(backbone):
    cfg = _compose(f"backbone={backbone}", *REQUIRED.get(backbone, []))
    assert cfg.backbone.name and "_target_" in cfg.backbone
    assert isinstance(cfg.backbone.max_frames, int)
    check_arguments(cfg.backbone, "backbone")  # every key an argument of its class, of the right type


def test_the_generic_endpoint_is_named_by_its_model():
    cfg = _compose("backbone=openai_compatible", *REQUIRED["openai_compatible"])
    backbone = instantiate(cfg.backbone, _convert_="all")
    assert backbone.name == "my-model" and backbone.api_key_env is None
    assert str(run_dir_of(cfg)).split("/")[-1].startswith("my-model-")
    with pytest.raises(Exception, match="Missing mandatory value: backbone.model"):
        run_dir_of(_compose("backbone=openai_compatible", "backbone.base_url=http://x/v1"))


VLLM_PRESETS = [b for b in BACKBONES if "vllm_server" in (Path(CONF_DIR) / "backbone" / f"{b}.yaml").read_text()]


@pytest.mark.parametrize("backbone", VLLM_PRESETS)
def test_every_vllm_preset_talks_to_a_running_server_with_a_key(backbone):
    cfg = _compose(f"backbone={backbone}", "backbone.launch=false", "backbone.base_url=http://10.0.0.7:8000/v1",
                   "backbone.api_key_env=MY_VLLM_KEY")
    b = instantiate(cfg.backbone, _convert_="all")
    assert (b.launch, b.base_url, b.api_key_env) == (False, "http://10.0.0.7:8000/v1", "MY_VLLM_KEY")
    assert config_hash(cfg) == config_hash(_compose(f"backbone={backbone}"))  # where it runs is not the method


@pytest.mark.parametrize("override,says", [
    ("memory.keep_sessions=abc", "memory.keep_sessions='abc': expected int | None, got str"),
    ("+memory.keep_session=2", "memory.keep_session: apm.memory.video.RawVideo takes no such argument (did you mean "
                               "keep_sessions?)"),
])
def test_wrong_arguments_inside_a_config_group_are_named(override, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        check_arguments(_compose("memory=restricted", override).memory, "memory")


def test_a_try_and_latency_mode_are_the_same_run():
    base = _compose()
    assert config_hash(base) == config_hash(_compose("dataset.limit=5", "dataset.trajectories=[a]",
                                                     "latency_mode=true", "preflight=false", "fail_fast=0"))


@pytest.mark.parametrize("override,error", [
    ("concurency=4", ConfigCompositionException),
    ("concurrency=lots", ConfigCompositionException),
    ("shard.count=two", ConfigCompositionException),
    ("frames.maxside=3", ConfigCompositionException),
])
def test_typos_and_wrong_types_fail_at_compose_time(override, error):
    with pytest.raises(error) as e:
        _compose(override)
    assert isinstance(e.value.__cause__, (ConfigKeyError, ValidationError)) or "Could not override" in str(e.value)


def test_run_identity_ignores_shard_concurrency_and_logging():
    a = _compose("shard.index=0", "shard.count=3")
    b = _compose("shard.index=2", "shard.count=3", "concurrency=64", "logging.wandb.mode=disabled")
    c = _compose("memory=text_summary")
    assert config_hash(a) == config_hash(b) != config_hash(c)
    assert run_dir_of(a) == run_dir_of(b)
    assert str(run_dir_of(a)).endswith(f"synthetic/raw-video-as-memory/random-{config_hash(a)}")


def test_transport_settings_of_a_backbone_do_not_change_the_run():
    base = _compose("backbone=gemini_3_6_flash")
    same = _compose("backbone=gemini_3_6_flash", "backbone.concurrency=2", "backbone.max_attempts=12",
                    "backbone.base_url=http://127.0.0.1:1/v1")
    other = _compose("backbone=gemini_3_6_flash", "backbone.max_frames=64")
    assert config_hash(base) == config_hash(same) != config_hash(other)


PRESETS = sorted(p.stem for p in (Path(CONF_DIR) / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("preset", PRESETS)
def test_every_paper_preset_times_latency_as_table_3_needs(preset):
    """Issue 36 item 5: a preset standing for the paper gives Table 3's latency and Figure 2 (isolated
    records: a latency sample after the main run), unless it runs only the EA set (whose latency no
    table shows)."""
    cfg = _compose(f"+experiment={preset}")
    if list(cfg.dataset.tasks or []) == ["EA"]:
        return
    assert cfg.latency.sample > 0 or cfg.latency_mode, f"+experiment={preset} runs without isolated latency"
