"""The typed model of the lines a run writes (docs/records.md), from which the JSON schemas in
``apm/records/schemas/`` are generated (``python -m apm.records.model`` rewrites them; a test checks the
committed files are what this model generates). The lines stay plain JSON objects on disk.

A field's Python type gives its JSON type (``X | None``: null allowed, ``Literal``: an enum); its
:func:`spec` adds the schema keywords its type cannot say. Every field is required: a line written before a
field existed has no ``format_version`` and is migrated on read (:mod:`apm.records.version`).
"""

from __future__ import annotations

import functools
import json
import sys
import types
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar, Union, cast, get_args, get_origin, get_type_hints

import msgspec
import orjson

from apm.records.declaration import Declaration
from apm.records.version import Version

DRAFT = "https://json-schema.org/draft/2020-12/schema"
SCHEMAS = Path(__file__).parent / "schemas"
HEX12, HEX64 = "^[0-9a-f]{12}$", "^[0-9a-f]{64}$"
Schema = dict[str, Any]


@dataclass(frozen=True)
class Def:
    """A named schema under ``$defs``, referred to wherever the annotated type is used."""

    name: str
    keywords: tuple[tuple[str, Any], ...] = ()


def spec(**keywords: Any) -> Any:
    """A model field: JSON-schema ``keywords`` beyond its type."""
    return field(metadata={"schema": keywords})


Time = Annotated[str, Def("time", (("pattern", "^DAY[1-9][0-9]* [0-2][0-9]:[0-5][0-9]:[0-5][0-9]$"),))]
Seconds = Annotated[float | None, Def("seconds", (("minimum", 0),))]
DeclarationRef = Annotated[Declaration | None, Def("declaration")]
Option = Literal["A", "B", "C", "D", "E"]
Task = Literal["ER", "EST", "TR", "ACR", "CT", "OCR", "STU", "ERA", "RCR", "MPA", "PRM", "TPG", "EA"]
Shard = "^shard-[0-9]+-of-[0-9]+$"


@dataclass(frozen=True)
class Choices:
    """The Hydra config-group option of each group (``None``: none chosen)."""

    closed: ClassVar[bool] = True
    dataset: str | None = spec()
    memory: str | None = spec()
    backbone: str | None = spec()
    writer: str | None = spec()
    judge: str | None = spec()


@dataclass(frozen=True)
class Capabilities:
    """The memory's Table 3 columns (``None``: undeclared)."""

    closed: ClassVar[bool] = True
    streaming: bool | None = spec()
    persistent: bool | None = spec()


@dataclass(frozen=True)
class Declarations:
    """What the method's classes declare (``None``: a class that declares nothing)."""

    closed: ClassVar[bool] = True
    memory: DeclarationRef = spec()
    backbone: DeclarationRef = spec()
    writer: DeclarationRef = spec()


@dataclass(frozen=True)
class RunBlock:
    """Who answered: display names, the config hash, the method's config identity, and the code and models
    that made the line (docs/records.md, "Identity")."""

    closed: ClassVar[bool] = True
    dataset: str = spec()
    memory: str = spec()
    backbone: str = spec()
    config_hash: str = spec(pattern=HEX12)
    release_fingerprint: str | None = spec(pattern=HEX12)
    code: str | None = spec(pattern=HEX12)
    model: str | None = spec(pattern=HEX12)
    choices: Choices | None = spec()
    overrides: dict | None = spec(propertyNames={"pattern": "^(memory|backbone|writer|frames|generation)(\\.|$)"})
    capabilities: Capabilities | None = spec()
    declarations: Declarations | None = spec()


@dataclass(frozen=True)
class FrameShown:
    """One frame the model was shown: its session, video offset (s) and wall-clock time."""

    closed: ClassVar[bool] = True
    session: str = spec()
    offset: float = spec(minimum=0)
    wall_clock: Time = spec()


@dataclass(frozen=True)
class Latency:
    """Appendix B.3's timings and how they were measured (docs/records.md, "Latency")."""

    closed: ClassVar[bool] = True
    prep_s: Seconds = spec()
    ttft_s: Seconds = spec()
    total_s: Seconds = spec()
    prefix_s: Seconds = spec()
    rtf: Seconds = spec()
    engine_ttft_s: Seconds = spec()
    engine_total_s: Seconds = spec()
    elapsed_s: Seconds = spec()
    encode_s: Seconds = spec()
    mode: Literal["isolated", "loaded"] = spec()
    in_flight: int = spec(minimum=0)
    concurrency: int = spec(minimum=1)
    prefix_caching: bool | None = spec()
    cached_tokens: int | None = spec(minimum=0)
    ttft_from: Literal["last_update", "causal_prefix"] | None = spec()
    update_s: Seconds = spec()
    observe_s: Seconds = spec()


