"""``apm-check-system``'s work: the contract checklist (docs/streaming-systems.md) run on one memory
config over a tiny synthetic release — a full run observed, a run of a subset of tasks, lost records
redone, a run killed mid-session and rerun — one :class:`Result` per check."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from pathlib import Path

from apm.check import CHECKS, checks
from apm.check.backbone import Choice, choose
from apm.check.checks import Result, verdict
from apm.check.runs import (
    Outcome,
    RunSpec,
    Subject,
    child,
    finish,
    kill_at,
    record_lines,
    run_here,
    runs_below,
    spec_of,
)
from apm.check.unseen import not_checked
from apm.data.release import load_release
from apm.records.jsonl import read_folder
from apm.records.model import REFUSED
from apm.records.rundir import RunDir
from apm.runner.app import shard_plan
from apm.runner.config import ConfigError
from apm.synth import generate

SUBSET_TASKS = ("ER", "RCR")
"""The tasks of the non-mutating check's second run: its shared instances must be answered as in the full run."""
KILL_DELAY_S = 0.05
"""How much longer each answer takes in the killed runs, so a kill lands inside a session."""
KILLS = 2
"""Kills tried (each halfway through what is left) until one lands inside a session."""
NOT_STREAMED = "a memory protocol is not fed the stream (the runner selects its frames: tests/test_causality.py)"


def _lost(run_dir: Path) -> set[str]:
    """Drop every third record line after the first third of the run (later sessions lose records); their keys."""
    lost: set[str] = set()
    for path in RunDir(run_dir).files("records"):
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        start = len(lines) // 3
        lost |= {json.loads(x)["key"] for x in lines[start::3]}
        path.write_text("".join(lines[:start] + [x for i, x in enumerate(lines[start:]) if i % 3]), encoding="utf-8")
    return lost


def resume(spec: RunSpec, full: Outcome, work: Path) -> Result:
    """Records lost from the full run are redone by rerunning it: only they are asked again (a streaming
    system replays their sessions), with the same answers and exported states."""
    lost = _lost(full.run_dir)
    if not lost:
        return Result("resume", "SKIP", f"the full run has too few records ({len(full.records)}) to lose any")
    again = run_here(spec, work / "resume.log")
    problems = [f"the rerun after losing records stopped: {again.error}"] if again.error else []
    problems += checks.same_outcome(full.records, again.records, full.lines, again.lines, "losing records")
    asked = {e["key"] for e in again.events if e["event"] == "answer"}
    if spec.streaming and asked != lost:
        problems.append(f"the rerun asked {len(asked)} instances again, {len(lost)} were lost "
                        f"({len(asked - lost)} asked that were on record)")
    return verdict("resume", problems, f"{len(lost)} lost records redone, same outputs and state digests")


def _cut_mid_session(out: Path) -> bool:
    """Whether a killed run left a session with records and no memory line (its in-session state lost)."""
    runs = runs_below(out)
    def sessions(folder: Callable[[RunDir], Path]) -> set[tuple[str, str, str]]:
        return {(x["trajectory_id"], x["day_id"], x["session_id"]) for r in runs for x in read_folder(folder(r))}
    return bool(sessions(lambda r: r.records) - sessions(lambda r: r.memory))


