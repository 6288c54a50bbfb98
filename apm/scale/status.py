"""``apm-status RUN_ROOT``: per config and shard, instances done / total, errors, the job's state, ETA.

A shard with every instance of its plan on record is ``done``, or ``done with errors`` when some of
those records are errors or some of its memory updates failed (rerun them with ``rerun=errors``);
a shard whose last job finished a subset of it (``dataset.limit``) is ``partial``: not done, not
failed. A shard of the run's shard count that never started (no plan, no records) is listed as
``missing``, and the summary gives the whole plan's totals (``population`` of the plans: every shard
together).

Progress comes from the records and each shard's ``plan.json``; the job's state from SLURM (``squeue``,
``sacct``) when it is there, else from the ledger the submitter and the runner write. So it works
while jobs run, after they end, and on a machine without SLURM.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from apm.records.jsonl import read_folder, read_jsonl
from apm.records.rundir import RunDir, find_runs
from apm.records.select import latest_by, revision_of
from apm.runner import ledger
from apm.scale import scheduler

FAILED = {"failed", "cancelled", "timeout", "out_of_memory", "node_fail", "preempted", "boot_fail", "deadline",
          "interrupted", "died", "incomplete", "lost", "missing"}
"""Shard states that need a resubmission."""
DONE, DONE_WITH_ERRORS = "done", "done with errors"
"""Every instance on record: all answered, or some of them errors (an endpoint that refused them, say)."""
PARTIAL = "partial"
"""The shard's last job finished a try of part of it (``dataset.limit``, ``dataset.trajectories``): not done,
not failed; the full run (``apm-submit`` submits it) adds the rest."""
MISSING = "missing"
"""A shard of the run's shard count with neither plan nor records: never started."""
HELD = {"pending", "requeued", "requeue_hold", "requeue_fed", "suspended", "stopped"}
"""Scheduler states of a job that waits: ``apm-status`` says why (the scheduler's reason) and what releases it."""
ERROR_LINE = re.compile(r"(error|exception)(?!s)\b|\b(killed|cancelled|oom[-_ ]kill|out of memory)\b", re.IGNORECASE)
"""A log line that says something went wrong (``apm-run: error: …``, ``ValueError: …``, ``slurmstepd: error: …
CANCELLED``, an OOM kill), not a progress line's ``0 errors``."""
LOG_TAIL_BYTES = 1 << 16
"""How much of the end of a job's log is searched for its last error line."""


@dataclass
class ShardStatus:
    """One shard of one config, as far as the records, the plan and the scheduler tell."""

    run: str
    shard: str
    state: str
    done: int
    total: int | None
    errors: int
    duplicates: int
    job_id: str | None
    eta_s: float | None
    memory_errors: int = 0
    """The shard's trajectories' session updates whose newest memory line has an error."""
    population: int | None = None
    """Instances of every shard of the run together (from its plan; None when unknown)."""
    reason: str | None = None
    """The scheduler's reason for the job's state (``BeginTime``, ``JobHeldUser``…), for a shard that needs a word."""
    last_error: str | None = None
    """The last error line of the job's log (else of its ledger), for a shard that failed."""
    log: str | None = None
    """The job's log file, where there is one (its stderr: ``<output_root>/.submitit/<id>/<id>_0_log.err``)."""
    resume: str | None = None
    """The command that resumes the shard: ``apm-submit …`` for a failed one, ``scontrol …`` for a held one."""

    @property
    def failed(self) -> bool:
        return self.state in FAILED

    @property
    def complete(self) -> bool:
        """Every instance is on record (``done``, or ``done with errors``: rerun those with ``rerun=errors``)."""
        return self.state in (DONE, DONE_WITH_ERRORS)

    @property
    def active(self) -> bool:
        return self.state.upper() in scheduler.ACTIVE or self.state in {"submitted", "running?"}

    @property
    def held(self) -> bool:
        """Whether the scheduler holds the job back (pending, a hold, suspended)."""
        return self.state in HELD


def shards_of(run_dir: Path) -> list[str]:
    """Shard labels with a job folder or a records file, by count then index."""
    run = RunDir(run_dir)
    labels = {p.name for p in run.jobs.glob("shard-*-of-*")} | {p.stem for p in run.records.glob("shard-*-of-*.jsonl")}
    return sorted(labels, key=lambda s: tuple(int(x) for x in s.split("-")[1::2]))


