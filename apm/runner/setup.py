"""What one run of the online protocol is given (``RunSetup``): the release, the method, the engines and
the run's settings; everything below the replay loop (``apm.runner.online``) reads it from here."""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apm.backbones.base import Backbone, GenerationSettings
from apm.data.instances import opaque_id, release_seal
from apm.data.model import Release
from apm.memory.base import MemoryProtocol
from apm.runner.config import FrameLayout, Rerun
from apm.streaming.base import StreamingSystem
from apm.video.cache import FrameCache


@dataclass
class RunSetup:
    """Everything one run needs; built by the Hydra app or by tests."""

    release: Release
    run_dir: Path
    run_info: dict[str, Any]
    """The ``run`` block copied onto every record and memory line (docs/records.md): ``dataset``, ``memory``,
    ``backbone``, ``config_hash``, ``release_fingerprint``, ``code``, ``model``, ``choices``, ``overrides``,
    ``declarations``, ``capabilities``."""
    protocol: MemoryProtocol | StreamingSystem
    backbone: Backbone
    writer: Backbone
    cache: FrameCache
    max_frames: int
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    layout: FrameLayout = FrameLayout.uniform
    """How each request's frames are chosen and sent (``frames.layout``)."""
    concurrency: int = 8
    shard_label: str = "shard-0-of-1"
    rerun: Rerun | None = None
    """``errors``: what failed runs again; ``all``: that and whatever other code made (``RunConfig.rerun``)."""
    wait_for_lock: bool = False
    """Whether a job on a shard another job holds waits for it, instead of stopping at once."""
    fail_fast: int = 3
    """Stop after this many consecutive auth / not-found / connection failures (0: never)."""
    latency_mode: bool = False
    """Isolated latency: memory updates wait for the instance slots too, and keys whose newest record
    was measured under load run again (``apm.runner.latency``)."""
    identity: dict[str, Any] = field(default_factory=dict)
    """What ``run.code`` and ``run.model`` are digests of: ``{"code": …, "model": …}`` (``config.json`` keeps
    it, so a refusal can say what changed; ``model`` once ``apm.runner.identity.with_models`` named it)."""
    pristine: StreamingSystem | None = None
    """A streaming system's copy as configured, taken when the setup is made (before any run observed
    anything; ``None`` for a memory protocol). A setup derived with ``dataclasses.replace``
    (``latency.isolated``) keeps it, since by then the system has observed sessions and holds its
    started backbone, which cannot be copied."""

    def __post_init__(self) -> None:
        if self.pristine is None and isinstance(self.protocol, StreamingSystem):
            self.pristine = copy.deepcopy(self.protocol)

    @functools.cached_property
    def seal(self) -> str:
        """The key of the release's opaque instance ids (``apm.data.instances.release_seal``)."""
        return release_seal(self.release)

    def opaque(self, key: str) -> str:
        """The id a method (protocol, streaming system, backbone) is given for the instance ``key``."""
        return opaque_id(self.seal, key)

    def fresh_system(self) -> StreamingSystem:
        """A copy of the run's streaming system as configured, before it observed anything: what a
        restricted instance is answered by, so nothing it kept from other sessions can reach it."""
        if self.pristine is None:
            raise TypeError(f"{self.protocol.name}: a memory protocol has no system to copy")
        return copy.deepcopy(self.pristine)


def frame_budget(backbone: Backbone, default: int) -> int:
    """Frames ``backbone`` takes per request: its ``max_frames`` (0: none), or ``default`` if unset."""
    cap = backbone.max_frames
    return default if cap is None else int(cap)
