"""Method names as the paper prints them, and human-readable byte units."""

from __future__ import annotations

import math

from apm.reduce.units import EA_ORIGINAL_MEMORY

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


def table_memory(memory: str, task: str) -> str:
    """The memory a score is tabulated under: EA results sit in the row of their main protocol."""
    return EA_ORIGINAL_MEMORY.get(memory, memory) if task == "EA" else memory


def method_label(memory: str, backbone: str) -> str:
    """``Raw Video as Memory · Qwen3-VL-8B-Instruct``; ``SimpleStream · Random (baseline)``.

    Reference backbones keep their memory protocol in the label (its storage differs) and get their
    tag once: ``(baseline)`` or ``(oracle upper bound)``.
    """
    tag = _reference(backbone) or _reference(memory)
    shown = title(backbone.split(" (")[0]) if _reference(backbone) else backbone
    label = f"{memory_name(memory)} · {shown}"
    return f"{label} ({tag})" if tag else label


def method_group(memory: str, backbone: str) -> str:
    """The panel a method is drawn in: its memory protocol, or ``reference`` for reference methods."""
    return "reference" if _reference(backbone) or _reference(memory) else memory


def group_name(group: str) -> str:
    """Display name of a method group."""
    return "Reference methods" if group == "reference" else memory_name(group)


def method_rank(memory: str, backbone: str) -> tuple[int, str, str]:
    """Sort key: SimpleStream, raw video, text summary, other systems, then reference methods."""
    group = method_group(memory, backbone)
    shown = memory_name(memory)
    known = _MEMORY_ORDER.index(shown) if shown in _MEMORY_ORDER else len(_MEMORY_ORDER)
    return (len(_MEMORY_ORDER) + 1 if group == "reference" else known, memory, backbone)


def human_bytes(size: float, suffix: str = "") -> str:
    """``2316.01 MiB``-style binary units (two decimals); '–' for a missing value."""
    if not math.isfinite(size):
        return "–"
    exponent = 0 if size < 1024 else min(int(math.log(size, 1024)), len(_UNITS) - 1)
    return f"{size / 1024**exponent:.2f} {_UNITS[exponent]}{suffix}"