def sigkill(spec: RunSpec, full: Outcome, work: Path) -> Result:
    """A run killed (``SIGKILL``) mid-session and rerun ends with the records and memory lines of the
    uninterrupted run."""
    out = work / "killed"
    killed = spec.elsewhere(out, delay_s=KILL_DELAY_S)
    log = work / "killed.log"
    cut = False
    for _ in range(KILLS):
        held = record_lines(out)
        if kill_at(child(killed, log), out, held + max(1, (len(full.records) - held) // 2)) and _cut_mid_session(out):
            cut = True
            break
    if not cut:
        return Result("sigkill determinism", "SKIP", "no kill landed inside a session (the run was too fast)")
    error = finish(child(killed, log))
    (run,) = runs_below(out)
    again = Outcome.read(run.path, log, error, spec.release)
    problems = [f"the rerun after the kill failed: {error}"] if error else []
    problems += checks.same_outcome(full.records, again.records, full.lines, again.lines, "a SIGKILL mid-session")
    return verdict("sigkill determinism", problems, "killed mid-session and rerun: the uninterrupted run's "
                   "records and memory lines")


OTHER_RUNS = ("non-mutating answers", "resume", "sigkill determinism")
"""The checks that compare the full run with runs of their own (made only when the full run passed)."""
CUT = 200
"""How much of the full run's first problem a ``SKIP`` line repeats."""


@dataclass(frozen=True)
class Report:
    """What the command prints: the runs' backbone, each check's result, and what it cannot see."""

    using: Choice
    results: list[Result]
    unseen: list[Result]

    @property
    def lines(self) -> list[str]:
        return [self.using.line, *(r.line for r in self.results), *(r.line for r in self.unseen)]

    @property
    def ok(self) -> bool:
        """No check failed, and none was skipped because a run failed (the command's exit status 0)."""
        return all(r.ok for r in [*self.results, *self.unseen])


def _unreached(name: str, problem: str, stopped: bool) -> Result:
    """``name`` not passed because the full run failed (``problem``, its first): a ``SKIP`` that fails the command."""
    cut = problem if len(problem) <= CUT else problem[: CUT - 1] + "…"
    if stopped:
        why = "it stopped before its end, so there is nothing to check"
    elif name in OTHER_RUNS:
        why = "no run to compare it with was made"
    else:
        why = "this check found no problem in it, which is no pass on a failed run"
    return Result(name, "SKIP", f"the full run failed ({cut}): {why}", failed=True)


def check_system(config: str, overrides: list[str], work: Path, release: Path | None = None,
                 only: Collection[str] = CHECKS, backbone: str | None = None) -> Report:
    """The checks named in ``only`` (default every one) on ``config`` (with ``overrides``: search path,
    settings …) over ``release`` (default a tiny synthetic release made in ``work``, where every run goes),
    on ``backbone`` (default: chosen from what the system declares, :func:`apm.check.backbone.choose`);
    a run only a check left out needs is not made. A check that reads a full run that failed never passes:
    it reports what it found wrong, else a ``SKIP`` saying so."""
    unknown = sorted(set(only) - set(CHECKS))
    if unknown:
        raise ConfigError(f"no check {', '.join(map(repr, unknown))} (the checks: {', '.join(CHECKS)})")
    subject = Subject.of(config, overrides)
    using, rest = choose(backbone, subject.overrides, subject.declaration, work)
    subject = replace(subject, overrides=[*using.overrides, *rest])
    root = release or work / "release"
    spec = spec_of(subject, root, work / "full", work / "frames")
    spec.config()  # every override composes (or is refused in one line) before anything is made
    work.mkdir(parents=True, exist_ok=True)
    using.prepare()
    if release is None:
        generate(root, seed=1, scale="tiny")
    instances = {i.key: i for i in shard_plan(spec.config(), load_release(root)).run_instances}
    full = run_here(spec, work / "full.log")
    n = len(instances)
    problems = checks.answered(instances.values(), full.records, full.lines, full.error)
    results: dict[str, Callable[[], Result]] = {
        "run": lambda: verdict("run", problems, f"{n} instances answered, {len(full.lines)} sessions exported")}
    apart: dict[str, Result] = {}  # the checks that do not apply to this subject
    if subject.streaming:
        results |= {
            "pixel causality": lambda: verdict(
                "pixel causality", checks.pixel_causality(instances, full.events, full.records),
                f"each of {n} answers came after its probe second's frame, before any later one (on pixels)"),
            "order": lambda: verdict("order", checks.frame_order(load_release(root), full.events),
                                     "every replay fed its session's frames once each, in order, one per second"),
            "sigkill determinism": lambda: sigkill(spec, full, work),
        }
    else:
        apart |= {"pixel causality": Result("pixel causality", "SKIP", NOT_STREAMED),
                  "order": Result("order", "SKIP", NOT_STREAMED),
                  "sigkill determinism": Result(
                      "sigkill determinism", "SKIP", "a memory protocol keeps no in-session state (its state "
                      "is on disk after each session; resume covers it)")}
    results |= {
        "non-mutating answers": lambda: non_mutating(spec, full, work),
        "EA restriction": lambda: verdict("EA restriction", checks.ea_restriction(instances, full.events, full.records),
                                          "restricted instances answered from their visible sessions alone"),
        "state bytes": lambda: verdict(
            "state bytes", checks.state_bytes(RunDir(full.run_dir).memory_states, full.lines, full.events),
            "each state folder holds what its memory lines measured"),
        "schema": lambda: verdict("schema", checks.schema(checks.raw_lines(RunDir(full.run_dir).records),
                                                          checks.raw_lines(RunDir(full.run_dir).memory),
                                                          subject.declaration),
                                  "records and memory lines validate; the declarations are the class's"),
        "resume": lambda: resume(spec, full, work),  # last of those reading the full run: it changes its records
    }
    stopped = full.error is not None and any(k not in full.records for k in instances)  # not the run's end refusing
    refused = full.error is not None and full.error.startswith(REFUSED)  # the writer refused a line: schema fails
    done: dict[str, Result] = {}
    for name in sorted(set(only), key=_resume_last):
        if name in apart:
            done[name] = apart[name]
        elif name == "run" or not problems:
            done[name] = results[name]()
        elif name == "schema" and refused:
            done[name] = verdict(name, [str(full.error)], "")
        elif stopped or name in OTHER_RUNS:
            done[name] = _unreached(name, problems[0], stopped)
        else:
            found = results[name]()
            done[name] = found if found.status == "FAIL" else _unreached(name, problems[0], stopped=False)
    return Report(using, [done[name] for name in CHECKS if name in done], not_checked(subject))


def _resume_last(name: str) -> int:
    """Checks run in printing order, but resume (it drops the full run's records) after every other."""
    return len(CHECKS) if name == "resume" else CHECKS.index(name)


def non_mutating(spec: RunSpec, full: Outcome, work: Path) -> Result:
    """A run asked only :data:`SUBSET_TASKS` answers their instances as the full run did."""
    part = run_here(spec.elsewhere(work / "subset", extra=[f"dataset.tasks=[{','.join(SUBSET_TASKS)}]"]),
                    work / "subset.log")
    shared = len(set(full.records) & set(part.records))
    problems = [f"the run of {'+'.join(SUBSET_TASKS)} stopped: {part.error}"] if part.error else []
    return verdict("non-mutating answers", problems + checks.non_mutating(full.records, part.records),
                   f"{shared} instances of {'+'.join(SUBSET_TASKS)} answered as in the full run")
