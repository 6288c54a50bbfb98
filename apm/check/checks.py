"""The contract checks of ``apm-check-system`` (docs/streaming-systems.md, "The checklist"), each a
function from what a run left (its records, memory lines, state folders) and what the observer saw
(``apm.check.observed``) to the problems found, one line each; no problems is a pass. The project's own
contract tests call these same functions."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import jsonschema

from apm.check.observed import Event
from apm.data.instances import Instance
from apm.data.model import Release
from apm.records.declaration import Declaration
from apm.runner.causality import REFUSED
from apm.streaming.base import FAST_WEIGHTS, storage_bytes

Records = Mapping[str, dict[str, Any]]
"""Each instance key's newest record."""

EA_TASK = "EA"
SHOWN_OF_A_HIDDEN_SESSION = "visible sessions"
"""What a causality refusal says when the item shown lies outside the instance's visible sessions."""


Status = Literal["PASS", "FAIL", "SKIP", "NOT CHECKED"]


@dataclass(frozen=True)
class Result:
    """One check's outcome: ``PASS`` (what was checked), ``FAIL`` (what failed), ``SKIP`` (why it was not
    checked: it does not apply, or ``failed``, a run it reads failed; never counted as a pass) or ``NOT
    CHECKED`` (what the checklist cannot see of this system, said in words; neither a pass nor a failure)."""

    check: str
    status: Status
    detail: str
    failed: bool = False
    """A ``SKIP`` because a run the check reads failed: the command exits non-zero as for a ``FAIL``."""

    @property
    def line(self) -> str:
        return f"{self.status} {self.check}: {self.detail}"

    @property
    def ok(self) -> bool:
        """Whether the command may still exit 0: anything but a ``FAIL`` or a ``SKIP`` caused by a failure."""
        return self.status != "FAIL" and not self.failed


def verdict(check: str, problems: list[str], passed: str) -> Result:
    """``FAIL`` with the first problem (and how many more) when there are any, else ``PASS`` saying ``passed``."""
    if not problems:
        return Result(check, "PASS", passed)
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return Result(check, "FAIL", problems[0] + more)


COMPARED = ("output", "error", "prompt_sha256", "frames", "memory_sha256", "memory_bytes")
"""What an instance's answer was and rested on: output, error, prompt digest, frames and the memory state
it was asked from; two runs of a deterministic, non-mutating system agree on each."""
SHOWN_CHARS = 48
"""How much of each differing value a comparison's line shows (``…`` marks the cut)."""


def comparable(record: dict[str, Any]) -> tuple[str, ...]:
    """A record's :data:`COMPARED` fields, each as canonical JSON."""
    return tuple(json.dumps(record.get(name), sort_keys=True) for name in COMPARED)


def _short(value: Any) -> str:
    """``value`` as a line shows it: its repr (JSON for lists and objects), cut to :data:`SHOWN_CHARS`."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":")) if isinstance(value, (list, dict)) else repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def differences(got: dict[str, Any], expected: dict[str, Any]) -> str:
    """The :data:`COMPARED` fields on which two records of an instance differ, each as ``field got against
    expected`` (values cut short), ``; ``-separated; empty when they agree."""
    return "; ".join(f"{name} {_short(got.get(name))} against {_short(expected.get(name))}"
                     for name, a, b in zip(COMPARED, comparable(got), comparable(expected), strict=True) if a != b)


def answered(planned: Iterable[Instance], records: Records, lines: list[dict[str, Any]],
             run_error: str | None) -> list[str]:
    """The run ended, every planned instance is on record without an error, and no session's update failed."""
    problems = [f"the run stopped: {run_error}"] if run_error else []
    keys = [i.key for i in planned]
    missing = [k for k in keys if k not in records]
    if missing:
        problems.append(f"{len(missing)} of {len(keys)} instances have no record (the first: {missing[0]})")
    failed = [(k, records[k]["error"]) for k in keys if k in records and records[k].get("error")]
    if failed:
        key, error = failed[0]
        problems.append(f"{len(failed)} of {len(keys)} records carry an error; the first: {key}: {error}")
    broken = [m for m in lines if m.get("error")]
    if broken:
        m = broken[0]
        problems.append(f"{len(broken)} session updates failed; the first: {m['trajectory_id']} "
                        f"{m['day_id']}/{m['session_id']}: {m['error']}")
    return problems


def _refusal(record: dict[str, Any]) -> str | None:
    error = str(record.get("error") or "")
    return error.removeprefix(REFUSED) if error.startswith(REFUSED) else None


def _hidden(instance: Instance, refusal: str) -> bool:
    """Whether a refusal is an EA instance shown what lies outside its visible sessions (the EA check's)."""
    return instance.task == EA_TASK and SHOWN_OF_A_HIDDEN_SESSION in refusal


