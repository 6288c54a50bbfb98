"""Read a run's JSONL lines (records, memory lines, judgements) so that no line can crash a reader.

A line is used only if it is a JSON object with the fields its kind needs, of the right types and
in range (a judge score is an integer 1–5, a task is one of the benchmark's, …). Any other line — a
torn tail left by a crash, ``null``, a non-UTF-8 byte, an object without ``key``, a field of the
wrong type — is skipped and reported as ``file:line: reason``, never raised. Unknown fields are
kept: older and newer lines stay readable.

Two readers apply the same checks: :func:`read_lines` yields each line as a dict, and
:func:`read_typed` (the reducer's) decodes each line straight into a ``msgspec`` struct compiled
from the same checks (:func:`typed_line`), decodes and checks a file's ``run`` block once per
distinct block, and asks the checks themselves only why a line it could not use is unusable, so
both skip exactly the same lines with the same reasons.
"""

from __future__ import annotations

import functools
import math
import operator
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, cast

import msgspec
import orjson

from apm.records.model import InstanceRecord, JudgementLine, Latency, field_names, values
from apm.records.rundir import not_regular
from apm.records.version import FIELD, FormatError, Version, is_current, migrate, migrate_run, refusal, typed_defaults

Kind = Literal["records", "memory", "judgements", "any"]
Line = dict[str, Any]
Check = Callable[[Line], "str | None"]


@dataclass(frozen=True)
class Skipped:
    """A line a reader left out, and why."""

    path: Path
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


LARGEST = 2**64 - 1
"""The largest integer a line holds as an integer: orjson reads a larger one as a float (and msgspec bounds
only int64), so a typed count is checked against it after decoding (:attr:`FieldCheck.decoded`)."""
Count = Annotated[int, msgspec.Meta(ge=0)]
NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]


@dataclass(frozen=True)
class FieldCheck:
    """A check that field ``name`` is ``what`` (absent or null allowed when ``optional``), and ``typed``,
    the msgspec type that accepts exactly the values ``ok`` accepts (JSON has no infinity or NaN), but
    those ``decoded`` (when given) refuses once decoded."""

    name: str
    ok: Callable[[Any], bool]
    what: str
    typed: Any
    optional: bool = True
    decoded: Callable[[Any], bool] | None = None

    def __call__(self, line: Line) -> str | None:
        value = line.get(self.name)
        if value is None:
            return None if self.optional else f"{self.name}: missing"
        return None if self.ok(value) else f"{self.name}: not {self.what} ({str(value)[:40]!r})"

    def struct_field(self) -> tuple[Any, ...]:
        """The field of a :func:`typed_line` struct: required unless optional (then null by default)."""
        return (self.name, self.typed | None, None) if self.optional else (self.name, self.typed)


def _field(name: str, ok: Callable[[Any], bool], what: str, typed: Any, optional: bool = True) -> FieldCheck:
    decoded = (lambda v: v is None or v <= LARGEST) if typed is Count else None
    return FieldCheck(name, ok, what, typed, optional, decoded)


def _one_of(name: str, allowed: tuple[Any, ...], optional: bool = True) -> FieldCheck:
    typed = bool if set(allowed) == {True, False} else cast(Any, Literal)[allowed]
    return _field(name, lambda v: isinstance(v, str | bool) and v in allowed, f"one of {allowed}", typed, optional)


def _text(name: str, optional: bool = True) -> FieldCheck:
    return _field(name, lambda v: isinstance(v, str) and (optional or v != ""), "a string",
                  str if optional else NonEmpty, optional)


def _run(line: Line) -> str | None:
    """The ``run`` block names the method: its names are strings, its config parts objects, and the release
    it ran on, where it names one, a string (a retyped one would be a table's key)."""
    run = line.get("run")
    if not isinstance(run, dict):
        return "run: missing (no method to count it under)"
    names = ("dataset", "memory", "backbone", "config_hash")
    parts = ("choices", "overrides", "capabilities", "declarations")
    bad = [k for k in names if not isinstance(run.get(k), str) or not run[k]]
    release = run.get("release_fingerprint")
    bad += ["release_fingerprint"] if release is not None and (not isinstance(release, str) or not release) else []
    bad += [k for k in parts if run.get(k) is not None and not isinstance(run[k], dict)]
    choices = run["choices"] if isinstance(run.get("choices"), dict) else {}
    bad += [f"choices.{k}" for k, v in choices.items() if v is not None and not isinstance(v, str)]
    return f"run.{bad[0]}: missing or of the wrong type" if bad else None


