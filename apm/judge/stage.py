"""Judge the gate-passing adaptive records of run directories; write ``judgements/*.jsonl``.

Records are never rewritten. A judgement is cached by (judge model, rubric version, instance key,
response digest) and checked against the digest of what the judge is sent (``inputs_sha256``: the
judge model, rubric version, system line, prompt and settings) and against its own content digest
(``content_sha256``, :mod:`apm.records.judging`): only an ``ok`` judgement that verifies all three is
used, so a second run makes no model call and a rubric, response, annotation or judge model change,
or an edited line, re-judges. The judge model is the model id the judge was configured with
(:func:`judge_model`), never its display name. An invalid reply (not the rubric's JSON, or longer than
:data:`~apm.judge.rubric.MAX_REPLY_CHARS`) is retried up to ``invalid_retries`` times; a judgement that
still fails is written with ``status: failed`` and ``score: null`` (unjudged, never 0) and is asked
again on the next run, whatever failed. The judge's key is registered for redaction before any I/O;
the endpoint is preflighted before the first call and ``fail_fast`` consecutive auth, not-found or
connection failures stop the stage with one line.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apm.backbones.base import Backbone, BackboneLike, GenerationSettings, Message, Request, Response, as_backbone
from apm.backbones.fail_fast import FailFast
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
from apm.live.progress import Progress, Unit, stage_progress
from apm.records.atomic import read_run_config
from apm.records.declaration import declared
from apm.records.jsonl import JsonlAppender, latest_records, read_folder
from apm.records.judging import needs_judge, response_digest, signed, verifies
from apm.records.lock import LockHeld, WriterLock, holder_line, this_process
from apm.records.model import JudgementLine
from apm.records.redact import register_env_secrets
from apm.records.rundir import RunDir
from apm.records.select import latest_by
from apm.records.version import FORMAT_VERSION

log = logging.getLogger(__name__)


def judge_model(judge: Backbone) -> str:
    """The judge's model identity: its configured model id (:attr:`Backbone.model_id`), or for a judge
    without a model (``gate_only``) its class, ``module.QualName``."""
    return judge.model_id or judge.implementation


def cache_key(model: str, key: str, output: str) -> str:
    """Identity of a judgement: judge model identity, rubric version, instance key, response digest."""
    return hashlib.sha256(json.dumps([model, RUBRIC_VERSION, key, response_digest(output)]).encode()).hexdigest()


class ReleaseChanged(ValueError):
    """The release lost candidates that records to be judged name: their references are gone."""


class JudgeBusy(RuntimeError):
    """Another ``apm-judge`` is judging the run directory; the message is one line."""


@contextmanager
def judging(run_dir: Path) -> Iterator[None]:
    """Hold the lock one ``apm-judge`` keeps on a run directory while it judges it
    (``locks/apm-judge.lock``), or raise :class:`JudgeBusy` naming who holds it."""
    lock = WriterLock(RunDir(run_dir).judge_lock, {**this_process(), "command": "apm-judge"})
    try:
        lock.acquire()
    except LockHeld as held:
        raise JudgeBusy(f"{run_dir} is being judged by another apm-judge ({holder_line(held.holder)}); "
                        "not starting a second one") from None
    try:
        yield
    finally:
        lock.release()


def inputs_digest(model: str, request: Request) -> str:
    """Digest of everything the judge is asked: its model identity, the rubric version, each message's
    text and the generation settings (a changed annotation or cutoff changes it)."""
    texts = [[m.role, [getattr(p, "text", None) for p in m.parts]] for m in request.messages]
    settings = request.settings
    asked = [model, RUBRIC_VERSION, texts, settings.max_tokens, settings.temperature, settings.json_output]
    return hashlib.sha256(json.dumps(asked, ensure_ascii=False).encode()).hexdigest()


@dataclass
class JudgeStats:
    judged: int = 0
    cached: int = 0
    failed: int = 0
    calls: int = 0
    rejected: int = 0
    """Judgement lines on record that did not verify (edited, or of other inputs): redone."""
    by_run: dict[str, int] = field(default_factory=dict)


def summary_line(judge: Any, stats: JudgeStats) -> str:
    """What ``apm-judge`` says it did; the requests of a judge that declares itself a reference (it calls no
    model: the gate-only judge) are not called model calls."""
    found = declared(judge)
    asked = (f"{stats.calls} replies, no model called" if found is not None and found.family == "reference"
             else f"{stats.calls} model calls")
    return (f"apm-judge ({judge.name}): {stats.judged} judged, {stats.failed} failed (unjudged: asked again on the "
            f"next run), {stats.cached} already judged, {stats.rejected} on record not verifying (judged again), "
            f"{asked}")


class JudgeStage:
    """Judges run directories with one judge backbone."""

    def __init__(self, judge: BackboneLike, concurrency: int = 8, invalid_retries: int = 2, max_tokens: int = 512,
                 only_keys: set[str] | None = None, file_suffix: str = "", fail_fast: int = 3,
                 preflight: bool = True, exclusive: bool = False, progress: bool = True):
        """``only_keys``/``file_suffix``: a shard job judging inline takes only its own instances and
        writes its own file, so concurrent shards never judge the same probe or share a file.
        ``fail_fast``: consecutive endpoint failures that stop the stage (0: never); ``preflight``:
        check the judge's endpoint before its first call (as ``apm-run preflight=true`` does);
        ``exclusive``: hold each run directory's judge lock while judging it (``apm-judge``: a second
        one is refused), taken after the release checks so a refused directory gets nothing written;
        ``progress``: report the judgements on stderr as they are made (:func:`stage_progress`)."""
        self.judge = as_backbone(judge)
        register_env_secrets([self.judge.api_key_env])  # before any request or line
        self.model = judge_model(self.judge)
        self.only_keys = only_keys
        self.file_suffix = file_suffix
        self.concurrency = concurrency
        self.invalid_retries = invalid_retries
        self.settings = GenerationSettings(max_tokens=max_tokens, temperature=0.0, json_output=True,
                                           json_schema=REPLY_SCHEMA)
        self.stats = JudgeStats()
        self.fail_fast = FailFast(fail_fast, self._advice)
        self._checked = not preflight
        self.exclusive = exclusive
        self.show_progress = progress
        self._progress: Progress | None = None

    async def run(self, run_dirs: list[Path]) -> JudgeStats:
        sem = asyncio.Semaphore(self.concurrency)
        try:
            for run_dir in run_dirs:
                await self._run_dir(run_dir, sem)
        finally:
            if self._progress is not None:
                self._progress.close()
        return self.stats

    def _counting(self, fresh: int) -> Progress:
        """The stage's progress, ``fresh`` more judgements to make (drawn from the first one on)."""
        if self._progress is None:
            self._progress = stage_progress(0, f"apm-judge ({self.judge.name})", Unit("judgements"),
                                            lambda: self.stats.failed, self.show_progress)
        self._progress.grow(fresh)
        return self._progress

    async def _run_dir(self, run_dir: Path, sem: asyncio.Semaphore) -> None:
        saved = read_run_config(run_dir)
        root = saved["config"]["dataset"]["root"]
        release = load_release(root, check_videos=False)
        candidates = {(c.trajectory_id, c.candidate_id): c for c in release.candidates}
        todo = [r for r in latest_records(RunDir(run_dir).records).values()
                if needs_judge(r) and (self.only_keys is None or r["key"] in self.only_keys)]
        lost = sorted({r["candidate_id"] for r in todo if (r["trajectory_id"], r["candidate_id"]) not in candidates})
        if lost:
            raise ReleaseChanged(f"{run_dir}: the release at {root} no longer has {len(lost)} candidate(s) its records "
                                 f"name ({', '.join(lost[:3])}); judge with the run's release")
        if saved.get("release_fingerprint") not in (None, now := release_fingerprint(root)):
            log.warning("%s: the release at %s changed since the run (fingerprint %s, now %s): judging against "
                        "its annotations as they are now", run_dir, root, saved["release_fingerprint"], now)
        asks = {r["key"]: self._request(r, candidates[(r["trajectory_id"], r["candidate_id"])].fields) for r in todo}
        with judging(run_dir) if self.exclusive else nullcontext():
            await self._judge_dir(run_dir, todo, asks, sem)

    async def _judge_dir(self, run_dir: Path, todo: list[dict[str, Any]], asks: dict[str, Request],
                         sem: asyncio.Semaphore) -> None:
        """Judge the probes of ``todo`` that no verified judgement on record answers."""
        lines = list(read_folder(RunDir(run_dir).judgements, as_written=True))  # as its content digest covers them
        done, newest = self._verified(lines), latest_by(lines, lambda j: j["key"])
        fresh = [r for r in todo if self._identity(r, asks[r["key"]]) not in done]
        self.stats.cached += len(todo) - len(fresh)
        self.stats.by_run[str(run_dir)] = len(fresh)
        if not fresh:
            return
        await self._preflight()
        out = JsonlAppender(RunDir(run_dir).judgements_file(self.judge.name, self.file_suffix))
        progress = self._counting(len(fresh))

        async def one(rec: dict[str, Any]) -> None:
            async with sem:
                if self.fail_fast.tripped:
                    return  # the stage is stopping: a probe still queued is not asked
                judgement = await self._judge(rec, asks[rec["key"]])
            out.append_line(JudgementLine, judgement, supersedes=newest.get(rec["key"]))
            progress.update(1)

        tasks = [asyncio.ensure_future(one(r)) for r in fresh]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()  # a stop (fail-fast) leaves no request in flight and no line after the close
            await asyncio.gather(*tasks, return_exceptions=True)
            out.close()

    def _verified(self, lines: Any) -> set[tuple[str, str]]:
        """``(cache_key, inputs_sha256)`` of the ``ok`` judgements on record whose content verifies; every
        other line (failed, edited, without digests) is not an answer, and is asked again."""
        done: set[tuple[str, str]] = set()
        for j in lines:
            if j.get("status") != "ok":
                continue
            if verifies(j):
                done.add((j.get("cache_key"), j.get("inputs_sha256")))
            else:
                self.stats.rejected += 1
                log.warning("judgement of %s does not verify (edited?): judged again", j.get("key"))
        return done

    def _identity(self, rec: dict[str, Any], request: Request) -> tuple[str, str]:
        """What a usable judgement of ``rec`` carries: its cache key and the digest of the judge's inputs."""
        return cache_key(self.model, rec["key"], rec["output"]), inputs_digest(self.model, request)

    async def _preflight(self) -> None:
        """Once, before the first call: the judge's endpoint answers, takes the key and serves the model."""
        if not self._checked:
            await self.judge.preflight("judge")
        self._checked = True

    def _advice(self, response: Response) -> str:
        return self.judge.advice(response, "judge")

    def _request(self, rec: dict[str, Any], fields: Mapping[str, Any]) -> Request:
        prompt = judge_prompt(rec["task"], rec["polarity"], rec["probe_time"],
                              probe_reference(fields, rec["task"], rec["probe_id"]), rec["output"])
        return Request((Message.text("system", JUDGE_SYSTEM), Message.text("user", prompt)),
                       self.settings, request_id=f"judge:{rec['key']}")

    async def _judge(self, rec: dict[str, Any], request: Request) -> dict[str, Any]:
        errors: list[str] = []
        began = time.perf_counter()
        verdict = snapshot = None
        for _ in range(1 + self.invalid_retries):
            self.stats.calls += 1
            response = await self.judge.generate(request)
            self.fail_fast.observe(response)
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
        return signed({
            "format_version": FORMAT_VERSION,
            "key": rec["key"],
            "run": rec["run"],
            "judge": self.judge.name,
            "judge_model": self.model,
            "judge_snapshot": snapshot,
            "rubric_version": RUBRIC_VERSION,
            "response_sha256": response_digest(rec["output"]),
            "cache_key": cache_key(self.model, rec["key"], rec["output"]),
            "inputs_sha256": inputs_digest(self.model, request),
            "status": "ok" if verdict else "failed",
            "score": verdict.score if verdict else None,
            "criterion_checks": verdict.criterion_checks if verdict else None,
            "critical_issues": verdict.critical_issues if verdict else None,
            "justification": verdict.justification if verdict else None,
            "error": None if verdict else "; ".join(errors),
            "failure": None if verdict else ("backbone" if errors[-1].startswith("backbone") else "invalid_reply"),
            "attempts": len(errors) + (verdict is not None),
            "judge_s": time.perf_counter() - began,
        })