def record_counts(run_dir: Path) -> tuple[dict[str, bool], set[str]]:
    """Per key: whether its newest record (``latest_by``) is free of errors; and the keys on record as true
    duplicates: two lines of one revision (written twice), not a rerun's or a re-measurement's line, which
    supersedes the last with the next revision (``latency.sample``, ``rerun=errors``, a resume)."""
    records = list(read_folder(RunDir(run_dir).records))
    last = {k: rec.get("error") is None for k, rec in latest_by(records, lambda rec: rec["key"]).items()}
    written = Counter((rec["key"], revision_of(rec)) for rec in records)
    return last, {key for (key, _), n in written.items() if n > 1}


def memory_errors(run_dir: Path) -> Counter:
    """Per trajectory, its session updates whose newest memory line records an error."""
    lines = latest_by(read_folder(RunDir(run_dir).memory), lambda m: (m.get("trajectory_id"), m.get("session_index")))
    return Counter(t for (t, _), m in lines.items() if m.get("error") is not None)


def missing_shards(labels: Sequence[str]) -> list[str]:
    """Shards never started, of every shard count of which none has all its shards (a rerun under
    another count that has them all plans everything)."""
    counts: dict[int, set[int]] = {}
    for label in labels:
        index, count = (int(x) for x in label.split("-")[1::2])
        counts.setdefault(count, set()).add(index)
    if any(len(indices) == count for count, indices in counts.items()):
        return []
    return [f"shard-{i}-of-{n}" for n, indices in sorted(counts.items()) for i in range(n) if i not in indices]


def _shard_keys(run_dir: Path, shard: str, plan: dict[str, Any] | None) -> list[str]:
    """The plan's keys, or (no plan yet) the keys in the shard's own records file."""
    if plan is not None:
        return plan["keys"]
    path = RunDir(run_dir).records_file(shard)
    return list(dict.fromkeys(r["key"] for r in read_jsonl(path, "records"))) if path.exists() else []


def last_job_id(events: list[dict[str, Any]]) -> str | None:
    return next((e["job_id"] for e in reversed(events) if e.get("job_id")), None)


def _ledger_state(events: list[dict[str, Any]]) -> str:
    """The job's state judged from the ledger alone (no scheduler to ask)."""
    if not events:
        return "not started"
    last = events[-1]
    if last["event"] == "submitted":
        return "submitted"
    if last["event"] == "ended":
        return "incomplete" if last.get("status") == "finished" else "interrupted"
    if last.get("host") != socket.gethostname():
        return "running?"
    try:
        os.kill(int(last["pid"]), 0)
    except (ProcessLookupError, PermissionError, TypeError, ValueError):
        return "died"
    return "running"


def _eta(events: list[dict[str, Any]], done: int, total: int | None, now: float) -> float | None:
    """Seconds left at the rate of the current attempt (records since its start ÷ time since)."""
    started = next((e for e in reversed(events) if e["event"] == "started"), None)
    if started is None or total is None or done >= total:
        return None
    made = done - started.get("on_record", 0)
    elapsed = now - started["time"]
    return (total - done) * elapsed / made if made > 0 and elapsed > 0 else None


def shard_status(root: Path, run_dir: Path, shard: str, last: dict[str, bool], duplicated: set[str],
                 job_states: dict[str, str] | None, now: float, failed_updates: Counter | None = None) -> ShardStatus:
    """The status of one shard from its records, plan, memory lines, ledger and (if known) the
    scheduler's states."""
    plan = ledger.read_plan(run_dir, shard)
    events = ledger.read_events(run_dir, shard)
    keys = _shard_keys(run_dir, shard, plan)
    done = sum(1 for k in keys if k in last)
    total = plan["instances"] if plan is not None else None
    job_id = last_job_id(events)
    sched = (job_states or {}).get(job_id or "")
    errors = sum(1 for k in keys if last.get(k) is False)
    mem_errors = sum((failed_updates or Counter())[t] for t in (plan or {}).get("trajectories", ()))
    if total is not None and done >= total:
        state = DONE_WITH_ERRORS if errors or mem_errors else DONE
    elif _finished_try(plan, events, sched):
        state = PARTIAL
    elif sched is not None and sched != "COMPLETED":
        state = sched.lower()
    elif sched == "COMPLETED":
        state = "incomplete"
    elif job_states is not None and events and events[-1]["event"] == "submitted":
        state = "lost"  # submitted, but SLURM no longer knows the job
    else:
        state = _ledger_state(events)
    eta = _eta(events, done, total, now) if state == "running" else None
    return ShardStatus(
        run=_run_name(root, run_dir), shard=shard, state=state, done=done, total=total, errors=errors,
        duplicates=sum(1 for k in keys if k in duplicated), job_id=job_id, eta_s=eta, memory_errors=mem_errors,
        population=(plan or {}).get("population"),
    )