def _latency(line: Line) -> str | None:
    latency = line.get("latency")
    if latency is None:
        return None
    if not isinstance(latency, dict):
        return "latency: not an object"
    bad = [k for k in _TIMINGS if latency.get(k) is not None and not _is_number(latency[k])]
    return f"latency.{bad[0]}: not a finite number" if bad else None


def _judge_score(line: Line) -> str | None:
    score, status = line.get("score"), line.get("status")
    if status == "ok" and not (isinstance(score, int) and not isinstance(score, bool) and 1 <= score <= 5):
        return f"score: not an integer 1–5 ({str(score)[:20]!r})"
    return None if status == "ok" or score is None else "score: set on a failed judgement"


_BOOLEAN = (True, False)
_VERSION = _field(FIELD, is_current, "a format version this apm reads", Version)
_STAMP = _field("written_ns", _is_count, "a non-negative integer", Count)
_REVISION = _field("revision", _is_count, "a non-negative integer", Count)

CHECKS: dict[Kind, tuple[Check, ...]] = {
    "records": (
        _VERSION, _text("key", optional=False), _run, _one_of("task", values(InstanceRecord, "task"), optional=False),
        _text("trajectory_id", optional=False), _text("candidate_id", optional=False), _text("family"),
        *(_one_of(name, values(InstanceRecord, name)) for name in ("polarity", "parse_status", "decision")),
        _text("answer"), _text("output"), _text("error"),
        _one_of("correct", _BOOLEAN), _one_of("gate_pass", _BOOLEAN), _one_of("evidence_available", _BOOLEAN),
        _text("original_candidate_id"), _latency, _STAMP, _REVISION,
    ),
    "judgements": (
        _VERSION, _text("key", optional=False), _run, _text("judge", optional=False),
        _one_of("status", values(JudgementLine, "status"), optional=False), _judge_score, _text("response_sha256"),
        _text("rubric_version"), _text("judge_model"), _text("failure"), _STAMP, _REVISION,
    ),
    "memory": (
        _VERSION, _run, _text("trajectory_id", optional=False), _text("day_id", optional=False),
        _text("session_id", optional=False), _field("session_index", _is_count, "an index", Count, False),
        _field("bytes", _is_count, "a byte count", Count, False),
        _field("prior_hours", lambda v: _is_number(v) and v >= 0, "hours ≥ 0", Annotated[float, msgspec.Meta(ge=0)],
               False), _text("error"), _STAMP,
        _REVISION,
    ),
    "any": (),
}
"""What each kind of line must satisfy to be read, once :func:`current` (docs/records.md, "Reading lines")."""


def current(value: Any, kind: Kind, where: str) -> Any:
    """A decoded line (at ``where``: ``file:line``) in the current format: migrated when it has no
    ``format_version`` (:func:`apm.records.version.migrate`); a line of a later version raises
    :class:`~apm.records.version.FormatError`, naming ``where`` (no reader may mistake its fields)."""
    if not isinstance(value, dict):
        return value
    reason = refusal(value.get(FIELD), where)
    if reason is not None:
        raise FormatError(reason)
    return migrate(value, kind)


def problem(line: Any, kind: Kind) -> str | None:
    """Why ``line`` (a decoded JSON value) cannot be read as a ``kind`` line, or None if it can."""
    if not isinstance(line, dict):
        return f"not a JSON object ({type(line).__name__})"
    return next((reason for check in CHECKS[kind] if (reason := check(line))), None)