def pixel_causality(instances: Mapping[str, Instance], events: list[Event], records: Records) -> list[str]:
    """Each answer came after the frame of its probe second and before any later one, read on the frames'
    pixels; every frame showed the second it was fed as; no record was refused for showing what was
    formed after its probe."""
    problems = [f"{e['trajectory']} {e['session']}: a frame fed as second {e['wall_clock']} shows {e['shown']} "
                "on its pixels" for e in events if e["event"] == "frame" and e["shown"] != e["wall_clock"]]
    for e in events:
        if e["event"] == "answer" and e["key"] in instances:
            probe = instances[e["key"]].probe_time
            if e["last_seen"] != probe:
                problems.append(f"{e['key']}: answered when the last frame observed showed second "
                                f"{e['last_seen']}, the probe is at {probe}")
    for key, record in records.items():
        refusal = _refusal(record)
        if refusal and key in instances and not _hidden(instances[key], refusal):
            problems.append(f"refused by the runner: {refusal}")
    return problems


def _passes(events: list[Event]) -> dict[tuple[str, str, str], list[list[int | None]]]:
    """(copy, trajectory, session) -> the seconds shown by each replay of that session, in feeding order."""
    passes: dict[tuple[str, str, str], list[list[int | None]]] = {}
    for e in events:
        where = (e.get("copy", ""), e.get("trajectory", ""), e.get("session", ""))
        if e["event"] == "begin":
            passes.setdefault(where, []).append([])
        elif e["event"] == "frame" and where in passes:
            passes[where][-1].append(e["shown"])
    return passes


def frame_order(release: Release, events: list[Event]) -> list[str]:
    """Each replay of a session fed its frames once each, in order, one per second from its start, and
    the main replay fed every session of the release."""
    problems = []
    replayed = set()
    for (_, tid, key), runs in _passes(events).items():
        session = release.trajectory(tid).session(key)
        replayed.add((tid, key))
        for seconds in runs:
            expected = list(range(session.start, session.start + len(seconds)))
            if seconds != expected:
                wrong = next(i for i, (a, b) in enumerate(zip(seconds, expected, strict=False)) if a != b)
                problems.append(f"{tid} {key}: frame {wrong} of a replay showed second {seconds[wrong]}, "
                                f"expected {expected[wrong]} (one per second from the session start)")
            elif not session.duration <= len(seconds) <= session.duration + 1:
                problems.append(f"{tid} {key}: a replay fed {len(seconds)} frames, the session lasts "
                                f"{session.duration} s")
    for traj in release.trajectories:
        problems += [f"{traj.trajectory_id} {s.key}: never replayed" for s in traj.sessions
                     if (traj.trajectory_id, s.key) not in replayed]
    return problems


def non_mutating(full: Records, part: Records) -> list[str]:
    """A run asked a subset of the instances gave each shared instance the answer of the full run."""
    shared = sorted(set(full) & set(part))
    if not shared:
        return ["the subset run shares no instance with the full run"]
    return [f"{k}: answered differently when fewer probes were asked ({differences(part[k], full[k])}): an "
            "answer changed the state" for k in shared if comparable(full[k]) != comparable(part[k])]


def ea_restriction(instances: Mapping[str, Instance], events: list[Event], records: Records) -> list[str]:
    """Every restricted (EA) instance was answered by a copy of the system fed its visible sessions
    alone, and showed nothing of another session."""
    problems = []
    fed: dict[tuple[str, str], list[str]] = {}
    for e in events:
        if e["event"] == "begin":
            fed.setdefault((e["copy"], e["trajectory"]), []).append(e["session"])
        elif e["event"] == "answer" and (inst := instances.get(e["key"])) and inst.task == EA_TASK:
            hidden = [s for s in fed.get((e["copy"], e["trajectory"]), []) if s not in inst.visible_sessions]
            if hidden:
                problems.append(f"{inst.key}: answered by a system fed {', '.join(dict.fromkeys(hidden))}, "
                                f"outside its visible sessions {list(inst.visible_sessions)}")
    for key, record in records.items():
        inst = instances.get(key)
        if inst is None or inst.task != EA_TASK:
            continue
        refusal = _refusal(record)
        if refusal and _hidden(inst, refusal):
            problems.append(f"refused by the runner: {refusal}")
        outside = sorted({f["session"] for f in record.get("frames") or []} - set(inst.visible_sessions))
        if outside and not refusal:
            problems.append(f"{key}: its record shows frames of {', '.join(outside)}, outside its visible sessions")
    return problems


