"""Files and folders written so that a reader — or the next run after a kill — sees the old content
or the new one, never a torn mix. Permissions follow the umask (a group-shared folder stays
group-readable), unlike ``tempfile.mkstemp``'s fixed 0600."""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from apm.records.redact import redact, redact_data
from apm.records.rundir import RunDir, not_regular


def temp_name(path: Path) -> Path:
    """A temporary name beside ``path`` that is this writer's alone (pid and a random suffix) and ends
    ``.tmp``, so two writers of one file never rename or delete each other's."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")


def write_atomically(path: Path, data: bytes, sync: bool = True) -> Path:
    """Replace ``path`` with ``data`` through a :func:`temp_name` (flushed to disk before the rename unless
    ``sync`` is False: then, like a record line, it survives the process but not the machine)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(path)
    try:
        with tmp.open("wb") as f:
            f.write(data)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_redacted(path: Path, value: Any, sync: bool = True) -> Path:
    """:func:`write_atomically` of text a model may have written (a memory note, a system's kept state, a
    prompt's text part), every registered secret masked (:mod:`apm.records.redact`): a string as UTF-8,
    anything else as JSON (as ``json.dumps`` writes it)."""
    text = redact(value) if isinstance(value, str) else json.dumps(redact_data(value))
    return write_atomically(path, text.encode("utf-8"), sync)


def write_json_atomically(path: Path, value: Any) -> Path:
    """:func:`write_atomically` of ``value`` as indented JSON (non-JSON values as their ``str``)."""
    return write_atomically(path, json.dumps(value, indent=2, default=str).encode())


class DamagedRunFile(ValueError):
    """A run's own JSON file (``config.json``, a shard's ``plan.json``) that cannot be used: the message
    names the file, the field and how to rewrite it, in one line."""


FieldCheck = tuple[str, Callable[[Any], bool], str, bool]
"""A field's dotted path, its test, what it must be (for the message), and whether it must be there."""
RERUN_RUN = "rerun the run's apm-run command to rewrite it"
RERUN_SHARD = "rerun the shard's apm-run command to rewrite it"


def _is_strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


CONFIG_FIELDS: tuple[FieldCheck, ...] = (
    ("config_hash", lambda v: isinstance(v, str), "a string", True),
    ("config", lambda v: isinstance(v, dict), "a JSON object", True),
    ("config.dataset", lambda v: isinstance(v, dict), "a JSON object", True),
    ("config.dataset.root", lambda v: isinstance(v, str), "a path", True),
    ("release_fingerprint", lambda v: v is None or isinstance(v, str), "a string", False),
)
"""What every reader of ``config.json`` takes from it."""
PLAN_FIELDS: tuple[FieldCheck, ...] = (
    ("instances", _is_count, "a count", True),
    ("keys", _is_strings, "a list of instance keys", True),
    ("trajectories", _is_strings, "a list of trajectory ids", False),
    ("selected", lambda v: v is None or _is_count(v), "a count", False),
    ("population", lambda v: v is None or _is_count(v), "a count", False),
)
"""What ``apm-status`` and the reducer's coverage take from a shard's ``plan.json``."""


def read_checked_json(path: Path, fields: Sequence[FieldCheck], fix: str) -> dict[str, Any]:
    """The JSON object in ``path`` with each of ``fields`` as it must be; anything else (not a regular
    file, not JSON, a field missing or of another kind) is a :class:`DamagedRunFile` naming ``path``, the
    field and ``fix``."""
    what = not_regular(path)
    if what is not None:
        raise DamagedRunFile(f"{path}: damaged: {what}, not a file; {fix}")
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DamagedRunFile(f"{path}: damaged: not JSON ({e}); {fix}") from None
    if not isinstance(value, dict):
        raise DamagedRunFile(f"{path}: damaged: not a JSON object; {fix}")
    for name, is_valid, kind, required in fields:
        held: Any = value
        for part in name.split("."):
            held = held.get(part, _MISSING) if isinstance(held, dict) else _MISSING
        if held is _MISSING and required:
            raise DamagedRunFile(f"{path}: damaged: field {name} is missing (must be {kind}); {fix}")
        if held is not _MISSING and not is_valid(held):
            raise DamagedRunFile(f"{path}: damaged: field {name} is not {kind}; {fix}")
    return value


_MISSING = object()


def read_run_config(run_dir: Path) -> dict[str, Any]:
    """A run dir's ``config.json`` (``config_hash``, ``release_fingerprint``, ``config``); a damaged one is a
    :class:`DamagedRunFile` naming the file and field, so every command that needs it refuses in one line."""
    return read_checked_json(RunDir(run_dir).config, CONFIG_FIELDS, RERUN_RUN)


