"""The OpenAI-compatible client against a loopback server that fails on cue: retries, back-off,
timeouts, deadlines, error responses, one count per request, and no API key anywhere it could leak."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from apm.backbones import Message, Request, Response
from apm.backbones.openai_api import OpenAIBackbone
from apm.testing.fake_server import FakeServer

FAST = dict(backoff_initial_s=0.05, backoff_max_s=1.0, connect_timeout_s=1.0, read_timeout_s=2.0)
REQUEST = Request((Message.text("user", "Which option?"),), request_id="T1/c1/query")


def run(
    faults: list[str], n: int = 1, server: dict[str, Any] | None = None, **client: Any
) -> tuple[list[Response], FakeServer]:
    """Send ``n`` requests through a fresh server that plays ``faults`` first."""

    async def main() -> tuple[list[Response], FakeServer]:
        async with FakeServer(**(server or {})) as srv:
            srv.plan(faults)
            async with OpenAIBackbone(model="fake", base_url=srv.base_url, **(FAST | client)) as b:
                out = await asyncio.gather(*(b.generate(REQUEST) for _ in range(n)))
            return list(out), srv

    return asyncio.run(main())


def test_retries_with_exponential_backoff_then_succeeds():
    [r], srv = run(["429", "500", "500"])
    assert r.ok and r.text == '{"answer":"A"}'
    assert r.attempts == srv.counts["requests"] == 4
    gaps = [b - a for a, b in zip(srv.arrivals, srv.arrivals[1:])]
    # wait = 0.05 * 2**(n-1) + U(0, 0.05): each gap at least its exponential floor, and growing
    assert gaps[0] >= 0.05 and gaps[1] >= 0.1 and gaps[2] >= 0.2
    assert r.elapsed_s >= sum(gaps) and r.total_s < r.elapsed_s


def test_retry_after_header_is_honoured():
    [r], srv = run(["429"], server=dict(retry_after_s=0.4))
    assert r.ok and r.attempts == 2
    assert srv.arrivals[1] - srv.arrivals[0] >= 0.4


@pytest.mark.parametrize("fault", ["drop", "malformed"])
def test_broken_stream_is_retried_from_scratch(fault):
    reply = json.dumps({"decision": "INTERVENE", "proactive_response": "turn off the stove now", "reason": "smoke"})
    [r], srv = run([fault], server=dict(reply=reply, chunks=8))
    assert r.text == reply  # the partial answer of the broken attempt is discarded, not glued on
    assert r.attempts == srv.counts["requests"] == 2
    assert r.completion_tokens == 8  # usage of the final attempt only


def test_exhausted_retries_give_an_error_response_not_an_exception():
    [r], srv = run(["500"] * 3, max_attempts=3)
    assert not r.ok and "gave up after 3 attempts" in r.error and "HTTP 500" in r.error
    assert r.text == "" and r.prompt_tokens is None
    assert r.attempts == srv.counts["requests"] == 3


def test_client_errors_are_not_retried():
    [r], srv = run(["400"])
    assert not r.ok and "HTTP 400" in r.error
    assert r.attempts == srv.counts["requests"] == 1


def test_read_timeout_fires_on_a_hang_and_the_retry_recovers():
    began = time.monotonic()
    [r], srv = run(["hang"], read_timeout_s=0.3)
    assert r.ok and r.attempts == srv.counts["requests"] == 2
    assert time.monotonic() - began < 3


def test_attempt_timeout_cuts_a_server_that_trickles_forever():
    began = time.monotonic()
    [r], srv = run(["trickle", "trickle"], attempt_timeout_s=0.3, max_attempts=2)
    assert not r.ok and "exceeded 0.3s" in r.error
    assert r.attempts == srv.counts["requests"] == 2
    assert time.monotonic() - began < 3


def test_overall_deadline_cuts_retries():
    began = time.monotonic()
    [r], _ = run(["hang"] * 10, read_timeout_s=0.2, max_attempts=10, deadline_s=0.8)
    assert not r.ok and "deadline of 0.8s exceeded" in r.error and "ReadTimeout" in r.error
    assert 0.8 <= time.monotonic() - began < 3


def test_queueing_for_a_slot_does_not_count_against_the_deadline():
    rs, srv = run([], n=4, server=dict(latency_s=0.3), concurrency=1, deadline_s=0.6)
    assert all(r.ok for r in rs) and srv.max_inflight == 1
    waited = sorted(r.elapsed_s for r in rs)
    assert all(w >= 0.3 * (i + 1) for i, w in enumerate(waited))  # the i-th waited for the i before it
    assert waited[-1] > 0.6 and all(r.total_s < 0.6 for r in rs)  # past the deadline queued, within it asked


def test_connection_refused_is_retried_then_reported():
    async def main() -> Response:
        srv = await FakeServer().start()
        url = srv.base_url
        await srv.stop()  # nothing listens there any more
        async with OpenAIBackbone(model="fake", base_url=url, max_attempts=3, **FAST) as b:
            return await b.generate(REQUEST)

    r = asyncio.run(main())
    assert not r.ok and r.attempts == 3 and "ConnectError" in r.error


def test_concurrency_is_bounded_and_every_request_counted_once():
    rs, srv = run(["500", "429"], n=12, server=dict(latency_s=0.05), concurrency=3)
    assert all(r.ok for r in rs)
    assert srv.max_inflight <= 3
    assert sum(r.attempts for r in rs) == srv.counts["requests"] == 14


def test_api_key_never_leaks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    secret = "sk-test-0123456789-SECRET"
    monkeypatch.setenv("APM_TEST_API_KEY", secret)
    caplog.set_level(logging.DEBUG)  # every logger, httpx/httpcore included
    cfg = OmegaConf.create(
        {"_target_": "apm.backbones.openai_api.OpenAIBackbone", "model": "fake", "base_url": "http://x/v1",
         "api_key_env": "APM_TEST_API_KEY", **FAST}
    )

    async def main() -> tuple[list[Response], FakeServer, OpenAIBackbone]:
        from apm.backbones import instantiate_backbone

        async with FakeServer(keep_requests=True) as srv:
            srv.plan(["429", "500", "500"])
            b = instantiate_backbone(cfg, base_url=srv.base_url, max_attempts=2)
            async with b:
                out = [await b.generate(REQUEST), await b.generate(REQUEST)]
            return out, srv, b

    rs, srv, b = asyncio.run(main())
    assert [r.ok for r in rs] == [False, True]
    assert all(h["authorization"] == f"Bearer {secret}" for h, _ in srv.requests)  # it was really sent
    OmegaConf.save(cfg, tmp_path / "config.yaml")
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in rs))
    written = "".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file())
    exposed = [written, repr(b), str(vars(b)), caplog.text, *(r.error or "" for r in rs)]
    assert caplog.records and "APM_TEST_API_KEY" in written
    assert not any(secret in text for text in exposed)


def test_missing_api_key_fails_fast(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("APM_TEST_API_KEY", raising=False)
    b = OpenAIBackbone(model="fake", base_url="http://127.0.0.1:9/v1", api_key_env="APM_TEST_API_KEY")
    with pytest.raises(RuntimeError, match="APM_TEST_API_KEY is not set"):
        asyncio.run(b.start())


@pytest.mark.parametrize("fault,kind", [("400", "bad_request"), ("500", "server"), ("429", "rate_limit"),
                                        ("trickle", "timeout"), ("malformed", "stream")])
def test_a_failure_says_its_kind(fault, kind):
    [r], _ = run([fault] * 2, max_attempts=2, attempt_timeout_s=0.3)
    assert not r.ok and r.error_kind == kind


def test_an_unknown_model_a_refused_key_and_no_server_have_their_kinds():
    [r], _ = run([], server=dict(models=("served",)))
    assert (r.error_kind, r.attempts) == ("not_found", 1) and "does not exist" in r.error
    [r], _ = run([], server=dict(api_key="k"))
    assert (r.error_kind, r.attempts) == ("auth", 1)

    async def nothing_there() -> Response:
        srv = await FakeServer().start()
        await srv.stop()
        async with OpenAIBackbone(model="fake", base_url=srv.base_url, max_attempts=2, **FAST) as b:
            return await b.generate(REQUEST)

    assert asyncio.run(nothing_there()).error_kind == "connection"


def test_cached_prompt_tokens_are_reported():
    [r], _ = run([], server=dict(cached_tokens=12))
    assert r.ok and r.cached_tokens == 12
