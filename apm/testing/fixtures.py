"""Synthetic run directories in the runner's output contract, for tests, the notebook and the bench.

:func:`record`, :func:`judgement` and :func:`memory_line` build one line with every contract field
(override any of them); :func:`synthetic_run` writes a realistic random run: 12 tasks plus EA in the
paper's proportions, adaptive candidates with one positive and several negative probes, judgements
for gate-passing probes, and per-session memory lines.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from apm.data.tasks import ADAPTIVE, CROSS_SESSION, EA, FAMILY_OF, MCQA_OPTIONS, PERCEPTION
from apm.records.declaration import Declaration
from apm.records.judging import signed
from apm.records.model import InstanceRecord, named
from apm.records.rundir import RunDir
from apm.records.version import FORMAT_VERSION

Line = dict[str, Any]


GENERAL_METHOD = {"memory": Declaration("general", streaming=False, persistent=True),
                  "backbone": Declaration("general")}
"""What a general protocol on a general video model declares (the default of :func:`run_info`)."""


def run_info(
    memory: str = "raw_video", backbone: str = "Qwen3-VL-8B-Instruct", dataset: str = "apm",
    declarations: dict[str, Declaration | None] | None = None,
) -> Line:
    """The ``run`` block; the config hash is derived from the three names; ``declarations`` (default
    :data:`GENERAL_METHOD`) are what the memory and backbone classes declare."""
    digest = hashlib.sha256(f"{dataset}/{memory}/{backbone}".encode()).hexdigest()[:12]
    declared = GENERAL_METHOD if declarations is None else declarations
    return {"dataset": dataset, "memory": memory, "backbone": backbone, "config_hash": digest,
            "release_fingerprint": None, "code": None, "model": None, "choices": None, "overrides": None,
            "capabilities": None,
            "declarations": {"writer": None} | {part: d.as_record() if d else None for part, d in declared.items()}}


def latency(ttft_s: float | None = 1.0, total_s: float | None = 2.0, rtf: float | None = 0.01) -> Line:
    """A complete ``latency`` block (prefix 300 s, measured in isolation: the only latency tables use)."""
    return {"prep_s": 0.1, "ttft_s": ttft_s, "total_s": total_s, "prefix_s": 300.0, "rtf": rtf,
            "engine_ttft_s": ttft_s, "engine_total_s": total_s, "elapsed_s": total_s,
            "encode_s": None, "mode": "isolated", "in_flight": 1, "concurrency": 1, "prefix_caching": None,
            "cached_tokens": None, "ttft_from": None, "update_s": None, "observe_s": None}


def record(task: str, candidate: str, probe: str = "query", trajectory: str = "T1", **fields: Any) -> Line:
    """One record with every field a line must have (:class:`apm.records.model.InstanceRecord`); defaults
    describe a correct, well-formed MCQA answer; an override that is no field of the model is refused."""
    named(InstanceRecord, *fields)
    line: Line = {
        "format_version": FORMAT_VERSION,
        "key": f"{trajectory}/{candidate}/{probe}",
        "run": run_info(),
        "trajectory_id": trajectory,
        "day_id": "DAY1",
        "session_id": "S002",
        "candidate_id": candidate,
        "task": task,
        "family": FAMILY_OF[task],
        "probe_id": probe,
        "polarity": None,
        "probe_time": "DAY1 11:05:00",
        "window_start": None,
        "evidence_available": None,
        "original_candidate_id": None,
        "correct_option": "A",
        "output": "Answer: A",
        "finish_reason": "stop",
        "parse_status": "ok",
        "parse_error": None,
        "decision": None,
        "answer": "A",
        "correct": True,
        "gate_pass": None,
        "frames": [{"session": "DAY1/S002", "offset": 10.0 * i, "wall_clock": f"DAY1 11:0{i}:00"} for i in range(4)],
        "prompt_version": "v1",
        "prompt_sha256": "0" * 64,
        "prompt": None,
        "latency": latency(),
        "tokens": {"prompt": 1000, "completion": 20},
        "truncation": None,
        "memory_bytes": 0,
        "memory_sha256": None,
        "error": None,
        "attempts": 1,
        "shard": "shard-0-of-1",
        "written_ns": 0,
        "revision": 0,
    }
    line.update(fields)
    return line


def judged_record(candidate: str, **fields: Any) -> Line:
    """A record the judge scores (:func:`record`): a positive RCR probe whose decision passed the gate."""
    adaptive = {"probe": "pos", "polarity": "positive", "decision": "INTERVENE", "answer": None, "correct": None,
                "correct_option": None, "gate_pass": True, "output": "Decision: INTERVENE"}
    return record("RCR", candidate, **{**adaptive, **fields})


def judgement(rec: Line, score: int | None, status: str = "ok", judge: str = "judge-x", **fields: Any) -> Line:
    """One judgement line for record ``rec``."""
    line: Line = {
        "format_version": FORMAT_VERSION,
        "key": rec["key"],
        "run": rec["run"],
        "judge": judge,
        "rubric_version": "1",
        "response_sha256": hashlib.sha256(str(rec["output"]).encode()).hexdigest(),
        "status": status,
        "score": score,
        "criterion_checks": {},
        "critical_issues": [],
        "justification": "",
        "error": None if status == "ok" else "unparseable judge output",
    }
    line.update(fields)
    return signed(line)


def memory_line(trajectory: str, index: int, size: int, prior_hours: float, run: Line | None = None) -> Line:
    """The memory line written after session ``index`` (0-based) of a trajectory: one state file of
    ``size`` bytes (its digest stands for content of that size)."""
    state = {f"session-{index}.bin": {"bytes": size, "sha256": hashlib.sha256(str(size).encode()).hexdigest()}}
    return {
        "format_version": FORMAT_VERSION,
        "run": run or run_info(),
        "trajectory_id": trajectory,
        "day_id": "DAY1",
        "session_id": f"S{index + 1:03d}",
        "session_index": index,
        "bytes": size,
        "prior_hours": prior_hours,
        "fast_weight_bytes": 0,
        "update_s": 0.5,
        "writer_parse_status": None,
        "writer_total_s": None,
        "error": None,
        "state": state,
        "state_sha256": hashlib.sha256(json.dumps(state, sort_keys=True, separators=(",", ":")).encode()).hexdigest(),
        "written_ns": 0,
        "revision": 0,
    }


def write_jsonl(path: Path, lines: Iterable[Line]) -> Path:
    """Write lines as JSONL (creating folders); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        for line in lines:
            f.write(orjson.dumps(line) + b"\n")
    return path


