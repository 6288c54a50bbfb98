"""Judge the gate-passing adaptive records of run directories; write ``judgements/*.jsonl``.

Records are never rewritten. A judgement is cached by (judge model, rubric version, instance key,
response digest): a judgement on record for that cache key is not asked again, so a second run makes
no model call and a rubric, response or judge model change re-judges. The judge model is the model
id the judge was configured with (:func:`judge_model`), never its display name, so renaming a judge
reuses its judgements and pointing a name at another model does not. An invalid reply is retried up to
``invalid_retries`` times; a judgement that still fails is written with ``status: failed`` and
``score: null`` (missing, never 0) and ``failure: invalid_reply`` (cached like a success), or
``failure: backbone`` when the judge could not be reached after the backbone's own retries — those
are asked again on the next run, so an outage costs a rerun, not the scores.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apm.backbones.base import GenerationSettings, Message, Request
from apm.data.fingerprint import release_fingerprint
from apm.data.release import load_release
from apm.judge.rubric import (
    JUDGE_SYSTEM,
    REPLY_SCHEMA,
    RUBRIC_VERSION,
    check_reply,
    judge_prompt,
    probe_reference,
)
from apm.records.atomic import read_run_config
from apm.records.jsonl import JsonlAppender, latest_by, latest_records, read_folder
from apm.records.judging import needs_judge, response_digest
from apm.records.naming import slug

log = logging.getLogger(__name__)


def judge_model(judge: Any) -> str:
    """The judge's model identity: its configured model id (``model``, else ``model_path``), or for a
    judge without a model (``gate_only``) its class, ``module.QualName``."""
    configured = getattr(judge, "model", None) or getattr(judge, "model_path", None)
    return str(configured) if configured else f"{type(judge).__module__}.{type(judge).__qualname__}"


def cache_key(model: str, key: str, output: str) -> str:
    """Identity of a judgement: judge model identity, rubric version, instance key, response digest."""
    return hashlib.sha256(json.dumps([model, RUBRIC_VERSION, key, response_digest(output)]).encode()).hexdigest()


class ReleaseChanged(ValueError):
    """The release lost candidates that records to be judged name: their references are gone."""


@dataclass
class JudgeStats:
    judged: int = 0
    cached: int = 0
    failed: int = 0
    calls: int = 0
    by_run: dict[str, int] = field(default_factory=dict)


class JudgeStage:
    """Judges run directories with one judge backbone."""

    def __init__(self, judge: Any, concurrency: int = 8, invalid_retries: int = 2, max_tokens: int = 512,
                 only_keys: set[str] | None = None, file_suffix: str = ""):
        """``only_keys``/``file_suffix``: a shard job judging inline takes only its own instances and
        writes its own file, so concurrent shards never judge the same probe or share a file."""
        self.judge = judge
        self.model = judge_model(judge)
        self.only_keys = only_keys
        self.file_suffix = file_suffix
        self.concurrency = concurrency
        self.invalid_retries = invalid_retries
        self.settings = GenerationSettings(max_tokens=max_tokens, temperature=0.0, json_output=True,
                                           json_schema=REPLY_SCHEMA)
        self.stats = JudgeStats()

    async def run(self, run_dirs: list[Path]) -> JudgeStats:
        sem = asyncio.Semaphore(self.concurrency)
        for run_dir in run_dirs:
            await self._run_dir(run_dir, sem)
        return self.stats

    async def _run_dir(self, run_dir: Path, sem: asyncio.Semaphore) -> None:
        saved = read_run_config(run_dir)
        root = saved["config"]["dataset"]["root"]
        release = load_release(root, check_videos=False)
        candidates = {(c.trajectory_id, c.candidate_id): c for c in release.candidates}
        lines = list(read_folder(run_dir / "judgements"))
        done = {j.get("cache_key") for j in lines if j.get("failure") != "backbone"}
        newest = latest_by(lines, lambda j: j["key"])
        todo = [r for r in latest_records(run_dir / "records").values()
                if needs_judge(r) and (self.only_keys is None or r["key"] in self.only_keys)]
        fresh = [r for r in todo if cache_key(self.model, r["key"], r["output"]) not in done]
        self.stats.cached += len(todo) - len(fresh)
        lost = sorted({r["candidate_id"] for r in fresh if (r["trajectory_id"], r["candidate_id"]) not in candidates})
        if lost:
            raise ReleaseChanged(f"{run_dir}: the release at {root} no longer has {len(lost)} candidate(s) its records "
                                 f"name ({', '.join(lost[:3])}); judge with the run's release")
        if saved.get("release_fingerprint") not in (None, now := release_fingerprint(root)):
            log.warning("%s: the release at %s changed since the run (fingerprint %s, now %s): judging against "
                        "its annotations as they are now", run_dir, root, saved["release_fingerprint"], now)
        out = JsonlAppender(run_dir / "judgements" / f"{slug(self.judge.name)}{self.file_suffix}.jsonl")
        try:
            async def one(rec: dict[str, Any]) -> None:
                async with sem:
                    cand = candidates[(rec["trajectory_id"], rec["candidate_id"])]
                    judgement = await self._judge(rec, cand.fields)
                out.append(judgement, supersedes=newest.get(rec["key"]))
            await asyncio.gather(*(one(r) for r in fresh))
        finally:
            out.close()
        self.stats.by_run[str(run_dir)] = len(fresh)

    async def _judge(self, rec: dict[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
        prompt = judge_prompt(rec["task"], rec["polarity"], rec["probe_time"],
                              probe_reference(fields, rec["task"], rec["probe_id"]), rec["output"])
        request = Request((Message.text("system", JUDGE_SYSTEM), Message.text("user", prompt)),
                          self.settings, request_id=f"judge:{rec['key']}")
        errors: list[str] = []
        began = time.perf_counter()
        verdict = snapshot = None
        for _ in range(1 + self.invalid_retries):
            self.stats.calls += 1
            response = await self.judge.generate(request)
            snapshot = response.model or snapshot
            if not response.ok:
                errors.append(f"backbone: {response.error}")
                break
            try:
                verdict = check_reply(response.text)
                break
            except ValueError as e:
                errors.append(f"invalid reply: {e}")
        self.stats.judged += verdict is not None
        self.stats.failed += verdict is None
        return {
            "key": rec["key"],
            "run": rec["run"],
            "judge": self.judge.name,
            "judge_model": self.model,
            "judge_snapshot": snapshot,
            "rubric_version": RUBRIC_VERSION,
            "response_sha256": response_digest(rec["output"]),
            "cache_key": cache_key(self.model, rec["key"], rec["output"]),
            "status": "ok" if verdict else "failed",
            "score": verdict.score if verdict else None,
            "criterion_checks": verdict.criterion_checks if verdict else None,
            "critical_issues": verdict.critical_issues if verdict else None,
            "justification": verdict.justification if verdict else None,
            "error": None if verdict else "; ".join(errors),
            "failure": None if verdict else ("backbone" if errors[-1].startswith("backbone") else "invalid_reply"),
            "attempts": len(errors) + (verdict is not None),
            "judge_s": time.perf_counter() - began,
        }
