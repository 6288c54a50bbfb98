"""Method names as the paper prints them, and human-readable byte units."""

from __future__ import annotations

import math

MEMORY_NAMES = {
    "none": "SimpleStream",
    "raw_video": "Raw Video as Memory",
    "text_summary": "Text Summary as Memory",
}
"""Display names of memory protocols; any other is title-cased."""

REFERENCE = {
    "random": "baseline",
    "always_silent": "baseline",
    "always_intervene": "baseline",
    "oracle": "oracle upper bound",
    "perceiver": "pixel-perceiver reference",
}
"""Reference methods (as backbone or memory), in their row order, and the tag the tables give them."""

CEILINGS = ("perceiver",)
"""Reference backbones whose score under a protocol is that protocol's information ceiling (they read
only what the request shows): the radar figures draw them, dotted, in their protocol's panel."""

MEMORY_ORDER = ("none", "raw_video", "text_summary")
"""Memory configs in the paper's row order (Tables 3 and 4); other systems follow, then references."""

GENERAL_MEMORY = ("raw_video", "text_summary")
"""The memory protocols under which the paper evaluates general video models (video / text memory)."""

BACKBONE_ORDER = (
    "seed_2_0_lite", "gemini_3_6_flash", "qwen3_8_27b", "qwen3_vl_8b", "internvl3_5_8b", "videollama3_7b",
)
"""Backbone configs in the paper's row order within a memory protocol (Table 4); others follow."""

_CONFIG_OF = {name: config for config, name in MEMORY_NAMES.items()}
_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]


def title(name: str) -> str:
    """``always_silent`` → ``Always Silent``; a name that already has capitals is kept as is."""
    return name.replace("_", " ").title() if name == name.lower() else name


def _reference_key(name: str) -> str | None:
    """The :data:`REFERENCE` key ``name`` stands for (``Always Silent``, ``always-silent``… alike), else None."""
    key = name.split(" (")[0].lower().replace(" ", "_").replace("-", "_")
    return key if key in REFERENCE else None


def _reference(name: str) -> str | None:
    """The reference tag of ``name``, else None."""
    return REFERENCE.get(_reference_key(name) or "")


def memory_name(memory: str) -> str:
    """Display name of a memory protocol."""
    return MEMORY_NAMES.get(memory, title(memory))


def memory_config(memory: str) -> str:
    """The config name of a memory protocol given by config or display name (older records)."""
    return _CONFIG_OF.get(memory, memory)


def _with_variant(name: str, variant: str) -> str:
    return f"{name} ({variant})" if variant else name


def method_label(
    memory: str, backbone: str, memory_variant: str = "", backbone_variant: str = "", tag: str | None = None
) -> str:
    """``Raw Video as Memory · Qwen3-VL-8B-Instruct``; ``SimpleStream (recent_frames=8) · Random (baseline)``.

    Reference backbones keep their memory protocol in the label (its storage differs) and get their
    tag once: ``(baseline)`` or ``(oracle upper bound)``, from ``tag`` (:func:`reference_tag` of the
    config names) else from the display names. Settings that differ from a config group's defaults
    follow the name they belong to.
    """
    tag = tag or reference_tag(memory, backbone)
    shown = title(backbone.split(" (")[0]) if _reference(backbone) else backbone
    label = f"{_with_variant(memory_name(memory), memory_variant)} · {_with_variant(shown, backbone_variant)}"
    return f"{label} ({tag})" if tag else label


def reference_tag(memory: str, backbone: str) -> str | None:
    """A reference method's tag (``baseline``, ``oracle upper bound``), else None."""
    return _reference(backbone) or _reference(memory)


def is_reference(memory_config: str, backbone_config: str) -> bool:
    """Whether a method is a reference method (a baseline or oracle backbone, or the oracle memory)."""
    return reference_tag(memory_config, backbone_config) is not None


def method_group(memory: str, backbone: str) -> str:
    """A method's group: its memory config, or ``reference`` for reference methods."""
    return "reference" if is_reference(memory, backbone) else memory_config(memory)


def group_kind(group: str) -> str:
    """What a :func:`method_group` holds: ``reference`` methods, ``simplestream`` (memory ``none``),
    ``general`` video models (:data:`GENERAL_MEMORY`) or ``specialized`` memory systems (any other)."""
    if group == "reference":
        return "reference"
    return "simplestream" if group == "none" else "general" if group in GENERAL_MEMORY else "specialized"


def _position(order: tuple[str, ...] | list[str], name: str) -> int:
    return order.index(name) if name in order else len(order)


Rank = tuple[bool, int, str, int, str]


def method_rank(memory: str, backbone: str) -> Rank:
    """Sort key (config names, or display names of older records): SimpleStream, raw video, text
    summary, other systems (by name), then reference methods in the same memory order; within a
    protocol, backbones in the paper's order, reference backbones as listed in :data:`REFERENCE`."""
    reference = is_reference(memory, backbone)
    memory = memory_config(memory)
    if reference:
        key = _reference_key(backbone) or _reference_key(memory) or ""
        backbone_at = _position(list(REFERENCE), key)
    else:
        backbone_at = _position(BACKBONE_ORDER, backbone)
    return (reference, _position(MEMORY_ORDER, memory), memory, backbone_at, backbone)


def human_bytes(size: float, suffix: str = "") -> str:
    """``2316.01 MiB``-style binary units (two decimals); '–' for a missing value."""
    if not math.isfinite(size):
        return "–"
    exponent = 0 if size < 1024 else min(int(math.log(size, 1024)), len(_UNITS) - 1)
    return f"{size / 1024**exponent:.2f} {_UNITS[exponent]}{suffix}"
