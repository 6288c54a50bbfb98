"""The runs ``apm-check-system`` makes of the system under check: its config resolved as ``apm-run``
would take it, composed over a tiny release, wrapped in the observer, run in this process or (to be
killed) in a child process that composes the same config (``python -m apm.check.child``)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from apm.check.observed import LOG_ENV, Event, read_log
from apm.configs import CONF_DIR
from apm.data.instances import opaque_id, release_instances, release_seal
from apm.data.release import load_release
from apm.errors import one_line
from apm.records.declaration import Declaration, run_declaration
from apm.records.jsonl import read_folder
from apm.records.rundir import RunDir, find_runs
from apm.records.select import latest_by
from apm.runner.app import run_async, run_dir_of
from apm.runner.config import ConfigError, check_arguments
from apm.streaming.base import StreamingSystem

OBSERVER = "apm.check.observed.observed"
MEMORY = "memory"
MEMORY_PREFIX = f"{MEMORY}."
"""Overrides of the system's own settings (``memory.top_k=8``, ``+memory.extra=1``, ``~memory.top_k``),
applied to its config however it is named."""
YAML_SUFFIXES = (".yaml", ".yml")
THE_CHECKLISTS = {"output_root": "the checklist's runs go under --work",
                  "dataset.root": "give the release as --release"}
"""Settings every checked run takes from the command itself: an override of one would be lost or would
move a run out of the checklist's sight, so it is refused."""


def parsed(overrides: list[str]) -> list[Override]:
    """``overrides`` as Hydra reads them (a malformed one raises Hydra's own one-line error)."""
    return OverridesParser.create().parse_overrides(list(overrides))


def _settings(overrides: list[str]) -> tuple[list[Override], list[str]]:
    """The system's own settings among ``overrides`` and the rest (for the runs, in order); an override
    naming another system (``memory=…``) or one of :data:`THE_CHECKLISTS` is refused in one line."""
    settings, rest = [], []
    for override, text in zip(parsed(overrides), overrides, strict=True):
        key = override.key_or_group
        if key == MEMORY and override.package is None:
            raise ConfigError(f"{text}: the system under check is CONFIG, the first argument "
                              f"({MEMORY_PREFIX}<key>=<value> sets its arguments)")
        if key in THE_CHECKLISTS:
            raise ConfigError(f"{text}: {THE_CHECKLISTS[key]}")
        if key.startswith(MEMORY_PREFIX) and override.package is None:
            settings.append(override)
        else:
            rest.append(text)
    return settings, rest


def memory_node(config: str, overrides: list[str]) -> dict[str, Any]:
    """The memory config ``config`` names: a YAML file (a path ending ``.yaml``), a ``_target_`` (a dotted
    name: ``my_module.MySystem``), or an option of the ``memory`` group (``conf/memory`` or a folder on
    ``hydra.searchpath`` among ``overrides``)."""
    if config.endswith(YAML_SUFFIXES) or os.sep in config:
        path = Path(config)
        if not path.is_file():
            raise ConfigError(f"{config}: no such YAML file")
        node = OmegaConf.to_container(OmegaConf.load(path))
    elif "." in config:
        node = {"_target_": config}
    else:
        with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
            node = OmegaConf.to_container(compose("config", overrides=[f"memory={config}", *overrides]).memory)
    if not isinstance(node, dict) or "_target_" not in node:
        raise ConfigError(f"{config}: a memory config names its class in _target_")
    return {str(k): v for k, v in node.items()}


@dataclass(frozen=True)
class Subject:
    """The system under check: its memory config, the settings around it (backbone, search path, any
    override), whether it streams (a ``StreamingSystem``) and what its class declares."""

    memory: dict[str, Any]
    overrides: list[str]
    streaming: bool
    declaration: Declaration | None

    @classmethod
    def of(cls, config: str, overrides: list[str]) -> Subject:
        """The subject ``config`` names, its ``memory.<key>=<value>`` overrides applied in order on top of
        its config (whichever way it is named; ``+``/``++`` add a key, ``~`` removes one), values read as
        Hydra reads them; instantiated once here (settings only, as the contract asks)."""
        settings, rest = _settings(overrides)
        where = [o for o, p in zip(rest, parsed(rest), strict=True) if p.key_or_group.startswith("hydra.")]
        node = OmegaConf.create(memory_node(config, where))  # found on the search path; the rest is the runs'
        for setting in settings:
            key = setting.key_or_group.removeprefix(MEMORY_PREFIX)
            if setting.is_delete():
                parent, _, leaf = key.rpartition(".")
                holder = OmegaConf.select(node, parent) if parent else node
                if not isinstance(holder, DictConfig) or leaf not in holder:
                    raise ConfigError(f"{setting.input_line}: the system's config has no {key} to remove")
                del holder[leaf]
            else:
                OmegaConf.update(node, key, setting.value(), force_add=True)
        memory = cast(dict[str, Any], OmegaConf.to_container(node))  # made from a dict, so a dict
        check_arguments(memory, "memory")
        system = instantiate(memory, _convert_="all")
        return cls(memory, rest, isinstance(system, StreamingSystem), run_declaration(system))