def read_lines(path: Path, kind: Kind, skipped: list[Skipped] | None = None, as_written: bool = False,
               ) -> Iterator[Line]:
    """The usable lines of one JSONL file, read one at a time (a file is never held whole); each other
    line is appended to ``skipped`` (if given).

    An unterminated last line is a write in progress or a crash mid-write: skipped like the rest. Each line
    is read in the current format (:func:`current`: a line of a later format version is refused), or with
    ``as_written`` as it is (still refused for a later version): what a judgement's content digest covers.
    """
    for number, raw in _streamed(path, skipped):
        if raw is None:
            reason: str | None = UNTERMINATED
        else:
            try:
                value = orjson.loads(raw)
            except orjson.JSONDecodeError:
                reason = "not valid JSON (or not UTF-8)"
            else:
                value = current(value, "any" if as_written else kind, f"{path}:{number}")
                reason = problem(value, kind)
        if reason is None:
            yield value
        elif skipped is not None:
            skipped.append(Skipped(path, number, reason))


def _irregular(path: Path, skipped: list[Skipped] | None) -> bool:
    """Whether ``path`` is not a regular file (a FIFO would block the reader forever,
    :func:`apm.records.rundir.not_regular`): such a file is appended to ``skipped`` (line 0), never opened."""
    if (what := not_regular(path)) is None:
        return False
    if skipped is not None:
        skipped.append(Skipped(path, 0, f"not a regular file ({what}): skipped, never opened"))
    return True


def _streamed(path: Path, skipped: list[Skipped] | None) -> Iterator[tuple[int, bytes | None]]:
    """The non-blank lines of a file with their numbers, as :func:`_numbered` gives them, read one at a
    time; an unreadable or irregular file (:func:`_irregular`) is appended to ``skipped`` (line 0) and has none."""
    if _irregular(path, skipped):
        return
    try:
        with path.open("rb") as f:
            for number, raw in enumerate(f, start=1):
                if raw.strip():
                    yield number, (raw if raw.endswith(b"\n") else None)
    except OSError as e:
        if skipped is not None:
            skipped.append(Skipped(path, 0, f"unreadable: {e.strerror or e}"))


UNTERMINATED = "unterminated last line (a crash mid-write)"


def _numbered(data: bytes) -> Iterator[tuple[int, bytes | None]]:
    """The non-blank lines of a file's bytes with their numbers (an unterminated last one as None)."""
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if raw.strip():
            yield number, (None if number == len(lines) else raw)


_TIMINGS = ("ttft_s", "total_s", "rtf")
"""The ``latency`` fields :func:`_latency` checks (finite numbers or null)."""


@functools.cache
def _typed_latency(kept: tuple[str, ...]) -> Any:
    """The ``latency`` block as :func:`_latency` checks it: its timings typed, and the other fields of the
    model's :class:`~apm.records.model.Latency` a reader asks for (``kept``) as they are (null when absent;
    the rest are skipped unread)."""
    unknown = sorted(set(kept) - set(field_names(Latency)))
    if unknown:
        raise ValueError(f"latency has no field {unknown[0]} (apm.records.model.Latency)")
    fields = [(n, float | None, None) if n in _TIMINGS else (n, Any, None) for n in field_names(Latency)
              if n in _TIMINGS or n in kept]
    return msgspec.defstruct("TypedLatency", fields, kw_only=True) | None


_COMPILED: dict[Check, tuple[str, Callable[[tuple[str, ...]], Any]]] = {_latency: ("latency", _typed_latency)}
"""Checks of a whole block that a typed field states completely: the field, and its type given the block's
other fields a reader asks for."""
_RESIDUAL: dict[Check, tuple[str, ...]] = {_judge_score: ("score", "status")}
"""Checks across fields that no type states: run on the typed line's fields they read (named here)."""


class TypedLine(msgspec.Struct, kw_only=True):
    """A line decoded by :func:`read_typed`: its ``run`` block left undecoded (read once per file), then
    dropped (:data:`NO_RUN`) once its index in :attr:`TypedLines.runs` is known."""

    run: msgspec.Raw = msgspec.Raw()


NO_RUN = msgspec.Raw()
"""A typed line's ``run`` once read: a ``msgspec.Raw`` keeps the whole line's bytes alive (a record of
1,024 frames: ~70 KB), so it is not kept past its block's index (:attr:`TypedLines.run_of` says it)."""