def _disk(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` (unfinished ``*.tmp`` files too) and its bytes."""
    return {p.relative_to(folder).as_posix(): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()} \
        if folder.is_dir() else {}


def _measured(line: dict[str, Any] | None) -> dict[str, int]:
    return {path: entry["bytes"] for path, entry in (line or {}).get("state", {}).items()}


def state_bytes(state_root: Path, lines: list[dict[str, Any]], events: list[Event]) -> list[str]:
    """Each trajectory's state folder holds, file for file, what its last memory line measured (and that
    line's ``bytes`` and ``fast_weight_bytes`` are their sums, the fast weights apart as B.4 reports them);
    each session began from exactly what the previous line measured."""
    problems = []
    newest: dict[tuple[str, int], dict[str, Any]] = {}
    for m in lines:
        newest[m["trajectory_id"], m["session_index"]] = m
    for tid in sorted({t for t, _ in newest}):
        last = newest[max(k for k in newest if k[0] == tid)]
        held, measured = _disk(state_root / tid), _measured(last)
        if held != measured:
            extra = sorted(set(held) - set(measured)) or sorted(p for p in held if held[p] != measured.get(p))
            problems.append(f"{tid}: the state folder holds {sum(held.values())} bytes on disk, its last memory "
                            f"line measured {sum(measured.values())} (not as measured: {', '.join(extra[:3]) or '-'})")
        said = {"bytes": last["bytes"], "fast_weight_bytes": last.get("fast_weight_bytes", 0)}
        memory = ((last.get("run") or {}).get("declarations") or {}).get("memory") or {}
        summed = storage_bytes(last.get("state", {}), apart=memory.get("representation") == "parametric")
        if said != summed:
            problems.append(f"{tid}: the last memory line says {said['bytes']} bytes and {said['fast_weight_bytes']} "
                            f"of fast weights, its files sum to {summed['bytes']} and {summed['fast_weight_bytes']} "
                            f"under {FAST_WEIGHTS}/")
    main: dict[str, str] = {}  # each trajectory's first copy: its main replay (later copies answer EA)
    for e in events:
        if e["event"] == "begin":
            main.setdefault(e["trajectory"], e["copy"])
    for e in events:
        if e["event"] == "begin" and e["copy"] == main[e["trajectory"]]:
            index = next((m["session_index"] for m in lines if m["trajectory_id"] == e["trajectory"]
                          and f"{m['day_id']}/{m['session_id']}" == e["session"]), None)
            before = _measured(newest.get((e["trajectory"], index - 1))) if index else {}
            if index is not None and e["state"] != before:
                problems.append(f"{e['trajectory']} {e['session']}: began from {sum(e['state'].values())} bytes "
                                f"in {len(e['state'])} files, the previous session's memory line measured "
                                f"{sum(before.values())} in {len(before)}")
    return problems


def _schema(name: str) -> dict[str, Any]:
    text = resources.files("apm.records").joinpath("schemas", f"{name}.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


def raw_lines(folder: Path) -> list[dict[str, Any]]:
    """Every JSON line of the ``*.jsonl`` files in ``folder`` as written (the schema check reads them unfiltered)."""
    lines = []
    for path in sorted(folder.glob("*.jsonl")):
        for text in path.read_text(encoding="utf-8").splitlines():
            try:
                lines.append(json.loads(text))
            except ValueError:
                lines.append({"unreadable line": text[:60]})
    return lines


def schema(records: list[dict[str, Any]], lines: list[dict[str, Any]], declaration: Declaration | None) -> list[str]:
    """Records and memory lines validate against ``apm/records/schemas``, and carry the declaration
    (``run.declarations.memory``, ``run.capabilities``) the system's class makes."""
    problems = []
    for kind, found in (("record", records), ("memory", lines)):
        validator = jsonschema.Draft202012Validator(_schema(kind))
        for line in found:
            error = next(iter(validator.iter_errors(line)), None)
            if error is not None:
                where = "/".join(map(str, error.absolute_path)) or "the line"
                name = line.get("key") or f"{line.get('trajectory_id')} {line.get('day_id')}/{line.get('session_id')}"
                problems.append(f"{kind} line {name}: {where}: {error.message:.200}")
    declared = declaration.as_record() if declaration else None
    capabilities = {k: getattr(declaration, k) if declaration else None for k in ("streaming", "persistent")}
    for line in records:
        run = line.get("run") or {}
        recorded = (run.get("declarations") or {}).get("memory")
        if recorded != declared or run.get("capabilities") != capabilities:
            problems.append(f"record {line.get('key')}: run.declarations.memory {recorded} and run.capabilities "
                            f"{run.get('capabilities')}, the class declares {declared}")
            break
    return problems


def same_outcome(expected: Records, got: Records, expected_lines: list[dict[str, Any]],
                 got_lines: list[dict[str, Any]], how: str) -> list[str]:
    """A run that was interrupted (``how``) and rerun ends with the records and memory states of an
    uninterrupted one."""
    problems = [f"{k}: after {how}, the record differs from the uninterrupted run's "
                f"({differences(got[k], expected[k])})"
                for k in sorted(expected) if k in got and comparable(got[k]) != comparable(expected[k])]
    if set(got) != set(expected):
        problems.append(f"after {how}, {len(set(expected) - set(got))} records missing and "
                        f"{len(set(got) - set(expected))} unexpected")
    newest = {(m["trajectory_id"], m["session_index"]): m["state_sha256"] for m in got_lines}
    wanted = {(m["trajectory_id"], m["session_index"]): m["state_sha256"] for m in expected_lines}
    differ = sorted(k for k in wanted if newest.get(k) != wanted[k])
    if differ:
        tid, index = differ[0]
        problems.append(f"after {how}, {len(differ)} sessions exported another state than the uninterrupted run "
                        f"(the first: {tid} session {index})")
    return problems