def write_run(
    root: Path, records: Iterable[Line], judgements: Iterable[Line] = (), memory: Iterable[Line] = ()
) -> Path:
    """A run dir holding one shard of each kind of line; returns ``root``."""
    write_jsonl(RunDir(root).records / "shard-0.jsonl", records)
    write_jsonl(RunDir(root).judgements / "shard-0.jsonl", judgements)
    write_jsonl(RunDir(root).memory / "shard-0.jsonl", memory)
    return root


_SHARE = {**{t: 0.055 for t in CROSS_SESSION + PERCEPTION}, **{t: 0.08 for t in ADAPTIVE}, EA: 0.05}
"""Candidate mix roughly as in the paper (Figure 4 and the EA set)."""


def _adaptive(rng: np.random.Generator, base: Line, skill: float) -> Iterator[Line]:
    """One positive and 2–5 negative probes of one adaptive candidate."""
    for i, polarity in enumerate(["positive"] + ["negative"] * int(rng.integers(2, 6))):
        right = rng.random() < skill
        want = "INTERVENE" if polarity == "positive" else "SILENT"
        decision = want if right else ("SILENT" if want == "INTERVENE" else "INTERVENE")
        answer = str(rng.choice(MCQA_OPTIONS)) if base["task"] == "ERA" and decision == "INTERVENE" else None
        gate = right and (base["task"] != "ERA" or polarity != "positive" or answer == base["correct_option"])
        yield {
            **base,
            "key": f"{base['trajectory_id']}/{base['candidate_id']}/p{i}",
            "probe_id": f"p{i}",
            "polarity": polarity,
            "decision": decision,
            "answer": answer,
            "correct": None,
            "gate_pass": gate,
            "output": f"Decision: {decision}. Reason: the scene shows what the user registered.",
        }