@functools.cache
def typed_line(kind: Kind, extra: tuple[str, ...] = ()) -> type[TypedLine]:
    """The struct a ``kind`` line decodes into: each :class:`FieldCheck` of :data:`CHECKS` as its typed
    field, the other checks' fields, and ``extra`` fields a reader wants as they are (any JSON, null
    when absent; unknown fields are ignored); an ``outer.inner`` one asks for field ``inner`` of block
    ``outer``: kept in the typed block where a check types the block (:data:`_COMPILED`), else the whole
    block as it is."""
    inner: dict[str, list[str]] = {}
    for name in extra:
        outer, _, field_name = name.partition(".")
        inner.setdefault(outer, []).extend([field_name] if field_name else [])
    fields: list[tuple[Any, ...]] = []
    for check in CHECKS[kind]:
        if isinstance(check, FieldCheck):
            fields.append(check.struct_field())
        elif check in _COMPILED:
            name, block = _COMPILED[check]
            fields.append((name, block(tuple(sorted(set(inner.get(name, ()))))), None))
        elif check in _RESIDUAL:
            fields += [(name, Any, None) for name in _RESIDUAL[check]]
        elif check is not _run:
            raise TypeError(f"{kind}: check {check.__name__} has no typed form (apm.records.lines)")
    fields += [(name, Any, None) for name in inner]
    unique: dict[str, tuple[Any, ...]] = {}
    for f in fields:  # a field check's type wins over a residual check's or a reader's plain field
        unique.setdefault(f[0], f)
    line = msgspec.defstruct(f"Typed{kind.title()}Line", list(unique.values()), bases=(TypedLine,), kw_only=True)
    return cast(type[TypedLine], line)


@functools.cache
def _decoder(line_type: type[TypedLine]) -> msgspec.json.Decoder[TypedLine]:
    return msgspec.json.Decoder(line_type)


@dataclass
class TypedLines:
    """One file's usable lines (:func:`read_typed`): each decoded line, and the index in ``runs`` of its
    ``run`` block (decoded and checked once per distinct block in the file, not once per line)."""

    lines: list[Any] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    run_of: list[int] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)
    """Each line's bytes, when asked for (``keep_raw``: a judgement's digest covers the whole line)."""
    written: dict[int, int] = field(default_factory=dict)
    """Of a block in ``runs`` that is the migrated copy of another (lines without ``format_version``,
    :func:`_migrated_block`), the index of the block as written."""

    def written_run(self, index: int) -> int:
        """The index in ``runs`` of line ``index``'s ``run`` block as written (before any migration)."""
        block = self.run_of[index]
        return self.written.get(block, block)


@functools.cache
def _after_decoding(kind: Kind) -> tuple[tuple[tuple[str, ...], Callable[..., bool]], ...]:
    """What a decoded ``kind`` line must also satisfy: the checks no type states (:data:`_RESIDUAL`) and
    the :attr:`FieldCheck.decoded` bounds, each as the typed line's fields it reads and a predicate on
    their values (in that order)."""
    checks = CHECKS[kind]
    bounded = [((c.name,), c.decoded) for c in checks if isinstance(c, FieldCheck) and c.decoded is not None]
    crossed = [(reads, lambda *values, c=check, r=reads: c(dict(zip(r, values))) is None)
               for check, reads in _RESIDUAL.items() if check in checks]
    return (*bounded, *crossed)


def _passes(line: TypedLine, kind: Kind) -> bool:
    """Whether one typed line passes :func:`_after_decoding`'s checks."""
    return all(ok(*(getattr(line, name) for name in reads)) for reads, ok in _after_decoding(kind))


def _checked(raw: bytes, kind: Kind, line_type: type[TypedLine], where: str) -> TypedLine | str:
    """A line :func:`read_lines` would use, as a typed line, or why it would not (in the words of
    :data:`CHECKS`): decoded as a dict and checked, for the few lines the typed decoder alone cannot settle.
    Its fields are the dict's values as they are (an integer stays one where the typed decoder gives a float)."""
    try:
        value = current(orjson.loads(raw), kind, where)
    except orjson.JSONDecodeError:
        return "not valid JSON (or not UTF-8)"
    reason = problem(value, kind)
    if reason is not None:
        return reason
    kept = {name: value[name] for name in line_type.__struct_fields__ if name in value and name != "run"}
    return line_type(**kept, run=msgspec.Raw(orjson.dumps(value["run"])))