@dataclass(frozen=True)
class RunSpec:
    """One run of the subject: over ``release``, into ``out`` (frames in ``cache``), with ``extra``
    overrides; a streaming system is observed, each answer ``delay_s`` longer."""

    memory: dict[str, Any]
    overrides: list[str]
    streaming: bool
    release: str
    out: str
    cache: str
    extra: list[str] = field(default_factory=list)
    delay_s: float = 0.0

    def config(self) -> DictConfig:
        """The run's config, as ``apm-run`` composes it, its memory wrapped in the observer."""
        with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
            cfg = compose("config", overrides=[
                f"dataset.root={self.release}", f"output_root={self.out}", f"frames.cache_dir={self.cache}",
                "logging.wandb.mode=disabled", "logging.progress=false", *self.overrides, *self.extra])
        memory = self.memory
        if self.streaming:
            memory = {"_target_": OBSERVER, "system": memory, "delay_s": self.delay_s,
                      **({"name": memory["name"]} if "name" in memory else {})}
        with open_dict(cfg):
            cfg.memory = OmegaConf.create(memory)
        return cfg

    def elsewhere(self, out: Path, **changes: Any) -> RunSpec:
        return replace(self, out=str(out), **changes)


def spec_of(subject: Subject, release: Path, out: Path, cache: Path) -> RunSpec:
    return RunSpec(subject.memory, subject.overrides, subject.streaming, str(release), str(out), str(cache))


@dataclass(frozen=True)
class Outcome:
    """What a run left: its folder, its newest records and memory lines, what the observer saw, and why
    it stopped early (``None``: it ended)."""

    run_dir: Path
    records: dict[str, dict[str, Any]]
    lines: list[dict[str, Any]]
    events: list[Event]
    error: str | None

    @classmethod
    def read(cls, run_dir: Path, log: Path, error: str | None, release: str) -> Outcome:
        """``release``: the release run, whose opaque instance ids the observer logged answers by (a system
        is never told an instance's key); its events name each instance by its key again."""
        run = RunDir(run_dir)
        lines = list(latest_by(read_folder(run.memory), lambda m: (m["trajectory_id"], m["session_index"])).values())
        records = latest_by(read_folder(run.records), lambda r: r["key"])
        loaded = load_release(release, check_videos=False)
        seal = release_seal(loaded)
        keys = {opaque_id(seal, i.key): i.key for i in release_instances(loaded)}
        events = [{**e, "key": keys.get(e["key"], e["key"])} if e["event"] == "answer" else e for e in read_log(log)]
        return cls(run_dir, records, lines, events, error)


@contextmanager
def logging_to(log: Path) -> Iterator[None]:
    """The observer writes to ``log`` while the block runs (the variable is put back after)."""
    before = os.environ.get(LOG_ENV)
    os.environ[LOG_ENV] = str(log)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(LOG_ENV, None)
        else:
            os.environ[LOG_ENV] = before


def run_here(spec: RunSpec, log: Path) -> Outcome:
    """Run ``spec`` in this process, its own output held back (the command prints one line per check);
    a run that stops early is an outcome too (its error kept)."""
    cfg = spec.config()
    error = None
    held = io.StringIO()
    with logging_to(log), redirect_stdout(held), redirect_stderr(held):
        try:
            asyncio.run(run_async(cfg))
        except Exception as e:  # noqa: BLE001 — a stopped run is what a check reports
            error = one_line(e)
    return Outcome.read(run_dir_of(cfg), log, error, spec.release)


def child(spec: RunSpec, log: Path) -> subprocess.Popen[bytes]:
    """``spec`` run by ``python -m apm.check.child`` (this process's import path, so the subject's
    module is found as here; no W&B service inherited)."""
    path = Path(spec.out).with_suffix(".spec.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(spec)), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    env |= {LOG_ENV: str(log), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.Popen([sys.executable, "-m", "apm.check.child", str(path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def runs_below(out: Path) -> list[RunDir]:
    """The runs under the output root ``out`` (:func:`~apm.records.rundir.find_runs`; none before it exists)."""
    return find_runs([out]).runs if out.exists() else []


def record_lines(out: Path) -> int:
    """Lines in every records file under ``out`` (a torn last line counts)."""
    return sum(len(p.read_bytes().splitlines()) for run in runs_below(out) for p in run.files("records"))


def kill_at(proc: subprocess.Popen[bytes], out: Path, lines: int, within_s: float = 600) -> bool:
    """``SIGKILL`` ``proc`` once the records under ``out`` hold ``lines`` lines; whether it was still running."""
    deadline = time.monotonic() + within_s
    while proc.poll() is None and record_lines(out) < lines and time.monotonic() < deadline:
        time.sleep(0.01)
    killed = proc.poll() is None
    if killed:
        proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    return killed


def finish(proc: subprocess.Popen[bytes]) -> str | None:
    """Wait for a child run; why it failed (its last output line), or ``None``."""
    output, _ = proc.communicate()
    if proc.returncode == 0:
        return None
    tail = output.decode(errors="replace").strip().splitlines()
    return f"exit status {proc.returncode}: {tail[-1] if tail else 'no output'}"