@dataclass(frozen=True)
class Tokens:
    """Token counts as the engine counted them (``None``: unknown)."""

    closed: ClassVar[bool] = False
    prompt: int | None = spec()
    completion: int | None = spec()


@dataclass(frozen=True)
class InstanceRecord:
    """One instance's record (``records/*.jsonl``): docs/records.md, "Instance record"."""

    title: ClassVar[str] = "apm instance record (records/*.jsonl, one object per line)"
    closed: ClassVar[bool] = True
    format_version: Version = spec()
    key: str = spec(pattern="^[^/]+/[^/]+/[^/]+$")
    run: RunBlock = spec()
    trajectory_id: str = spec()
    day_id: str = spec(pattern="^DAY[1-9][0-9]*$")
    session_id: str = spec()
    candidate_id: str = spec()
    task: Task = spec()
    family: Literal["cross_session", "perception", "adaptive", "ea"] = spec()
    probe_id: str = spec()
    polarity: Literal["positive", "negative"] | None = spec()
    probe_time: Time = spec()
    window_start: Time | None = spec()
    evidence_available: bool | None = spec()
    original_candidate_id: str | None = spec()
    correct_option: Option | None = spec()
    output: str = spec()
    finish_reason: str | None = spec()
    parse_status: Literal["ok", "repaired", "failed"] | None = spec()
    parse_error: Literal["empty", "repetition", "several_options", "no_decision", "no_answer",
                         "invalid_option"] | None = spec()
    decision: Literal["SILENT", "INTERVENE"] | None = spec()
    answer: Option | None = spec()
    correct: bool | None = spec()
    gate_pass: bool | None = spec()
    frames: list[FrameShown] = spec()
    prompt_version: str = spec()
    prompt_sha256: str | None = spec(pattern=HEX64)
    prompt: list | None = spec(
        description="what was sent, by reference (docs/prompts.md, What was sent is kept): per message [role, "
                    "parts], a text part as the SHA-256 of its text in RUN_DIR/prompts/, consecutive frames as a count",
        items={"type": "array", "minItems": 2, "maxItems": 2, "prefixItems": [
            {"enum": ["system", "user", "assistant"]},
            {"type": "array", "items": {"anyOf": [
                {"type": "string", "pattern": HEX64},
                {"type": "object", "additionalProperties": False, "minProperties": 1, "maxProperties": 1,
                 "properties": {"frames": {"type": "integer", "minimum": 1},
                                "stills": {"type": "integer", "minimum": 1}}}]}}]})
    latency: Latency = spec()
    tokens: Tokens = spec()
    truncation: dict | None = spec()
    memory_bytes: int = spec(minimum=0)
    memory_sha256: str | None = spec(pattern=HEX64)
    error: str | None = spec()
    attempts: int = spec(minimum=0)
    shard: str = spec(pattern=Shard)
    written_ns: int = spec(minimum=0)
    revision: int = spec(minimum=0)


@dataclass(frozen=True)
class StateFile:
    """One file of a protocol's persistent state: its size and digest."""

    closed: ClassVar[bool] = True
    bytes: int = spec(minimum=0)
    sha256: str = spec(pattern=HEX64)


@dataclass(frozen=True)
class MemoryLine:
    """One completed session's memory line (``memory/*.jsonl``): the protocol's state size on disk."""

    title: ClassVar[str] = "apm session memory record (memory/*.jsonl, one object per completed session)"
    closed: ClassVar[bool] = False
    format_version: Version = spec()
    run: RunBlock = spec()
    trajectory_id: str = spec()
    day_id: str = spec(pattern="^DAY[1-9][0-9]*$")
    session_id: str = spec()
    session_index: int = spec(minimum=0)
    bytes: int = spec(minimum=0)
    fast_weight_bytes: int = spec(minimum=0)
    prior_hours: float = spec(exclusiveMinimum=0)
    update_s: float = spec(minimum=0)
    writer_parse_status: Literal["ok", "repaired", "failed"] | None = spec()
    error: str | None = spec()
    writer_total_s: float | None = spec(minimum=0)
    state: dict[str, StateFile] = spec()
    state_sha256: str = spec(pattern=HEX64)
    written_ns: int = spec(minimum=0)
    revision: int = spec(minimum=0)