BLOCK_BYTES = 32 << 20
""":func:`read_typed` reads a file in blocks of whole lines of about this size: its memory is a block's,
never the file's (a method's records at the paper's scale run to hundreds of MB)."""


def read_typed(path: Path, kind: Kind, extra: Sequence[str] = (), skipped: list[Skipped] | None = None,
               keep_raw: bool = False) -> TypedLines:
    """The usable lines of one JSONL file as :func:`typed_line` structs (with ``extra`` fields): the lines
    :func:`read_lines` yields (docs/records.md, "Reading lines"); each other line is appended to ``skipped``
    with the reason :func:`read_lines` gives. The file is read in blocks of whole lines (:data:`BLOCK_BYTES`);
    a block whose every terminated line the typed decoder settles (:func:`_all_typed`) is read in one pass,
    any other line by line."""
    line_type = typed_line(kind, tuple(extra))
    out = TypedLines()
    for before, data in _blocks(path, skipped):
        block = _read_block(data, before, path, kind, line_type, skipped, keep_raw)
        here = [_run_at(run, out.runs) for run in block.runs]
        out.lines += block.lines
        out.run_of += [here[i] for i in block.run_of]
        out.raw += block.raw
    return out


def _run_at(run: dict[str, Any], runs: list[dict[str, Any]]) -> int:
    """The index of ``run`` in ``runs``, appended when it is not there yet."""
    if run not in runs:
        runs.append(run)
    return runs.index(run)


def _blocks(path: Path, skipped: list[Skipped] | None) -> Iterator[tuple[int, bytes]]:
    """A file's bytes as blocks of whole lines of about :data:`BLOCK_BYTES` (the last may end in an
    unterminated line), each with the number of lines before it; an unreadable file is appended to
    ``skipped`` (line 0), as is an irregular one (:func:`_irregular`)."""
    if _irregular(path, skipped):
        return
    try:
        with path.open("rb") as f:
            before, rest = 0, b""
            while chunk := f.read(BLOCK_BYTES):
                data = rest + chunk
                end = data.rfind(b"\n") + 1
                if end:
                    yield before, data[:end]
                    before += data.count(b"\n", 0, end)
                rest = data[end:]
            if rest:
                yield before, rest
    except OSError as e:
        if skipped is not None:
            skipped.append(Skipped(path, 0, f"unreadable: {e.strerror or e}"))


def _read_block(data: bytes, before: int, path: Path, kind: Kind, line_type: type[TypedLine],
                skipped: list[Skipped] | None, keep_raw: bool) -> TypedLines:
    """:func:`read_typed` of one block of a file, its lines numbered after the ``before`` lines ahead of it."""
    beyond = _beyond_double(data)
    at_once = None if beyond else _all_typed(data, kind, line_type, keep_raw)
    if at_once is not None:
        out, torn = at_once
        if torn and skipped is not None:
            skipped.append(Skipped(path, before + torn, UNTERMINATED))
        return out
    out = TypedLines()
    blocks: dict[bytes, int | None] = {}
    copies: dict[int, int] = {}
    for number, raw in _numbered(data):
        if raw is None:
            found: tuple[TypedLine, int] | str = UNTERMINATED
        else:
            by_dict = number in beyond or not _is_utf8(raw)
            found = _decoded(raw, kind, line_type, (blocks, copies), out.runs, by_dict, f"{path}:{number}")
        if isinstance(found, str):
            if skipped is not None:
                skipped.append(Skipped(path, before + number, found))
            continue
        out.lines.append(found[0])
        out.run_of.append(found[1])
        if keep_raw and raw is not None:
            out.raw.append(raw)
    out.written = _written(copies)
    return out


