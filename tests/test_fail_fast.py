"""A run stops after a few consecutive authentication, not-found or connection failures; a job whose
every instance failed exits non-zero; ``apm-status`` tells such a shard apart from a clean one."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest
from support.runner import compose_run, records, release_instance_count, run, served

from apm.backbones import Response
from apm.backbones.fail_fast import FailFast, RunStopped
from apm.runner.app import run_async, run_dir_of
from apm.scale import scheduler, status
from apm.synth import generate
from apm.testing import fixtures


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("rel") / "tiny", seed=2, scale="tiny")


def failed(kind: str | None, attempts: int = 1) -> Response:
    return Response(error=f"{kind} failure" if kind else None, error_kind=kind, attempts=attempts)


def test_three_consecutive_endpoint_failures_stop_the_run():
    counter = FailFast(3, advice=lambda r: f"fix it ({r.error})")
    for response in (failed("auth"), failed("not_found"), failed(None), failed("connection"), failed("connection")):
        counter.observe(response)  # an answer in between starts the count again
    counter.observe(failed(None, attempts=0))  # a request that never reached the engine says nothing of it
    with pytest.raises(RunStopped, match="3 consecutive connection failures: fix it"):
        counter.observe(failed("connection"))


def test_other_failures_and_a_zero_limit_never_stop():
    counter, never = FailFast(3), FailFast(0)
    for _ in range(10):
        counter.observe(failed("bad_request"))
        never.observe(failed("auth"))


def endpoint_overrides(url: str, model: str) -> list[str]:
    return ["backbone=openai_compatible", f"backbone.base_url={url}", f"backbone.model={model}",
            "backbone.max_attempts=1", "preflight=false", "memory=none"]


def test_a_wrong_model_mid_run_stops_after_fail_fast_records(tiny, tmp_path):
    with served(models=("served-model",)) as srv:
        cfg = compose_run(tiny, tmp_path / "runs", tmp_path / "cache",
                          endpoint_overrides(srv.base_url, "no-such-model") + ["concurrency=1"])
        began = time.monotonic()
        with pytest.raises(RunStopped, match="3 consecutive not_found failures: .*backbone.model='no-such-model'"):
            run(cfg)
    assert time.monotonic() - began < 10
    recs = records(run_dir_of(cfg))
    assert len(recs) == 3 and all(r["error"] for r in recs)


def test_a_job_whose_every_instance_failed_exits_non_zero(tiny, tmp_path):
    with served(models=("served-model",)) as srv:
        cfg = compose_run(tiny, tmp_path / "runs", tmp_path / "cache",
                          endpoint_overrides(srv.base_url, "no-such-model") + ["fail_fast=0", "dataset.tasks=[ER]"])
        planned = release_instance_count(tiny, {"ER"})
        failed = f"{planned} of {planned} instances failed; the first: HTTP 404.*rerun=errors"
        with pytest.raises(RunStopped, match=failed):
            asyncio.run(run_async(cfg, strict=True))
        assert len(records(run_dir_of(cfg))) == planned  # on record: rerun=errors asks again


def test_apm_run_says_it_in_one_line_with_a_non_zero_exit(tiny, tmp_path):
    with served(models=("served-model",)) as srv:
        done = subprocess.run(
            [sys.executable, "-m", "apm.cli.run", f"dataset.root={tiny}", f"output_root={tmp_path / 'runs'}",
             f"frames.cache_dir={tmp_path / 'cache'}", "logging.progress=false", "logging.wandb.mode=disabled",
             *endpoint_overrides(srv.base_url, "no-such-model")],
            capture_output=True, text=True, timeout=120, env={**os.environ, "HYDRA_FULL_ERROR": ""})
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and "Traceback" not in done.stderr
    assert done.stderr.startswith("apm-run: error: stopped after 3 consecutive not_found failures")


def test_status_shows_done_with_errors_apart_from_done(tmp_path, monkeypatch):
    monkeypatch.setattr(scheduler, "available", lambda: False)
    for name, errors in (("clean", 0), ("errored", 1)):
        run_dir = tmp_path / name
        (run_dir / "jobs" / "shard-0-of-1").mkdir(parents=True)
        plan = {"instances": 2, "keys": ["T1/c0/query", "T1/c1/query"]}
        (run_dir / "jobs" / "shard-0-of-1" / "plan.json").write_text(json.dumps(plan))
        (run_dir / "records").mkdir()
        lines = [
            fixtures.record("ER", f"c{n}", "query", "T1", error="HTTP 404" if n < errors else None) for n in range(2)
        ]
        (run_dir / "records" / "shard-0-of-1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    rows = {r.run: r for r in status.sweep_status(tmp_path)}
    assert (rows["clean"].state, rows["errored"].state) == ("done", "done with errors")
    assert rows["errored"].complete and not rows["errored"].failed
    assert "1 done, 1 done with errors" in status.render(list(rows.values()))
