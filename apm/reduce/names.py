"""Method labels and row order, from what each method's classes declare (``family``, ``tag``;
:mod:`apm.records.declaration`) and every setting of its config that differs from the defaults;
and human-readable byte units. No list of config names decides a group or a tag
(docs/scores.md, "Groups and labels")."""

from __future__ import annotations

import math
from typing import Any

from apm.records.declaration import REPRESENTATIONS

MEMORY_NAMES = {
    "none": "SimpleStream",
    "raw_video": "Raw Video as Memory",
    "text_summary": "Text Summary as Memory",
}
"""Display names of the paper's memory protocols for records that carry only a config name."""

FAMILY_ORDER = ("baseline", "general", "specialised", "", "reference")
"""Row blocks in order: the no-memory baseline (SimpleStream, Table 4's "w/o Memory"), general
video models, specialised systems, undeclared methods, then reference rows (baselines, oracles,
the perceiver)."""

BACKBONE_ORDER = (
    "seed_2_0_lite", "gemini_3_6_flash", "qwen3_8_27b", "qwen3_vl_8b", "internvl3_5_8b", "videollama3_7b",
)
"""The paper's row order of its backbones within a protocol (Table 4): presentation only; any other
backbone follows, by name. It groups and tags nothing."""

OTHER_SYSTEMS = "Other Memory Systems"
"""Table heading of the specialised systems that declare no representation: after the paper's five."""
_REPRESENTATION_HEADINGS: dict[str, str] = {str(name): shown for name, shown in REPRESENTATIONS.items()}
FAMILY_HEADINGS = {"baseline": "w/o Memory", "": "Undeclared", "reference": "References"}
"""Table headings of the blocks of the non-specialised families (a general model's: its protocol's name)."""

SIMPLESTREAM_BACKBONE = "qwen3_vl_8b"
"""The paper's SimpleStream backbone (Section 4.1: Qwen3-VL-8B-Instruct, four recent frames): of several
SimpleStream methods, the figures and Table 12 show the one on it with default settings."""

_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]


def title(name: str) -> str:
    """``always_silent`` → ``Always Silent``; a name that already has capitals is kept as is."""
    return name.replace("_", " ").title() if name == name.lower() else name


def memory_name(memory: str) -> str:
    """Display name of a memory protocol."""
    return MEMORY_NAMES.get(memory, title(memory))


def _with_variant(name: str, variant: str) -> str:
    return f"{name} ({variant})" if variant else name


def method_label(
    memory: str, backbone: str, memory_variant: str = "", backbone_variant: str = "", tag: str = "",
    settings: str = "",
) -> str:
    """``Raw Video as Memory · Qwen3-VL-8B-Instruct``; ``SimpleStream (recent_frames=8) · Random (baseline)``;
    ``Text Summary as Memory (writer=perceiver) · Tiny`` ; ``… · Qwen3-VL-8B-Instruct [frames.layout=session_stable]``.

    Settings off a config group's defaults follow the name they belong to (the writer's, the
    memory's); the run's ``frames``/``generation`` settings close the label in brackets; a tag
    (a reference's role) is given once: a tagged backbone's own parenthetical gives way to it.
    """
    shown = title(backbone.split(" (")[0] if backbone.endswith(")") else backbone) if tag else backbone
    label = f"{_with_variant(memory_name(memory), memory_variant)} · {_with_variant(shown, backbone_variant)}"
    label = f"{label} ({tag})" if tag else label
    return f"{label} [{settings}]" if settings else label


def row_label(r: Any) -> str:
    """:func:`method_label` of a method row (``scores.csv`` / :func:`apm.reduce.scores.method_info` columns)."""
    return method_label(str(r.memory), str(r.backbone), str(r.memory_variant), str(r.backbone_variant),
                        str(r.tag), str(r.settings))


def is_reference(family: str) -> bool:
    """Whether a method's family makes it a reference row (a baseline or reference backbone, or a
    reference memory such as the oracle evidence)."""
    return family == "reference"


def _position(order: tuple[str, ...], name: str) -> int:
    return order.index(name) if name in order else len(order)


Rank = tuple[int, int, str, int, str, str]


def method_rank(
    family: str, memory: str, backbone_config: str, tag: str = "", backbone: str = "", representation: str = "",
) -> Rank:
    """Sort key: the family's block (:data:`FAMILY_ORDER`), within the specialised one the representation
    in the paper's order (:data:`~apm.records.declaration.REPRESENTATIONS`, none last), then the
    protocol's display name, then the backbones in the paper's order (:data:`BACKBONE_ORDER`) and by
    tag and name."""
    kind = _position(tuple(REPRESENTATIONS), representation) if family == "specialised" else 0
    return (_position(FAMILY_ORDER, family), kind, memory_name(memory), _position(BACKBONE_ORDER, backbone_config),
            tag, backbone)


def _representation(r: Any) -> str:
    """A method row's declared representation ('' for a ``scores.csv`` from before it was a column)."""
    return str(getattr(r, "representation", ""))


def row_rank(r: Any) -> Rank:
    """:func:`method_rank` of a method row."""
    return method_rank(str(r.method_family), str(r.memory), str(r.backbone_config), str(r.tag), str(r.backbone),
                       _representation(r))


def heading(family: str, memory: str, representation: str = "") -> str:
    """The heading a table prints above a method's block (as the paper's Tables 3 and 4 do): a
    specialised system's representation (:data:`OTHER_SYSTEMS` for none), a general model's protocol,
    else its family's (:data:`FAMILY_HEADINGS`)."""
    if family == "specialised":
        return _REPRESENTATION_HEADINGS.get(representation, OTHER_SYSTEMS)
    if family == "general":
        return memory_name(memory)
    return FAMILY_HEADINGS.get(family, FAMILY_HEADINGS[""])


def row_heading(r: Any) -> str:
    """:func:`heading` of a method row."""
    return heading(str(r.method_family), str(r.memory), _representation(r))


def human_bytes(size: float, suffix: str = "") -> str:
    """``2316.01 MiB``-style binary units (two decimals); '–' for a missing value."""
    if not math.isfinite(size):
        return "–"
    exponent = 0 if size < 1024 else min(int(math.log(size, 1024)), len(_UNITS) - 1)
    return f"{size / 1024**exponent:.2f} {_UNITS[exponent]}{suffix}"