def _all_typed(data: bytes, kind: Kind, line_type: type[TypedLine],
               keep_raw: bool) -> tuple[TypedLines, int] | None:
    """A file's lines as :func:`read_typed` reads them line by line, and the number of its unterminated
    last line (0: none), when the typed decoder settles every terminated line (each UTF-8 and non-blank,
    accepted by the decoder, its run block passing :func:`_run`, the line passing :func:`_after_decoding`'s
    checks; the caller has found no number that may be beyond a double's range); None for any other file.
    The same decoder and checks as line by line, each applied to a whole column of the file's lines."""
    lines = data.split(b"\n")
    last = lines.pop()  # after the last newline: empty, or a line in the writing
    torn = len(lines) + 1 if last.strip() else 0
    if not data.isascii() and not _is_utf8(data[: data.rfind(b"\n") + 1]):
        return None
    try:
        typed = list(map(_decoder(line_type).decode, lines))  # a blank line is refused like any other
    except (ValueError, RecursionError):  # msgspec.DecodeError, ValidationError, UnicodeDecodeError
        return None
    blocks = list(map(bytes, map(operator.attrgetter("run"), typed)))
    runs: list[dict[str, Any]] = []
    index = {block: _run_index(block, runs) for block in dict.fromkeys(blocks)}  # first appearance first
    if None in index.values():
        return None
    for reads, ok in _after_decoding(kind):
        if not all(map(ok, *(map(operator.attrgetter(name), typed) for name in reads))):
            return None
    _migrate_typed(typed, kind, line_type)
    run_of = cast(list[int], list(map(index.__getitem__, blocks)))
    copies: dict[int, int] = {}
    if FIELD in line_type.__struct_fields__:
        versions = list(map(operator.attrgetter(FIELD), typed))
        if None in versions:
            run_of = [i if v is not None else _migrated_block(i, runs, copies) for v, i in zip(versions, run_of)]
    for line in typed:
        line.run = NO_RUN
    return TypedLines(typed, runs, run_of, lines if keep_raw else [], _written(copies)), torn


def _written(copies: dict[int, int]) -> dict[int, int]:
    """:attr:`TypedLines.written` from :func:`_migrated_block`'s ``copies`` (block as written → its copy)."""
    return {copy: block for block, copy in copies.items() if copy != block}


_NUMERIC = bytearray(range(256))
_NUMERIC[ord("0") : ord("9") + 1] = b"0" * 10
_NUMERIC[ord("E")], _NUMERIC[ord("-")] = ord("e"), ord("+")
for _end in b",}] \t\r\n":
    _NUMERIC[_end] = ord(",")
_NUMERICAL = bytes(_NUMERIC)
"""Each digit read as ``0``, ``E`` as ``e``, ``-`` as ``+``, and each byte that may end a JSON number (``,``,
``}``, ``]``, JSON white space) as ``,``: an exponent of three digits or more then reads ``e000…,`` or
``e+000…,``."""
_EXPONENT = re.compile(rb"e\+?000+,")
_LONG_RUN = b"0" * 200
"""200 digits in a row, once every digit reads as ``0`` (:data:`_NUMERICAL`)."""
_MANTISSA = frozenset(b"0123456789.")
_BEFORE_A_NUMBER = frozenset(b":,[ \t\r\n")


def _beyond_double(data: bytes) -> set[int]:
    """The numbers of the lines of ``data`` (numbered as :func:`_numbered` numbers them) that may hold a
    JSON number beyond a double's range (about 1.8e308), which orjson refuses and msgspec skips unchecked
    in a field no check reads: a number with an exponent of three digits or more (its digits followed by
    what may end a number: a number followed by anything else is not JSON to either decoder), or 200
    digits in a row anywhere (with a smaller exponent and fewer digits a number stays below 1e300). Some
    lines named hold no such number; they are only read the slow way."""
    numeric = data.translate(_NUMERICAL)
    at = [m.start() for m in _EXPONENT.finditer(numeric) if _ends_a_mantissa(data, m.start())]
    run = numeric.find(_LONG_RUN)
    while run >= 0:
        at.append(run)
        run = numeric.find(_LONG_RUN, run + len(_LONG_RUN))
    numbers: set[int] = set()
    line, seen = 1, 0
    for position in sorted(at):
        line += data.count(b"\n", seen, position)
        seen = position
        numbers.add(line)
    return numbers


