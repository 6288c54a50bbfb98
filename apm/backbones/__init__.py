"""Model engines behind one contract (:mod:`apm.backbones.base`), chosen by Hydra ``_target_``."""

from __future__ import annotations

from typing import Any

from apm.backbones.base import (
    Backbone,
    BackboneLike,
    Bare,
    FramePart,
    GenerationSettings,
    Message,
    Request,
    Response,
    TextPart,
    Truncation,
    as_backbone,
)

__all__ = [
    "Backbone",
    "BackboneLike",
    "Bare",
    "FramePart",
    "GenerationSettings",
    "Message",
    "Request",
    "Response",
    "TextPart",
    "Truncation",
    "as_backbone",
    "instantiate_backbone",
]


def instantiate_backbone(cfg: Any, **overrides: Any) -> Backbone:
    """Build the backbone a config's ``_target_`` names, check it has the required members, and give it
    the whole contract (:func:`~apm.backbones.base.as_backbone`)."""
    from hydra.utils import instantiate

    backbone = instantiate(cfg, **overrides)
    if not isinstance(backbone, BackboneLike):
        raise TypeError(f"{type(backbone).__name__} is not a backbone (needs name/start/close/generate)")
    return as_backbone(backbone)
