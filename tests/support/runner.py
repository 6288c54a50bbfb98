"""End-to-end runs of ``apm-run`` for the tests: composed configs, runs, their records, what a release
under test holds (its counts), the fake engine on a thread, and checks several test modules make."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from apm.api.run import run as api_run
from apm.configs import CONF_DIR
from apm.data.frames import Frame
from apm.data.instances import opaque_id, release_instances, release_seal
from apm.data.release import load_release
from apm.memory.base import state_bytes
from apm.runner.app import run_async, run_dir_of
from apm.testing.fake_server import FakeServer
from apm.video.pixelcode import read_code


def compose_run(root: Path, out: Path, cache: Path, overrides: list[str] = ()) -> DictConfig:
    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        return compose("config", overrides=[
            f"dataset.root={root}", f"output_root={out}", f"frames.cache_dir={cache}",
            "logging.wandb.mode=disabled", "logging.progress=false", *overrides,
        ])


def run(cfg: DictConfig) -> Path:
    asyncio.run(run_async(cfg))
    return run_dir_of(cfg)


def run_as_app(root: Path, out: Path, cache: Path, overrides: list[str] = ()) -> Path:
    """Run in this process as ``apm-run`` would, through the Python API (``apm.run``), so the run records its
    config choices and the settings off their defaults (what reduce names a method by); its run dir."""
    return api_run([f"dataset.root={root}", f"output_root={out}", f"frames.cache_dir={cache}",
                    "logging.wandb.mode=disabled", "logging.progress=false", *overrides], strict=False).run_dir


def release_sessions(root: Path) -> int:
    """How many sessions the release at ``root`` holds: each is observed, and its memory measured, once."""
    return sum(len(t.sessions) for t in load_release(root, check_videos=False).trajectories)


def release_instance_count(root: Path, tasks: Collection[str] | None = None) -> int:
    """How many instances the release at ``root`` plans (of ``tasks``; default every task, EA included):
    a whole run's records."""
    return sum(tasks is None or i.task in tasks for i in release_instances(load_release(root, check_videos=False)))


GOOD_JUDGEMENT = json.dumps({
    "score": 4,
    "criterion_checks": {"task_fidelity": "pass", "historical_or_registration_grounding": "not_applicable",
                         "current_trigger_or_silence_grounding": "pass", "factual_support": "partial",
                         "usefulness": "pass"},
    "critical_issues": [],
    "justification": "Grounded in the registration.",
})
"""A valid A.3 judge reply (score 4)."""


def first_trajectory(release: Path, out: Path) -> Path:
    """A copy of ``release`` holding only its first trajectory (its sessions, candidates and videos)."""
    trajectories = json.loads((release / "trajectories.json").read_text())[:1]
    keep = trajectories[0]["trajectory_id"]
    out.mkdir(parents=True)
    (out / "trajectories.json").write_text(json.dumps(trajectories))
    for name in ("candidates.jsonl", "ea_candidates.jsonl"):
        lines = (release / name).read_text().splitlines()
        (out / name).write_text("".join(x + "\n" for x in lines if json.loads(x)["trajectory_id"] == keep))
    shutil.copytree(release / "videos" / keep, out / "videos" / keep)
    return out


def unsealed(root: Path) -> dict[str, str]:
    """Each instance of the release at ``root`` by the opaque id a method is told it is called
    (``apm.data.instances.opaque_id``): opaque id -> key."""
    release = load_release(root, check_videos=False)
    seal = release_seal(release)
    return {opaque_id(seal, i.key): i.key for i in release_instances(release)}


def pixel_second(frame: Frame) -> int | None:
    """The wall-clock second the frame's pixels show."""
    return read_code(frame.pixels())


def assert_storage_is_on_disk(run_dir: Path) -> None:
    """Each trajectory's state folder holds the bytes its last memory line measured (per-video storage and
    fast weights), and some."""
    lines = memory_records(run_dir)
    for tid in {m["trajectory_id"] for m in lines}:
        last = max((m for m in lines if m["trajectory_id"] == tid), key=lambda m: m["session_index"])
        assert state_bytes(run_dir / "memory_state" / tid) == last["bytes"] + last["fast_weight_bytes"]
        assert last["bytes"] > 0


def _live(pid: int, group: bool) -> bool:
    """Whether process ``pid`` (``group``: any process of group ``pid``) runs; a zombie does not."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, IndexError):
            continue  # it ended while we looked
        if (int(pgrp) if group else int(stat.parent.name)) == pid and state != "Z":
            return True
    return False


def process_gone(pid: int, within_s: float = 5.0, group: bool = False) -> bool:
    """Whether process ``pid`` (``group``: every process of group ``pid``) is gone within ``within_s``:
    none left, or only zombies (exited, not yet reaped by their parent)."""
    deadline = time.monotonic() + within_s
    while _live(pid, group):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for p in sorted((run_dir / "records").glob("*.jsonl")) for line in p.read_text().splitlines()
    ]


def memory_records(run_dir: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for p in sorted((run_dir / "memory").glob("*.jsonl")) for line in p.read_text().splitlines()
    ]


def console(name: str, *args: str, env: dict[str, str]) -> None:
    """Run the installed console script ``name`` (``apm-run``, ``apm-judge`` …) as a user would; it must succeed."""
    done = subprocess.run([str(Path(sys.executable).parent / name), *args], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def finished(proc: subprocess.Popen, run_root: Path) -> Path:
    """Wait for an ``apm-run`` process to succeed; the one run dir under ``run_root``."""
    assert proc.wait(timeout=300) == 0, proc.stdout.read().decode()
    (run_dir,) = [p.parent for p in run_root.rglob("records")]
    return run_dir


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
