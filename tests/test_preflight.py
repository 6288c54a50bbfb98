"""A misconfigured endpoint stops ``apm-run`` before the first instance, within seconds, with one line
saying what to change and nothing left behind; the shard's largest request is checked against the
engine's limits; frames are budgeted for the text before they are chosen."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.runner import compose_run

from apm.backbones import FramePart, Message, Request, TextPart
from apm.backbones.guard import ContextGuard
from apm.backbones.openai_api import EndpointError, OpenAIBackbone
from apm.backbones.vllm_server import VLLMServerBackbone
from apm.data.frames import Frame
from apm.runner.app import build_setup
from apm.runner.request import largest_request, prepare_instance, state_dir_of
from apm.synth import generate
from apm.testing.fake_server import FakeServer

KEY = "sk-preflight-test"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("rel") / "tiny", seed=2, scale="tiny")


@pytest.fixture(scope="module")
def endpoint():
    """A loopback server that serves only ``served-model`` and takes only ``$APM_TEST_KEY``."""
    proc = subprocess.Popen([sys.executable, "-m", "apm.testing.fake_server", "--port", "0", "--models",
                             "served-model", "--api-key-env", "APM_TEST_KEY"],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "APM_TEST_KEY": KEY})
    port = int(proc.stdout.readline().split()[1])
    yield f"http://127.0.0.1:{port}/v1"
    proc.terminate()
    proc.wait(timeout=10)


def apm_run(tiny: Path, out: Path, cache: Path, *overrides: str, key: str | None = KEY) -> tuple[int, str, str, float]:
    """``apm-run`` as a user types it; returns (exit status, stdout, stderr, seconds)."""
    env = {k: v for k, v in os.environ.items() if k not in ("APM_TEST_KEY", "HYDRA_FULL_ERROR")}
    if key is not None:
        env["APM_TEST_KEY"] = key
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "apm.cli.run", f"dataset.root={tiny}", f"output_root={out}",
         f"frames.cache_dir={cache}", "logging.progress=false", "logging.wandb.mode=offline", *overrides],
        capture_output=True, text=True, env=env | {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}, timeout=300,
    )
    return done.returncode, done.stdout, done.stderr, time.monotonic() - began


def compatible(url: str, model: str = "served-model") -> list[str]:
    return ["backbone=openai_compatible", f"backbone.base_url={url}", f"backbone.model={model}",
            "backbone.api_key_env=APM_TEST_KEY"]


def error_line(stderr: str) -> str:
    """The one line ``apm-run`` prints on an error (and that it is the only line)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("apm-run: error: "), stderr
    return lines[0]


@pytest.mark.parametrize("overrides,key,says", [
    (["backbone.model=no-such-model"], KEY, "backbone.model='no-such-model' is not a model served there"),
    ([], "sk-wrong", "check the key in $APM_TEST_KEY"),
    ([], None, "backbone.api_key_env: $APM_TEST_KEY is not set"),
    (["memory=restricted", "memory.keep_sessions=abc"], KEY, "memory.keep_sessions='abc': expected int | None"),
])
def test_a_misconfigured_run_stops_in_seconds_and_leaves_nothing(tiny, tmp_path, endpoint, overrides, key, says):
    out = tmp_path / "runs"
    code, stdout, stderr, took = apm_run(tiny, out, tmp_path / "cache", *compatible(endpoint), *overrides, key=key)
    assert code == 2 and says in error_line(stderr) and took < 30
    assert "Traceback" not in stdout + stderr
    assert not out.exists()  # no run folder, config, ledger, manifest or W&B run


def test_an_endpoint_that_is_down_stops_within_a_minute(tiny, tmp_path):
    out = tmp_path / "runs"
    code, _, stderr, took = apm_run(tiny, out, tmp_path / "cache", *compatible("http://127.0.0.1:9/v1"))
    assert code == 2 and "start the server, or set backbone.base_url" in error_line(stderr)
    assert took < 60 and not out.exists()


def test_a_good_endpoint_runs_without_a_line_per_http_request(tiny, tmp_path, endpoint):
    code, stdout, stderr, _ = apm_run(tiny, tmp_path / "runs", tmp_path / "cache", *compatible(endpoint),
                                      "dataset.tasks=[ER]")
    assert code == 0, stderr
    assert "6 new, 0 with an error" in stdout and "HTTP Request" not in stdout + stderr


def test_debug_shows_the_traceback(tiny, tmp_path, endpoint):
    code, _, stderr, _ = apm_run(tiny, tmp_path / "runs", tmp_path / "cache", "--debug", *compatible(endpoint),
                                 "backbone.model=no-such-model")
    assert code != 0 and "Traceback" in stderr and "EndpointError" in stderr