def _finished_try(plan: dict[str, Any] | None, events: list[dict[str, Any]], sched: str | None) -> bool:
    """Whether the shard's last job ran a subset of its plan and finished it (its plan ``selected`` fewer)."""
    if plan is None or plan.get("selected") is None or plan["selected"] >= plan["instances"]:
        return False
    last = events[-1] if events else {}
    return last.get("event") == "ended" and last.get("status") == "finished" and sched in (None, "COMPLETED")


def _run_name(root: Path, run_dir: Path) -> str:
    return str(run_dir.relative_to(root)) if run_dir != root else "."


def sweep_status(root: Path) -> list[ShardStatus]:
    """Every shard of every run at or below ``root`` (:func:`apm.records.rundir.find_runs`), shards of its
    shard count never started included."""
    root = Path(root).resolve()
    runs = find_runs([root]).paths
    pairs = [(d, s) for d in runs for s in shards_of(d)]
    job_states = scheduler.states(last_job_id(ledger.read_events(d, s)) or "" for d, s in pairs)
    now = time.time()
    out = []
    for run_dir in runs:
        last, duplicated = record_counts(run_dir)
        failed_updates = memory_errors(run_dir)
        shards = shards_of(run_dir)
        rows = [shard_status(root, run_dir, s, last, duplicated, job_states, now, failed_updates) for s in shards]
        population = max((r.population for r in rows if r.population is not None), default=None)
        rows += [ShardStatus(_run_name(root, run_dir), s, MISSING, 0, None, 0, 0, None, None, population=population)
                 for s in missing_shards(shards)]
        out += [(run_dir, r) for r in rows]
    reasons = scheduler.reasons(r.job_id or "" for _, r in out if r.held or r.failed)
    return [explained(run_dir, r, reasons) if r.held or r.failed else r for run_dir, r in out]


def explained(run_dir: Path, row: ShardStatus, reasons: dict[str, str]) -> ShardStatus:
    """``row`` with what a user needs of a failed or held shard: the scheduler's reason, the last error
    line of its job's log (else of its ledger), that log, and the command that resumes it."""
    events = ledger.read_events(run_dir, row.shard)
    logs = [p for p in _logs(events) if p.is_file()]
    found = next(((p, line) for p in logs if (line := last_error_line(p)) is not None), None)
    ended: dict[str, Any] = next((e for e in reversed(events) if e["event"] == "ended"), {})
    reason = reasons.get(row.job_id or "")
    return replace(row, reason=reason, last_error=found[1] if found else ended.get("error"),
                   log=str(found[0] if found else logs[0]) if logs else None,
                   resume=_resume(row, reason, _overrides(run_dir, row.shard, events)))


def _logs(events: list[dict[str, Any]]) -> list[Path]:
    """The logs of the shard's last job, likeliest to hold its error first: the stderr its runner recorded
    (``started``), then submitit's stderr and stdout beside the log ``apm-submit`` recorded."""
    started = next((e.get("log") for e in reversed(events) if e["event"] == "started"), None)
    submitted = next((e.get("log") for e in reversed(events) if e["event"] == "submitted"), None)
    found = [Path(started)] if started else []
    if submitted:
        found += [Path(submitted).with_name(Path(submitted).name.replace("_log.out", "_log.err")), Path(submitted)]
    return list(dict.fromkeys(found))