Criterion = Literal["pass", "partial", "fail", "not_applicable"]
"""What the A.3 rubric lets a criterion check say (which criterion allows which: ``apm.judge.rubric.CRITERIA``)."""


@dataclass(frozen=True)
class JudgementLine:
    """One judgement of a judged probe (``judgements/*.jsonl``): docs/records.md, "Judgement line".
    ``inputs_sha256`` and ``content_sha256`` are null only on lines migrated from before format versions
    (a line without ``content_sha256`` does not verify, so is never used)."""

    title: ClassVar[str] = "apm judgement line (judgements/*.jsonl, one object per judgement of a probe)"
    closed: ClassVar[bool] = True
    format_version: Version = spec()
    key: str = spec(pattern="^[^/]+/[^/]+/[^/]+$")
    run: RunBlock = spec()
    judge: str = spec()
    judge_model: str = spec()
    judge_snapshot: str | None = spec()
    rubric_version: str = spec(pattern="^a3-[0-9a-f]{12}$")
    response_sha256: str = spec(pattern=HEX64)
    cache_key: str = spec(pattern=HEX64)
    inputs_sha256: str | None = spec(pattern=HEX64)
    status: Literal["ok", "failed"] = spec()
    score: int | None = spec(minimum=1, maximum=5)
    criterion_checks: dict[str, Criterion] | None = spec()
    critical_issues: list[str] | None = spec()
    justification: str | None = spec()
    error: str | None = spec()
    failure: Literal["backbone", "invalid_reply"] | None = spec()
    attempts: int = spec(minimum=1)
    judge_s: float = spec(minimum=0)
    content_sha256: str | None = spec(pattern=HEX64)
    written_ns: int = spec(minimum=0)
    revision: int = spec(minimum=0)


REFUSED = "not a valid line"
"""How a :class:`LineRefused` message begins (a check that reads a run's error tells a refused line by it)."""


class LineRefused(ValueError):
    """A line its model refuses (:func:`built`): never written. A writer's bug, or a method's report that would
    break the format (a memory line's facts overwriting a field with a value of another type)."""


Written = TypeVar("Written", "InstanceRecord", "MemoryLine", "JudgementLine")
"""A line model the writers build each line as (:func:`built`) and write from (:func:`line_of`)."""


def built(model: type[Written], line: Mapping[str, Any]) -> Written:
    """The ``model`` object of a line's fields: every field there, of its type and allowed values (nested
    blocks as their models), and none beside (the object written back is the line; an open model's
    top-level fields beyond it aside); else :class:`LineRefused` naming what is wrong (nothing is written)."""
    try:
        obj = msgspec.convert(line, model)
    except msgspec.ValidationError as e:
        raise LineRefused(f"{REFUSED}: {model.__name__}: {e}") from None
    mine = line if model.closed else {k: v for k, v in line.items() if k in field_names(model)}
    if _json(as_line(obj)) != _json(mine):
        extra = sorted(set(line) - set(field_names(model)))
        what = extra[0] if extra else "a block"
        raise LineRefused(f"{REFUSED}: {model.__name__}: {what} has a field the model does not")
    return obj


def line_of(model: type[Written], fields: Mapping[str, Any]) -> dict[str, Any]:
    """The line written for ``fields``: the ``model`` object's (:func:`built`), then, for an open model (a
    memory line), the fields beyond it as they are (what a method reports of its state)."""
    line = as_line(built(model, fields))
    return line if model.closed else {**line, **{k: v for k, v in fields.items() if k not in line}}