def frames(n: int) -> tuple[FramePart, ...]:
    return tuple(FramePart(Frame("DAY1/S001", float(i), 36000 + i, b"\xff\xd8jpeg")) for i in range(n))


def request_of(n_frames: int, text_chars: int) -> Request:
    return Request((Message("user", (TextPart("x" * text_chars), *frames(n_frames))),), request_id="largest")


def check(server: dict, request: Request, **client) -> str:
    """The preflight's line about ``request`` against a fake engine with ``server``'s limits."""

    async def main() -> str:
        async with FakeServer(**server) as srv:
            async with OpenAIBackbone(model="fake", base_url=srv.base_url, **client) as b:
                await b.preflight()
                with pytest.raises(EndpointError) as e:
                    await b.check_request(request)
                return str(e.value)

    return asyncio.run(main())


def test_largest_request_over_the_video_limit_names_limit_mm_per_prompt():
    line = check({"max_videos": 0}, request_of(4, 100), frame_mode="video")
    assert "the largest request (4 frames, 100 characters of text)" in line
    assert "1 video and 0 image items" in line and "raise the server's --limit-mm-per-prompt" in line


def test_largest_request_over_the_context_names_max_model_len_and_the_length_needed():
    line = check({"max_model_len": 500}, request_of(8, 400))  # 100 + 8 x 64 = 612 tokens
    assert "raise the server's --max-model-len to at least 1124" in line  # 612 + the run's 512-token answer
    assert "backbone.tokens_per_frame" in line


def test_a_launched_vllm_server_names_its_own_options():
    b = VLLMServerBackbone(model="Qwen/Qwen3-VL-8B-Instruct", served_model_name="qwen3-vl-8b-instruct")
    assert b.client.setting_names.engine("max_model_len", "backbone") == "backbone.max_model_len"
    assert b.client.setting_names.model == "served_model_name"
    running = VLLMServerBackbone(model="m", launch=False, base_url="http://127.0.0.1:9/v1")
    assert running.client.setting_names.engine("max_model_len", "backbone") == "the server's --max-model-len"


def test_largest_request_is_the_one_with_the_most_frames(tiny, tmp_path):
    setup, plan = build_setup(compose_run(tiny, tmp_path / "runs", tmp_path / "cache",
                                          ["memory=raw_video", "backbone=qwen3_vl_8b", "backbone.max_frames=64"]))
    by_id = {t.trajectory_id: t for t in plan.trajectories}
    sizes = [len(prepare_instance(setup, by_id[i.trajectory_id], i, state_dir_of(setup, by_id[i.trajectory_id]))[0]
                 .frames) for i in plan.run_instances]
    largest = largest_request(setup, plan.run_trajectories, plan.run_instances)
    assert len(largest.frames) == max(sizes) == 64


def test_qwen_presets_fit_1024_frames_and_the_longest_prompt(tiny, tmp_path):
    for preset in ("qwen3_vl_8b", "qwen3_8_27b"):
        b = compose_run(tiny, tmp_path / "runs", tmp_path / "cache", [f"backbone={preset}"]).backbone
        guard = ContextGuard(b.max_frames, b.max_context_tokens, b.tokens_per_frame)
        assert guard.frame_budget(request_of(1024, 32_000)) == 1024, preset  # 131,072 cut it to 957


def test_frames_are_chosen_for_the_context_the_text_leaves(tiny, tmp_path):
    setup, plan = build_setup(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", [
        "memory=raw_video", "backbone=qwen3_vl_8b", "backbone.max_context_tokens=6000",
        "backbone.tokens_per_frame=128"]))  # the preset's real 9 would fit every frame of the tiny release
    inst = max(plan.run_instances, key=lambda i: (i.task == "ER", i.probe_time))
    traj = next(t for t in plan.trajectories if t.trajectory_id == inst.trajectory_id)
    prepared, budget = prepare_instance(setup, traj, inst, state_dir_of(setup, traj))
    fits = setup.backbone.guard.frame_budget(prepared.request)
    assert budget is not None and budget.frames_after == len(prepared.frames) == fits < budget.frames_before
    assert setup.backbone.guard.apply(prepared.request)[1] is None  # nothing left for the guard to cut
    offsets = sorted({f.offset for f in prepared.frames if f.session == prepared.frames[0].session})
    assert offsets[-1] - offsets[0] > len(offsets)  # chosen evenly over the span, not the first N
