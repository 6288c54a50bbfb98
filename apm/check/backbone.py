"""The backbone ``apm-check-system``'s runs use (docs/streaming-systems.md, "The checklist"): the one the
user names (``--backbone NAME``, or ``backbone=NAME`` among the overrides, as ``apm-run`` takes it), else a
default chosen from what the system declares — the tiny random Qwen2-VL for a system that keeps its memory
inside a transformers model, the pixel perceiver for every other — printed as the command's first line."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from hydra import compose, initialize_config_dir

from apm.check.runs import parsed
from apm.configs import CONF_DIR
from apm.records.declaration import Declaration
from apm.runner.config import ConfigError

BACKBONE = "backbone"
PERCEIVER = "perceiver"
"""The default for a system that answers (and writes its memory) through the run's backbone: the
pixel-perceiver reference reads the frames and text a request shows, never the annotations, so it answers
every task of the synthetic release from what the system showed it, and writes notes as a writer."""
TINY = "tiny_qwen2vl_hf"
"""The default for a system whose memory lives inside a transformers model (:data:`INSIDE_A_MODEL`)."""
INSIDE_A_MODEL = ("kv_cache", "visual_features", "parametric")
"""The representations whose references work on the run's transformers model itself (its cache, its vision
features, its weights): a system declaring one is checked on :data:`TINY`."""
TINY_MODEL = "tiny-qwen2vl"
"""Where in the work folder the tiny model is built when the backbone config names none that exists."""
TINY_MAX_TOKENS = 8
"""``generation.max_tokens`` on :data:`TINY` unless an override sets it: its random weights write gibberish,
which a full ``max_tokens`` would only make slower (minutes instead of a minute)."""


@dataclass(frozen=True)
class Choice:
    """The runs' backbone: the overrides that select it (first among the runs' overrides), why, and where to
    build the tiny model first (``None``: nothing to build)."""

    overrides: tuple[str, ...]
    why: str
    build: Path | None = None

    @property
    def line(self) -> str:
        """The command's first line: what every run was given, and why."""
        return f"USING {' '.join(self.overrides)}: {self.why}"

    def prepare(self) -> None:
        """Build the tiny model where :attr:`build` says, unless a complete one is there: the documented
        command (``python -m apm.testing.tiny_models DIR``), in a child process (this package never imports
        its test rigs)."""
        if self.build is None or (self.build / "config.json").is_file():
            return
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        done = subprocess.run([sys.executable, "-m", "apm.testing.tiny_models", str(self.build)], env=env,
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines() or [f"exit status {done.returncode}"]
            raise RuntimeError(f"building the tiny model in {self.build} failed: {tail[-1]}")


def _model_of(overrides: list[str]) -> Path:
    """The model folder :data:`TINY`'s config names under ``overrides`` (``APM_TINY_MODEL`` or its default)."""
    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        return Path(str(compose("config", overrides=[f"{BACKBONE}={TINY}", *overrides]).backbone.model))


def choose(named: str | None, overrides: list[str], declaration: Declaration | None,
           work: Path) -> tuple[Choice, list[str]]:
    """The runs' backbone (``named``: ``--backbone``'s value) and the other run ``overrides``, in order
    (``backbone=NAME`` taken out: it is the choice). Naming two backbones is refused in one line."""
    rest, given = [], []
    for override, text in zip(parsed(overrides), overrides, strict=True):
        if override.key_or_group == BACKBONE and override.package is None and not override.is_delete():
            given.append(str(override.value()))
        else:
            rest.append(text)
    chosen = list(dict.fromkeys([*([named] if named else []), *given]))
    if len(chosen) > 1:
        raise ConfigError(f"{BACKBONE}={given[-1]}: the runs' backbone is named twice "
                          f"({', '.join(chosen)}); name it once, with --backbone or {BACKBONE}=")
    if chosen:
        how = "--backbone" if named else f"the override {BACKBONE}={chosen[0]}"
        return Choice((f"{BACKBONE}={chosen[0]}",), f"named by {how}"), rest
    representation = declaration.representation if declaration else ""
    if representation not in INSIDE_A_MODEL:
        return Choice((f"{BACKBONE}={PERCEIVER}",), "the default for a system that answers through the run's "
                      "backbone: the pixel-perceiver reference, which reads only the frames and text a request "
                      "shows (--backbone names another)"), rest
    keys = {o.key_or_group for o in parsed(rest)}
    extra, build = [], None
    if f"{BACKBONE}.model" not in keys and not (_model_of(rest) / "config.json").is_file():
        build = work / TINY_MODEL
        extra.append(f"{BACKBONE}.model={build}")
    if "generation.max_tokens" not in keys:
        extra.append(f"generation.max_tokens={TINY_MAX_TOKENS}")
    built = ", built here" if build else ""
    return Choice((f"{BACKBONE}={TINY}", *extra), f"the default for a system that declares representation "
                  f"{representation!r}, kept inside a transformers model: the tiny random Qwen2-VL{built} "
                  "(--backbone names another)", build), rest
