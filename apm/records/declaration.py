"""What a method is, as its classes declare it: the family a memory protocol, streaming system or
backbone belongs to, whether it takes streaming input and keeps persistent state, and the tag the
tables print after a reference. Records carry the declarations (``run.declarations``) and reduce
groups, tags and orders by them (docs/scores.md, "Groups and labels")."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, cast, get_args

Family = Literal["baseline", "general", "specialised", "reference"]
"""``baseline``: a no-memory protocol (SimpleStream) or a model-free backbone (Random…);
``general``: a protocol for general video models, or such a model; ``specialised``: a streaming
memory system; ``reference``: a control that is no method (an oracle, the pixel perceiver)."""
FAMILIES: tuple[Family, ...] = get_args(Family)

Representation = Literal["", "kv_cache", "visual_features", "event_tree", "parametric", "reasoning_thoughts"]
"""What a streaming system keeps, as Table 3 groups the specialised systems ('' for a method that is
not one of them)."""
REPRESENTATIONS: dict[Representation, str] = {
    "kv_cache": "KV Cache", "visual_features": "Visual Tokens / Features", "event_tree": "Event Tree",
    "parametric": "Parametric Memory", "reasoning_thoughts": "Reasoning Thoughts"}
"""Each representation and the heading Table 3 prints above its systems, in the paper's order."""

Deviation = Literal["answers_write_state", "unseeded_sampling", "no_restorable_export", "prefix_recompute"]
"""A way an official system's loop departs from the online protocol (docs/boundary.md, "Deviations"):
answering writes its state; it samples without the seed it is handed; its export cannot be restored
(a resume or restricted instance cannot rebuild the state from it); it recomputes over the causal prefix
per question instead of keeping state incrementally."""
DEVIATIONS: tuple[Deviation, ...] = get_args(Deviation)


@dataclass(frozen=True)
class Declaration:
    """A class's declaration: its family, Table 3's Streaming and Persistent (``None``: not its to
    say, as for a backbone), and the tag a table prints after its rows ('' for none)."""

    family: Family
    streaming: bool | None = None
    persistent: bool | None = None
    tag: str = ""
    ceiling: bool = False
    """A reference backbone whose score under a protocol is that protocol's information ceiling (the
    figures draw it dotted beside the protocol's methods); its tag names any task where it is not."""
    representation: Representation = ""
    """A streaming system's memory representation (``REPRESENTATIONS``), by which Table 3 groups it."""
    deviations: tuple[Deviation, ...] = ()
    """Where a system's official loop departs from the online protocol (``DEVIATIONS``), as it declares."""

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"family {self.family!r}: expected one of {', '.join(FAMILIES)}")
        unknown = [d for d in self.deviations if d not in DEVIATIONS]
        if unknown:
            raise ValueError(f"deviations {unknown}: expected some of {', '.join(DEVIATIONS)}")
        if self.representation and self.representation not in REPRESENTATIONS:
            raise ValueError(f"representation {self.representation!r}: expected one of {', '.join(REPRESENTATIONS)}")

    def as_record(self) -> dict[str, Any]:
        return {**asdict(self), "deviations": list(self.deviations)}


def declared(obj: object) -> Declaration | None:
    """The declaration of ``obj``'s class (its ``declaration`` attribute), else None (undeclared)."""
    found = getattr(obj, "declaration", None)
    return found if isinstance(found, Declaration) else None


def from_record(block: Any) -> Declaration | None:
    """A declaration as a record holds it, else None (absent, from before declarations, or malformed)."""
    if not isinstance(block, dict) or block.get("family") not in FAMILIES:
        return None
    flags = {k: block.get(k) if isinstance(block.get(k), bool) else None for k in ("streaming", "persistent")}
    tag = block.get("tag")
    representation = block.get("representation")
    deviations = block.get("deviations")
    return Declaration(cast(Family, block["family"]), **flags, tag=tag if isinstance(tag, str) else "",
                       ceiling=block.get("ceiling") is True,
                       representation=representation if representation in REPRESENTATIONS else "",
                       deviations=tuple(d for d in deviations if d in DEVIATIONS)
                       if isinstance(deviations, list) else ())


NOT_SEALED = "not sealed"
"""The tag of a method part whose code ran unsealed: a plug-in in process, or a child process without a seal
(docs/boundary.md): nothing kept it from the release's annotations."""


@dataclass(frozen=True)
class MethodKind:
    """Where a method (memory × backbone) stands in the tables: its family, its tag, and whether it
    is an information ceiling (its backbone declares one)."""

    family: Family | Literal[""]
    """``''`` when its memory is undeclared (and its backbone is no reference)."""
    tag: str
    ceiling: bool = False


def method_kind(memory: Declaration | None, backbone: Declaration | None) -> MethodKind:
    """A baseline or reference backbone makes the method a reference, tagged as the backbone says
    (or by its family); otherwise the method is what its memory declares (a reference memory, the
    oracle evidence, tagged likewise). Either part's :data:`NOT_SEALED` mark is kept in the tag."""
    if backbone is not None and backbone.family in ("baseline", "reference"):
        kind = MethodKind("reference", backbone.tag or backbone.family, backbone.ceiling)
    elif memory is None:
        kind = MethodKind("", "")
    elif memory.family == "reference":
        kind = MethodKind("reference", memory.tag or memory.family)
    else:
        kind = MethodKind(memory.family, memory.tag)
    unsealed = any(d is not None and NOT_SEALED in d.tag.split(", ") for d in (memory, backbone))
    if unsealed and NOT_SEALED not in kind.tag.split(", "):
        kind = replace(kind, tag=", ".join(t for t in (kind.tag, NOT_SEALED) if t))
    return kind

def _packaged(obj: object) -> bool:
    """Whether ``obj``'s code (a class, or an object's class) is this package's own (looking through
    wrappers' ``__wrapped__``)."""
    while hasattr(obj, "__wrapped__"):
        obj = obj.__wrapped__
    return (obj if isinstance(obj, type) else type(obj)).__module__.partition(".")[0] == "apm"


def run_declaration(obj: object) -> Declaration | None:
    """What the run records of a part: its declaration, tagged :data:`NOT_SEALED` when its code comes from
    outside this package and runs in process (a child process behind the boundary tags itself)."""
    found = declared(obj)
    if found is None or _packaged(obj):
        return found
    return replace(found, tag=", ".join(t for t in (found.tag, NOT_SEALED) if t))


def run_declarations(memory: object, backbone: object, writer: object | None) -> dict[str, Any]:
    """The run block's ``declarations`` (each part's :func:`run_declaration`, ``None`` when undeclared; the
    writer's ``None`` too when the config names none) and ``capabilities`` (what the memory declares for Table 3)."""
    parts = {"memory": memory, "backbone": backbone, "writer": writer}
    found = {part: run_declaration(obj) if obj is not None else None for part, obj in parts.items()}
    mine = found["memory"]
    capabilities = {name: getattr(mine, name) if mine else None for name in ("streaming", "persistent")}
    return {"declarations": {part: d.as_record() if d else None for part, d in found.items()},
            "capabilities": capabilities}
