"""Shared pieces for end-to-end tests of ``apm-run``: a tiny synthetic release, composed configs,
and a probe backbone that records what each instance was shown."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from apm.backbones.base import Request
from apm.backbones.baselines import Oracle
from apm.configs import CONF_DIR
from apm.data.instances import Instance
from apm.runner.app import run_async, run_dir_of
from apm.testing.fake_server import FakeServer


def compose_run(root: Path, out: Path, cache: Path, overrides: list[str] = ()) -> DictConfig:
    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        return compose("config", overrides=[
            f"dataset.root={root}", f"output_root={out}", f"frames.cache_dir={cache}",
            "logging.wandb.mode=disabled", "logging.progress=false", *overrides,
        ])


def run(cfg: DictConfig) -> Path:
    asyncio.run(run_async(cfg))
    return run_dir_of(cfg)


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for p in sorted((run_dir / "records").glob("*.jsonl")) for line in p.read_text().splitlines()
    ]


def memory_records(run_dir: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for p in sorted((run_dir / "memory").glob("*.jsonl")) for line in p.read_text().splitlines()
    ]


def record_lines(run_root: Path) -> int:
    """Lines in every records file under ``run_root`` (a torn last line counts)."""
    return sum(len(p.read_bytes().splitlines()) for p in run_root.rglob("records/*.jsonl"))


def finished(proc: subprocess.Popen, run_root: Path) -> Path:
    """Wait for an ``apm-run`` process to succeed; the one run dir under ``run_root``."""
    assert proc.wait(timeout=300) == 0, proc.stdout.read().decode()
    (run_dir,) = [p.parent for p in run_root.rglob("records")]
    return run_dir


def kill_after(proc: subprocess.Popen, run_root: Path, lines: int, within_s: float = 120) -> bool:
    """SIGKILL ``proc`` once the records under ``run_root`` hold ``lines`` lines (or ``within_s`` passed);
    whether it was still running, so that it was killed."""
    deadline = time.time() + within_s
    while proc.poll() is None and record_lines(run_root) < lines and time.time() < deadline:
        time.sleep(0.01)
    killed = proc.poll() is None
    if killed:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    return killed


@dataclass(frozen=True)
class SeenRequest(Request):
    """A request as a spy keeps it, beside the instance it asked about (``None``: a summary writer's)."""

    instance: Instance | None = None


class ShownFrames(Oracle):
    """The oracle baseline that also keeps every request it was sent (to inspect the pixels shown), with
    the instance its reference channel was handed (the request itself carries none)."""

    seen: dict[str, Any] = {}

    def __init__(self, name: str = "Shown Frames Probe", max_frames: int | None = None):
        super().__init__(name=name, max_frames=max_frames)

    async def answer_instance(self, request, instance):
        ShownFrames.seen[request.request_id] = SeenRequest(**vars(request), instance=instance)
        return await super().answer_instance(request, instance)

    async def generate(self, request):
        ShownFrames.seen[request.request_id] = SeenRequest(**vars(request))
        return await super().generate(request)


@contextmanager
def served(**settings: Any) -> Iterator[FakeServer]:
    """A loopback fake engine on its own thread and event loop, so a run's ``asyncio.run`` can use it."""
    loop = asyncio.new_event_loop()
    server = FakeServer(**settings)
    threading.Thread(target=loop.run_forever, daemon=True).start()
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
