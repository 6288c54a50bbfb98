"""Server lifecycle of the vLLM backbone, with the loopback fake server standing in for ``vllm serve``."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from support.runner import process_gone

from apm.backbones import Message, Request, Response
from apm.backbones.openai_api import OpenAIBackbone
from apm.backbones.vllm_server import VLLMServerBackbone

FAKE = ["{python}", "-m", "apm.testing.fake_server"]
REQUEST = Request((Message.text("user", "hi"),), request_id="k")


def fake(tmp_path: Path, *args: str, **kw) -> VLLMServerBackbone:
    return VLLMServerBackbone(
        model="/models/tiny", name="Tiny VLM", python=sys.executable, command=FAKE + list(args),
        log_dir=str(tmp_path), **kw,
    )


def test_argv_carries_the_engine_settings(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    b = VLLMServerBackbone(
        model="Qwen/Qwen3-VL-8B-Instruct", served_model_name="q", tensor_parallel_size="auto", max_model_len=4096,
        limit_mm_per_prompt={"video": 1}, enable_prefix_caching=False, dtype="bfloat16", extra_args=["--x"],
    )
    assert b.argv(9) == [
        "vllm", "serve", "Qwen/Qwen3-VL-8B-Instruct", "--host", "127.0.0.1", "--port", "9", "--served-model-name",
        "q", "--tensor-parallel-size", "2", "--max-model-len", "4096", "--limit-mm-per-prompt", '{"video": 1}',
        "--no-enable-prefix-caching", "--dtype", "bfloat16", "--x",
    ]
    cpu = VLLMServerBackbone(model="m", python="/venv/bin/python")
    assert cpu.argv(9)[:5] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]
    assert cpu.client.model == "m"  # requests name the served model


def test_the_server_backbone_composes_an_openai_client_and_does_not_extend_it():
    """What is vLLM's own (command line, process, where its limits are set) is the server backbone's; the
    transport, encoding and context guard are its OpenAI-compatible client's (issue 21, item 3)."""
    b = VLLMServerBackbone(model="/models/q", served_model_name="q", max_frames=8, api_key_env="K", frame_mode="video")
    assert not isinstance(b, OpenAIBackbone) and isinstance(b.client, OpenAIBackbone)
    assert (b.client.model, b.model_id, b.max_frames, b.api_key_env) == ("q", "q", 8, "K") and b.guard is b.client.guard
    assert "--trust-request-mm-kwargs" in b.argv(9)  # the client's frame mode sets the server's flag
    said = b.advice(Response(error="HTTP 404: no such model", error_kind="not_found"), "judge")
    assert "judge.served_model_name='q' is not a model served there" in said, said


def test_launch_wait_serve_log_and_stop(tmp_path: Path):
    b = fake(tmp_path, "--ready-after", "0.5")

    async def main() -> tuple[int, str]:
        async with b:
            r = await b.generate(REQUEST)
            assert r.ok and r.text == '{"answer":"A"}'
            return b.process.proc.pid, b.base_url

    pid, url = asyncio.run(main())
    assert process_gone(pid) and b.process.proc is None
    log = (tmp_path / "vllm-server-Tiny_VLM.log").read_text()
    assert f"PORT {url.split(':')[-1].split('/')[0]}" in log


def test_server_stopped_when_the_job_raises(tmp_path: Path):
    b = fake(tmp_path)

    async def main() -> None:
        async with b:
            box.append(b.process.proc.pid)
            raise KeyError("boom")

    box: list[int] = []
    with pytest.raises(KeyError):
        asyncio.run(main())
    assert process_gone(box[0])


def test_a_server_that_dies_at_startup_is_reported_with_its_log(tmp_path: Path):
    b = VLLMServerBackbone(model="m", python=sys.executable, log_dir=str(tmp_path),
                           command=["{python}", "-c", "print('CUDA out of memory'); raise SystemExit(3)"])
    with pytest.raises(RuntimeError, match="exited with 3(.|\n)*CUDA out of memory"):
        asyncio.run(b.start())


def test_a_startup_failure_is_one_line_naming_the_log_and_its_error(tmp_path: Path):
    crash = "print('loading'); print('ValueError: max_model_len 999999 is too large'); print('bye'); exit(1)"
    b = VLLMServerBackbone(model="m", python=sys.executable, log_dir=str(tmp_path), command=["{python}", "-c", crash])
    with pytest.raises(RuntimeError) as e:
        asyncio.run(b.start())
    assert "\n" not in str(e.value) and str(b.process.log_path) in str(e.value)
    assert str(e.value).endswith("ValueError: max_model_len 999999 is too large")
    assert "bye" in "".join(e.value.__notes__)  # the log's tail, for --debug


def test_startup_deadline_and_sigkill_for_a_server_ignoring_sigterm(tmp_path: Path):
    marker = f"--marker={uuid.uuid4()}"  # ignored by the server; finds its process below
    b = fake(tmp_path, "--ready-after", "60", "--ignore-sigterm", marker, startup_timeout_s=1.0, stop_timeout_s=0.3)
    began = time.monotonic()
    with pytest.raises(RuntimeError, match="not healthy after 1s"):
        asyncio.run(b.start())
    assert time.monotonic() - began < 5 and b.process.proc is None
    assert not any(marker in cmdline for cmdline in _cmdlines())


def test_launch_false_uses_a_running_server():
    with pytest.raises(ValueError, match="base_url"):
        VLLMServerBackbone(model="m", launch=False)
    b = VLLMServerBackbone(model="m", launch=False, base_url="http://127.0.0.1:1/v1/")
    assert b.base_url == "http://127.0.0.1:1/v1" and b.process.proc is None


def _cmdlines() -> list[str]:
    out = []
    for p in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            out.append(p.read_bytes().decode(errors="replace"))
        except OSError:
            pass  # exited while we looked
    return out


HARNESS = textwrap.dedent(
    """
    import asyncio, signal, sys, time
    from apm.backbones.vllm_server import VLLMServerBackbone
    if sys.argv[1] == "chain":
        signal.signal(signal.SIGUSR2, lambda s, f: (print("previous handler ran", flush=True), sys.exit(7)))
    b = VLLMServerBackbone(model="m", python=sys.executable, log_dir=sys.argv[2],
                           command=["{python}", "-m", "apm.testing.fake_server"])
    asyncio.run(b.start())
    print("SERVER", b.process.proc.pid, flush=True)
    time.sleep(60)
    """
)


@pytest.mark.parametrize(("mode", "sig", "code"), [("chain", signal.SIGUSR2, 7), ("default", signal.SIGTERM, -15)])
def test_signals_stop_the_server_then_chain(tmp_path: Path, mode: str, sig: int, code: int):
    proc = subprocess.Popen([sys.executable, "-c", HARNESS, mode, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("SERVER"), line
        server = int(line.split()[1])
        proc.send_signal(sig)
        assert proc.wait(10) == code
        assert process_gone(server)
        if mode == "chain":
            assert "previous handler ran" in proc.stdout.read()
    finally:
        proc.kill()