def synthetic_lines(rng: np.random.Generator, run: Line, trajectories: int, skill: float) -> Iterator[Line]:
    """Records of one method over ``trajectories`` trajectories of ~5 sessions and ~26 candidates."""
    tasks = list(_SHARE)
    share = np.array(list(_SHARE.values()))
    for t in range(trajectories):
        for c in range(int(rng.integers(20, 33))):
            task = str(rng.choice(tasks, p=share / share.sum()))
            avail = bool(rng.random() < 0.5) if task == EA else None
            truth = "E" if avail is False else str(rng.choice(MCQA_OPTIONS))
            answer = truth if rng.random() < skill else str(rng.choice(MCQA_OPTIONS))
            failed = rng.random() < 0.01
            base = record(
                task, f"C{c:03d}", "ea" if task == EA else "query", f"T{t:05d}", run=run, correct_option=truth,
                answer=None if failed else answer, correct=not failed and answer == truth,
                parse_status="failed" if failed else "ok", parse_error="no_answer" if failed else None,
                evidence_available=avail,
                original_candidate_id=f"C{(c + 1) % 20:03d}" if task == EA else None,
                latency=latency(float(rng.gamma(2.0, 1.5)), float(rng.gamma(3.0, 1.5)), float(rng.gamma(2.0, 0.01))),
            )
            if task in ADAPTIVE:
                yield from _adaptive(rng, base, skill)
            else:
                yield base


def synthetic_run(root: Path, run: Line, trajectories: int, seed: int = 0, skill: float = 0.6, shards: int = 1) -> Path:
    """Write a random run (records in ``shards`` files, judgements, memory) under ``root``."""
    rng = np.random.default_rng(seed)
    records = list(synthetic_lines(rng, run, trajectories, skill))
    for i in range(shards):
        write_jsonl(RunDir(root).records / f"shard-{i}.jsonl", records[i::shards])
    judged = [r for r in records if r["gate_pass"]]
    scores = rng.integers(1, 6, size=len(judged))
    write_jsonl(RunDir(root).judgements / "judge.jsonl", (judgement(r, int(s)) for r, s in zip(judged, scores)))
    sessions = [(t, i) for t in range(trajectories) for i in range(5)]
    write_jsonl(
        RunDir(root).memory / "memory.jsonl",
        (memory_line(f"T{t:05d}", i, int(4e8 * (i + 1)), 0.2 * (i + 1), run) for t, i in sessions),
    )
    return root


def _probe(
    task: str, candidate: str, probe: str, polarity: str, decision: str | None, gate: bool, **fields: Any
) -> Line:
    """An adaptive probe record."""
    return record(task, candidate, probe, polarity=polarity, decision=decision, gate_pass=gate,
                  answer=fields.pop("answer", None), correct=None, **fields)


