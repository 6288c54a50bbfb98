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
}
"""Reference methods (as backbone or memory) and the tag the tables give them."""

MEMORY_ORDER = ("none", "raw_video", "text_summary")
"""Memory configs in the paper's row order (Tables 3 and 4); other systems follow, then references."""

BACKBONE_ORDER = (
    "seed_2_0_lite", "gemini_3_6_flash", "qwen3_8_27b", "qwen3_vl_8b", "internvl3_5_8b", "videollama3_7b",
)
"""Backbone configs in the paper's row order within a memory protocol (Table 4); others follow."""

_MEMORY_ORDER = list(MEMORY_NAMES.values())
_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]


def title(name: str) -> str:
    """``always_silent`` → ``Always Silent``; a name that already has capitals is kept as is."""
    return name.replace("_", " ").title() if name == name.lower() else name


def _reference(name: str) -> str | None:
    """The reference tag of ``name`` (``Always Silent``, ``always-silent``… alike), else None."""
    return REFERENCE.get(name.split(" (")[0].lower().replace(" ", "_").replace("-", "_"))


def memory_name(memory: str) -> str:
    """Display name of a memory protocol."""
    return MEMORY_NAMES.get(memory, title(memory))


def _with_variant(name: str, variant: str) -> str:
    return f"{name} ({variant})" if variant else name


def method_label(memory: str, backbone: str, memory_variant: str = "", backbone_variant: str = "") -> str:
    """``Raw Video as Memory · Qwen3-VL-8B-Instruct``; ``SimpleStream (recent_frames=8) · Random (baseline)``.

    Reference backbones keep their memory protocol in the label (its storage differs) and get their
    tag once: ``(baseline)`` or ``(oracle upper bound)``. Settings that differ from a config
    group's defaults follow the name they belong to.
    """
    tag = _reference(backbone) or _reference(memory)
    shown = title(backbone.split(" (")[0]) if _reference(backbone) else backbone
    label = f"{_with_variant(memory_name(memory), memory_variant)} · {_with_variant(shown, backbone_variant)}"
    return f"{label} ({tag})" if tag else label


def is_reference(memory_config: str, backbone_config: str) -> bool:
    """Whether a method is a reference method (a baseline or oracle backbone, or the oracle memory)."""
    return bool(_reference(backbone_config) or _reference(memory_config))


def method_group(memory: str, backbone: str) -> str:
    """The panel a method is drawn in: its memory protocol, or ``reference`` for reference methods."""
    return "reference" if is_reference(memory, backbone) else memory


def group_name(group: str) -> str:
    """Display name of a method group."""
    return "Reference methods" if group == "reference" else memory_name(group)


def _position(order: tuple[str, ...] | list[str], name: str) -> int:
    return order.index(name) if name in order else len(order)


def method_rank(memory: str, backbone: str) -> tuple[int, int, str, str]:
    """Sort key (config names, or display names of older records): SimpleStream, raw video, text
    summary, other systems, then reference methods; within a protocol, backbones in the paper's order."""
    if is_reference(memory, backbone):
        first = len(MEMORY_ORDER) + 1
    else:
        first = min(_position(MEMORY_ORDER, memory), _position(_MEMORY_ORDER, memory_name(memory)))
    return (first, _position(BACKBONE_ORDER, backbone), memory, backbone)


def human_bytes(size: float, suffix: str = "") -> str:
    """``2316.01 MiB``-style binary units (two decimals); '–' for a missing value."""
    if not math.isfinite(size):
        return "–"
    exponent = 0 if size < 1024 else min(int(math.log(size, 1024)), len(_UNITS) - 1)
    return f"{size / 1024**exponent:.2f} {_UNITS[exponent]}{suffix}"