def last_error_line(log: Path) -> str | None:
    """The last line near the end of ``log`` that says something went wrong (:data:`ERROR_LINE`), stripped."""
    with open(log, "rb") as f:
        f.seek(max(0, f.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
        lines = f.read().decode(errors="replace").splitlines()
    return next((line.strip() for line in reversed(lines) if ERROR_LINE.search(line)), None)


def _overrides(run_dir: Path, shard: str, events: list[dict[str, Any]]) -> list[str] | None:
    """The overrides the shard's last job was started or submitted with; for a shard never started, those of
    a shard of the same count with its ``shard.index`` put right."""
    own = next((e["overrides"] for e in reversed(events) if e.get("overrides")), None)
    if own is not None:
        return own
    index, count = (int(x) for x in shard.split("-")[1::2])
    for sibling in shards_of(run_dir):
        if sibling.endswith(f"-of-{count}") and (found := next(
                (e["overrides"] for e in reversed(ledger.read_events(run_dir, sibling)) if e.get("overrides")), None)):
            return [o for o in found if o.split("=", 1)[0] != "shard.index"] + [f"shard.index={index}"]
    return None


def _resume(row: ShardStatus, reason: str | None, overrides: list[str] | None) -> str | None:
    """What resumes the shard: releasing a job held back (``BeginTime`` after a requeue, a user's hold), or
    for a failed shard ``apm-submit`` with its overrides (what is on record is skipped)."""
    if row.held and row.job_id:
        if reason == "BeginTime":
            return f"scontrol update JobId={row.job_id} StartTime=now"
        if row.state == "requeue_hold" or reason == "JobHeldUser":
            return f"scontrol release {row.job_id}"
        return None  # waiting for resources or priority: nothing to do
    return f"apm-submit {shlex.join(overrides)}" if row.failed and overrides else None


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def render(rows: list[ShardStatus]) -> str:
    """A table per shard and a one-line summary of the sweep."""
    w = max([len(r.run) for r in rows] + [3])
    lines = [f"{'run':<{w}} {'shard':<14} {'state':<16} {'done/total':>12} {'errors':>6} {'mem err':>7} "
             f"{'dup':>4} {'job':>10} {'eta':>8}"]
    for r in rows:
        shown_total = "?" if r.total is None else str(r.total)
        lines.append(f"{r.run:<{w}} {r.shard:<14} {r.state:<16} {f'{r.done}/{shown_total}':>12} {r.errors:>6} "
                     f"{r.memory_errors:>7} {r.duplicates:>4} {r.job_id or '-':>10} {_clock(r.eta_s):>8}")
    lines += [line for r in rows for line in _details(r)]
    states = Counter(r.state for r in rows)
    done, total = sum(r.done for r in rows), sum(r.total or 0 for r in rows)
    etas = [r.eta_s for r in rows if r.eta_s is not None]
    lines.append(f"{len(rows)} shards: " + ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
                 + f" · {done}/{total} instances · {sum(r.errors for r in rows)} errors"
                 + f" · {sum(r.memory_errors for r in rows)} memory-update errors"
                 + f" · whole plan {done}/{_whole_plan(rows)}"
                 + f" · ETA {_clock(max(etas)) if etas else '-'}")
    return "\n".join(lines)


def _details(row: ShardStatus) -> list[str]:
    """Below the table, for a failed or held shard: its reason, last error line, log and resume command."""
    if not (row.failed or row.held):
        return []
    said = [("reason", row.reason and f"{row.reason} (the scheduler's)"), ("last error", row.last_error),
            ("log", row.log), ("resume", row.resume)]
    job = f" (job {row.job_id})" if row.job_id else ""
    return [f"{row.run} {row.shard}: {row.state}{job}"] + [f"  {f'{k}:':<11} {v}" for k, v in said if v]


def _whole_plan(rows: list[ShardStatus]) -> str:
    """Instances of every run's whole plan (its plans' ``population``), '?' when a run's is unknown."""
    by_run: dict[str, list[ShardStatus]] = {}
    for r in rows:
        by_run.setdefault(r.run, []).append(r)
    totals = []
    for mine in by_run.values():
        population = max((r.population for r in mine if r.population is not None), default=None)
        whole = all(r.total is not None for r in mine)
        totals.append(population if population is not None else sum(r.total or 0 for r in mine) if whole else None)
    return "?" if any(t is None for t in totals) else str(sum(t for t in totals if t is not None))
