"""Every latency says how it was measured (``latency.mode``, ``in_flight``, concurrency, cache state);
latency mode measures one request at a time after one warm-up that is not recorded."""

from __future__ import annotations

import pytest
from support.runner import compose_run, records, release_instance_count, run, served

from apm.runner.config import config_hash
from apm.synth import generate


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("rel") / "tiny", seed=2, scale="tiny")


def overrides(url: str, *extra: str) -> list[str]:
    return ["backbone=openai_compatible", f"backbone.base_url={url}", "backbone.model=fake", "memory=none",
            "dataset.tasks=[ER,OCR,CT]", *extra]


def latest(recs: list[dict]) -> dict[str, dict]:
    return {r["key"]: r for r in sorted(recs, key=lambda r: r["written_ns"])}


def test_a_loaded_run_records_the_requests_in_flight(tiny, tmp_path):
    with served(latency_s=0.2, cached_tokens=7) as srv:
        recs = records(run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", overrides(srv.base_url))))
    assert {r["latency"]["mode"] for r in recs} == {"loaded"}
    assert {r["latency"]["concurrency"] for r in recs} == {8}
    assert max(r["latency"]["in_flight"] for r in recs) > 1 and min(r["latency"]["in_flight"] for r in recs) >= 1
    assert {r["latency"]["cached_tokens"] for r in recs} == {7}
    assert {r["latency"]["prefix_caching"] for r in recs} == {None}  # an endpoint this run did not launch


def test_latency_mode_sends_one_request_at_a_time_after_one_warm_up(tiny, tmp_path):
    with served(latency_s=0.05) as srv:
        cfg = compose_run(tiny, tmp_path / "runs", tmp_path / "cache", overrides(srv.base_url, "latency_mode=true"))
        recs = records(run(cfg))
        assert srv.max_inflight == 1
        assert srv.counts["requests"] == len(recs) + 2  # the preflight's one-token ping, the warm-up, the instances
    assert len(recs) == release_instance_count(tiny, {"ER", "OCR", "CT"})
    assert all(r["latency"]["in_flight"] == 1 and r["latency"]["mode"] == "isolated" for r in recs)
    assert {r["latency"]["concurrency"] for r in recs} == {1}


def test_latency_mode_measures_again_what_was_measured_under_load(tiny, tmp_path):
    with served() as srv:
        out, cache = tmp_path / "runs", tmp_path / "cache"
        loaded = compose_run(tiny, out, cache, overrides(srv.base_url))
        isolated = compose_run(tiny, out, cache, overrides(srv.base_url, "latency_mode=true"))
        assert config_hash(loaded) == config_hash(isolated)  # the same method: answers count toward one run
        run(loaded)
        run_dir = run(isolated)
        assert {r["latency"]["mode"] for r in latest(records(run_dir)).values()} == {"isolated"}
        before = srv.counts["requests"]
        run(isolated)  # everything is on record in isolation now: only the preflight's two requests go out
        assert srv.counts["requests"] - before == 2