def _ends_a_mantissa(data: bytes, exponent: int) -> bool:
    """Whether the ``e`` at ``exponent`` follows a JSON number's mantissa (digits, a point, a sign, after a
    comma, colon, bracket or white space), not a hash's or a word's letters and digits."""
    i = exponent - 1
    while i >= 0 and data[i] in _MANTISSA:
        i -= 1
    if i >= 0 and data[i] == ord("-"):
        i -= 1
    return i < exponent - 1 and (i < 0 or data[i] in _BEFORE_A_NUMBER)


def _is_utf8(raw: bytes) -> bool:
    """Whether a line is UTF-8 throughout (orjson refuses any other byte; msgspec skips a field no
    check reads without checking its bytes)."""
    if raw.isascii():
        return True
    try:
        raw.decode()
    except UnicodeDecodeError:
        return False
    return True


def _decoded(raw: bytes, kind: Kind, line_type: type[TypedLine], seen: tuple[dict[bytes, int | None], dict[int, int]],
             runs: list[dict[str, Any]], by_dict: bool, where: str) -> tuple[TypedLine, int] | str:
    """One line as a typed line and the index of its ``run`` block in ``runs`` (``seen``: the index of each
    distinct block seen in the file, None for an unusable one, and of each block's migrated copy,
    :func:`_migrated_block`), or why it is unusable. The typed
    decoder settles a line it accepts whose run block and :func:`_after_decoding` checks pass; the dict
    path (:func:`_checked`) settles every other line, and every line when ``by_dict`` (one the typed
    decoder may accept and orjson not)."""
    blocks, copies = seen
    if not by_dict:
        try:
            typed = _decoder(line_type).decode(raw)
        except (ValueError, RecursionError):  # msgspec.DecodeError, ValidationError, UnicodeDecodeError
            pass
        else:
            block = bytes(typed.run)
            if block not in blocks:
                blocks[block] = _run_index(block, runs)
            index = blocks[block]
            if index is not None and _passes(typed, kind):
                _migrate_typed([typed], kind, line_type)
                migrated = getattr(typed, FIELD, 1) is None
                typed.run = NO_RUN
                return typed, _migrated_block(index, runs, copies) if migrated else index
    checked = _checked(raw, kind, line_type, where)
    if isinstance(checked, str):
        return checked
    block = bytes(checked.run)  # a run block that passed CHECKS, so never one recorded as unusable
    index = blocks.get(block)
    if index is None:
        runs.append(orjson.loads(block))  # a line without format_version: its block already migrated (current)
        index = blocks[block] = len(runs) - 1
    checked.run = NO_RUN
    return checked, index


def _migrate_typed(lines: list[Any], kind: Kind, line_type: type[TypedLine]) -> None:
    """Typed lines as :func:`apm.records.version.migrate` leaves them: on each without ``format_version``,
    the fields it decodes whose absence meant a value (:func:`apm.records.version.typed_defaults`; every
    other absent field decodes as null, what its absence meant) set to it where null."""
    defaults = typed_defaults(kind, line_type.__struct_fields__)
    if not defaults:
        return
    for line in lines:
        if line.format_version is None:
            for name, default in defaults.items():
                if getattr(line, name) is None:
                    setattr(line, name, default)


def _run_index(block: bytes, runs: list[dict[str, Any]]) -> int | None:
    """A ``run`` block's index in ``runs`` (appended), or None when it fails :func:`_run`."""
    try:
        run = orjson.loads(block)
    except orjson.JSONDecodeError:
        return None
    if _run({"run": run}) is not None:
        return None
    runs.append(run)
    return len(runs) - 1


def _migrated_block(index: int, runs: list[dict[str, Any]], copies: dict[int, int]) -> int:
    """The index in ``runs`` of block ``runs[index]`` as :func:`apm.records.version.migrate_run` leaves it, for
    a line without ``format_version``: the same index where migrating changes nothing, else a copy appended
    once per block (``copies``); the block stays as it is for the file's other lines."""
    if index not in copies:
        migrated = migrate_run(runs[index])
        copies[index] = index if migrated == runs[index] else len(runs)
        if copies[index] != index:
            runs.append(migrated)
    return copies[index]