def read_plan_file(path: Path) -> dict[str, Any]:
    """A shard's ``plan.json``; a damaged one is a :class:`DamagedRunFile` naming the file and field."""
    return read_checked_json(path, PLAN_FIELDS, RERUN_SHARD)


@contextmanager
def staged_folder(target: Path) -> Iterator[Path]:
    """A fresh folder beside ``target`` to write a whole output into; on success it replaces
    ``target`` (the old one is removed), on any failure it is removed and ``target`` is untouched.

    Between the two renames of the swap ``target`` briefly does not exist: a kill there leaves no
    output, never a mix of two.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = temp_name(target)
    staging.mkdir()
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    old = temp_name(target) if target.exists() else None
    if old is not None:
        os.replace(target, old)
    os.replace(staging, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


MARKER = ".apm-output.json"
"""The file by which a command knows a folder as its own output: ``{"command", "entries", …}``."""
OUTPUT_LOCK = ".apm-output.lock"
"""The lock file of a command that writes into its folder in place (``apm-publish``)."""


class OutputRefused(ValueError):
    """An ``--out`` the command may not write: something it did not write would be replaced."""


def read_marker(folder: Path) -> dict[str, Any] | None:
    """The folder's output marker, None when it has none (or a damaged one: not proof of ownership)."""
    try:
        marker = json.loads((folder / MARKER).read_bytes())
    except (OSError, ValueError):
        return None
    ok = isinstance(marker, dict) and isinstance(marker.get("command"), str) and isinstance(marker.get("entries"), list)
    return marker if ok else None


def claim_output(target: str | os.PathLike[str], command: str) -> Path:
    """``target`` resolved, if ``command`` may write it: a new or empty folder, or one whose marker says
    ``command`` wrote it and which holds nothing else; otherwise :class:`OutputRefused` saying why."""
    path = Path(target).expanduser().resolve()
    problem = _ownership_problem(path, command)
    if problem is not None:
        raise OutputRefused(f"refusing --out {target}: {problem}")
    return path


def _ownership_problem(path: Path, command: str) -> str | None:
    if path == Path(path.anchor):
        return "it is the file system root"
    if path == Path.cwd() or path in Path.cwd().parents:
        return "it is the working directory or a folder above it; give a folder of its own"
    if not path.exists():
        return None
    if not path.is_dir():
        return "it is a file, not a folder"
    entries = {p.name for p in path.iterdir()} - {OUTPUT_LOCK}
    if not entries:
        return None
    marker = read_marker(path)
    if marker is None:
        return f"it is not empty and {command} did not write it (no {MARKER}); give a new or empty folder"
    if marker["command"] != command:
        return f"it holds the output of {marker['command']}, not of {command}"
    foreign = sorted(entries - {MARKER, *marker["entries"]})
    if foreign:
        return f"it holds {len(foreign)} entries {command} did not write ({', '.join(foreign[:3])}); move them first"
    return None


def write_marker(folder: Path, command: str, entries: Iterable[str], **extra: Any) -> None:
    """Mark ``folder`` as ``command``'s output holding ``entries`` (top-level names), atomically."""
    write_json_atomically(folder / MARKER, {"command": command, "entries": sorted(set(entries)), **extra})


@contextmanager
def replaced_output(target: str | os.PathLike[str], command: str, later: Sequence[str] = ()) -> Iterator[Path]:
    """A staging folder for ``command``'s whole output at ``target`` (checked by :func:`claim_output`
    first and again at the swap); on success it is marked as ``command``'s — with the ``later`` names
    the command adds after the swap — and replaces ``target`` atomically (:func:`staged_folder`)."""
    path = claim_output(target, command)
    with staged_folder(path) as stage:
        yield stage
        write_marker(stage, command, [*(p.name for p in stage.iterdir()), *later])
        claim_output(target, command)


@contextmanager
def new_file(target: str | os.PathLike[str], command: str) -> Iterator[Path]:
    """A temporary path to write ``command``'s output file into; on success it becomes ``target``, which
    must not exist — before or at the end (:class:`OutputRefused`): a file cannot say who wrote it."""
    path = Path(target).expanduser().resolve()
    refused = OutputRefused(f"refusing {target}: it exists; {command} writes only a new file")
    if path.exists() or path.is_symlink():
        raise refused
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(path)
    try:
        yield tmp
        try:
            os.link(tmp, path)  # never over a file that appeared meanwhile
        except FileExistsError:
            raise refused from None
    finally:
        tmp.unlink(missing_ok=True)