def small_run_set(root: Path) -> Path:
    """A tiny run set whose every score is computed by hand in tests/test_reduce_metrics.py.

    ``root/main``: one method (raw_video), all 12 tasks, failed parses, a failed judgement judged again,
    an ERA probe with the wrong option, a backbone error, a shrinking and a flat memory, and a record
    superseded by a later shard. ``root/ea``: the EA set under ``restricted`` memory.
    """
    main = run_info()
    recs = [
        record("ER", "C1", answer="B", correct=False, latency=latency(50.0, None, None)),  # superseded below
        record("ER", "C2", answer="B", correct=False, latency=latency(None, None, None)),
        record("ER", "C3", answer=None, correct=None, parse_status="failed", parse_error="several_options",
               output="A or B"),
        record("ER", "C4", error="timeout", parse_status=None, answer=None, correct=None, output="",
               latency=latency(100.0, None, None)),
        record("EST", "S1"), record("TR", "Q1", answer="B", correct=False),
        record("ACR", "A1"), record("CT", "K1", answer="C", correct=False), record("OCR", "O1"), record("STU", "U1"),
        _probe("ERA", "E1", "p", "positive", "INTERVENE", False, answer="B"),
        _probe("ERA", "E1", "n1", "negative", "SILENT", True),
        _probe("ERA", "E1", "n2", "negative", "INTERVENE", False),
        _probe("ERA", "E2", "p", "positive", "INTERVENE", True, answer="A"),
        _probe("RCR", "R1", "n1", "negative", "SILENT", True),
        _probe("RCR", "R1", "n2", "negative", "SILENT", True),
        _probe("RCR", "R2", "p", "positive", "INTERVENE", True),
        _probe("RCR", "R2", "n", "negative", "SILENT", True),
        _probe("MPA", "M1", "p", "positive", "SILENT", False),
        _probe("MPA", "M1", "n", "negative", "SILENT", True),
        _probe("PRM", "P1", "p1", "positive", "INTERVENE", True),
        _probe("PRM", "P1", "p2", "positive", None, False, parse_status="failed", parse_error="no_decision"),
        _probe("PRM", "P1", "n", "negative", "SILENT", True),
        _probe("TPG", "T1", "p", "positive", "INTERVENE", True),
        _probe("TPG", "T1", "n", "negative", "INTERVENE", False),
    ]
    later = [record("ER", "C1", latency=latency(3.0, None, None))]
    by_key = {r["key"]: r for r in recs}
    judged = [("ERA", "E1", "n1", 4), ("ERA", "E2", "p", 5), ("RCR", "R1", "n1", 3), ("RCR", "R2", "p", 5),
              ("RCR", "R2", "n", 5),
              ("MPA", "M1", "n", 2), ("PRM", "P1", "p1", 4), ("PRM", "P1", "n", 4), ("TPG", "T1", "p", 1)]
    judgements = [judgement(by_key[f"T1/{c}/{p}"], s) for _, c, p, s in judged]
    judgements.append(judgement(by_key["T1/R1/n2"], None, status="failed"))
    judgements.append(judgement(by_key["T1/R1/n2"], 3))  # the failure, judged again by the next apm-judge
    sizes = {"T1": [(100, 0.5), (300, 1.0), (200, 1.5), (999, 2.0)], "T2": [(50, 0.25), (50, 0.5), (10_000, 1.0)],
             "T3": [(7, 0.1)]}
    memory = [memory_line(t, i, b, h, main) for t, states in sizes.items() for i, (b, h) in enumerate(states)]
    write_run(root / "main", recs, judgements, memory)
    write_jsonl(RunDir(root / "main").records / "shard-1.jsonl", later)
    ea_run = run_info(memory="restricted", dataset="apm-ea")
    ea = [
        record(EA, "X1", "ea", run=ea_run, evidence_available=True, original_candidate_id="C1"),
        record(EA, "X2", "ea", run=ea_run, evidence_available=True, original_candidate_id="C2", answer="B",
               correct=False),
        record(EA, "X3", "ea", run=ea_run, evidence_available=False, original_candidate_id="S1", answer="E",
               correct_option="E"),
        record(EA, "X4", "ea", run=ea_run, evidence_available=False, original_candidate_id="C99", correct_option="E",
               correct=False),
        record(EA, "X5", "ea", run=ea_run, evidence_available=False, answer="E", correct_option="E"),
    ]
    write_run(root / "ea", ea)
    return root
