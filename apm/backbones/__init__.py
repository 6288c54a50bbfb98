"""Model engines behind one contract (:mod:`apm.backbones.base`), chosen by Hydra ``_target_``."""

from __future__ import annotations

from typing import Any

from apm.backbones.base import (
    Backbone,
    BackboneLike,
    FramePart,
    GenerationSettings,
    Message,
    Request,
    Response,
    TextPart,
    Truncation,
)

__all__ = [
    "Backbone",
    "BackboneLike",
    "FramePart",
    "GenerationSettings",
    "Message",
    "Request",
    "Response",
    "TextPart",
    "Truncation",
    "instantiate_backbone",
]


def instantiate_backbone(cfg: Any, **overrides: Any) -> BackboneLike:
    """Build the backbone a config's ``_target_`` names and check it honours the contract."""
    from hydra.utils import instantiate

    backbone = instantiate(cfg, **overrides)
    if not isinstance(backbone, BackboneLike):
        raise TypeError(f"{type(backbone).__name__} is not a backbone (needs name/start/close/generate)")
    return backbone