def _json(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def as_line(obj: InstanceRecord | MemoryLine | JudgementLine) -> dict[str, Any]:
    """A line model object as the JSON object written: its fields in model order, blocks as objects."""
    return cast(dict[str, Any], orjson.loads(msgspec.json.encode(obj)))


@functools.cache
def _hints(model: type) -> dict[str, Any]:
    """A line model's resolved field types (resolved once: ``named`` checks every fixture record's fields)."""
    return get_type_hints(model)


def values(model: type, name: str) -> tuple[Any, ...]:
    """The values a model field's ``Literal`` type allows (null left out): what a reader checks it against."""
    tp = _hints(model)[name]
    return get_args(next(t for t in (tp, *get_args(tp)) if get_origin(t) is Literal))


def field_names(model: type) -> tuple[str, ...]:
    """The names of a line model's fields, in order."""
    return tuple(f.name for f in fields(model))


def _model_in(tp: Any) -> type | None:
    """The line model a field's type holds (through ``X | None`` and ``Annotated``), else None."""
    for t in (tp, *get_args(tp)):
        if isinstance(t, type) and is_dataclass(t):
            return t
    return None


def named(model: type, *names: str) -> tuple[str, ...]:
    """``names`` as given, once each is a field of ``model`` (``outer.inner``: through its nested models);
    else ``ValueError`` naming the first that is not, so a hand-picked list of columns cannot drift from it."""
    for name in names:
        here: type | None = model
        for part in name.split("."):
            if here is None or part not in {f.name for f in fields(here)}:
                raise ValueError(f"{name}: not a field of {model.__name__} (apm.records.model)")
            here = _model_in(_hints(here)[part])
    return names


SCALARS = {str: "string", bool: "boolean", int: "integer", float: "number", dict: "object", list: "array"}
MODELS = {"record.schema.json": InstanceRecord, "memory.schema.json": MemoryLine,
          "judgement.schema.json": JudgementLine}
"""Each schema file and the model it is generated from."""


def _nullable(schema: Schema) -> Schema:
    """``schema`` or null."""
    if "enum" in schema:
        return {**schema, "enum": [*schema["enum"], None]}
    if isinstance(schema.get("type"), str):
        return {**schema, "type": [schema["type"], "null"]}
    return {"oneOf": [schema, {"type": "null"}]}


def _type_schema(tp: Any, defs: dict[str, Schema]) -> Schema:
    """The JSON schema of a model type (named parts collected into ``defs``)."""
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        inner, named = args[0], args[1]
        defs.setdefault(named.name, {**_type_schema(inner, defs), **dict(named.keywords)})
        return {"$ref": f"#/$defs/{named.name}"}
    if origin in (Union, types.UnionType):
        (inner,) = [a for a in args if a is not type(None)]
        return _nullable(_type_schema(inner, defs))
    if origin is Literal:
        return {"enum": list(args)}
    if origin is list or (origin is tuple and args[1:] == (Ellipsis,)):  # a tuple[X, ...] is written as a list
        return {"type": "array", "items": _type_schema(args[0], defs)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _type_schema(args[1], defs)}
    if isinstance(tp, type) and is_dataclass(tp):
        return _object_schema(tp, defs)
    return {"type": SCALARS[tp]}


def _field_schema(f: Field[Any], hint: Any, defs: dict[str, Schema]) -> Schema:
    return {**_type_schema(hint, defs), **f.metadata.get("schema", {})}


def _object_schema(model: type, defs: dict[str, Schema]) -> Schema:
    """A model class as a JSON object: its fields' schemas, each required; closed (no other field) unless
    the class says ``closed = False``."""
    hints = get_type_hints(model, include_extras=True)
    own = [f for f in fields(model) if f.name in hints]
    required = [f.name for f in own]
    schema: Schema = {"type": "object"}
    if getattr(model, "closed", True):
        schema["additionalProperties"] = False
    schema["required"] = required
    schema["properties"] = {f.name: _field_schema(f, hints[f.name], defs) for f in own}
    return schema


def json_schema(model: type) -> Schema:
    """The JSON schema (draft 2020-12) of a top-level line model."""
    defs: dict[str, Schema] = {}
    body = _object_schema(model, defs)
    head: Schema = {"$schema": DRAFT, "title": model.title}  # type: ignore[attr-defined]
    return {**head, **body, **({"$defs": defs} if defs else {})}


def schema_text(model: type) -> str:
    """The schema file's text: :func:`json_schema` as indented JSON."""
    return json.dumps(json_schema(model), indent=2, ensure_ascii=False) + "\n"


def write_schemas(folder: Path = SCHEMAS) -> list[Path]:
    """Write every schema file from its model; returns the paths written."""
    written = []
    for name, model in MODELS.items():
        (folder / name).write_text(schema_text(model), encoding="utf-8")
        written.append(folder / name)
    return written


if __name__ == "__main__":
    print("\n".join(map(str, write_schemas(Path(sys.argv[1]) if len(sys.argv) > 1 else SCHEMAS))))
