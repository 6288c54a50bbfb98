"""apm-run end to end through a real `vllm serve` (CPU build) that the backbone starts itself: the
same server answers the probes and writes the text summaries."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlparse

from support.runner import compose_run, records, run
from support.tiny_vlm import build_tiny_qwen2vl_once

from apm.synth import generate


def test_apm_run_with_a_launched_vllm_server(vllm_python, tmp_path, monkeypatch):  # noqa: F811
    tiny = generate(tmp_path / "tiny", seed=4, scale="tiny")
    monkeypatch.setenv("APM_TINY_MODEL", str(build_tiny_qwen2vl_once(tmp_path / "model")))
    monkeypatch.setenv("APM_VLLM_PYTHON", vllm_python)
    cfg = compose_run(tiny, tmp_path / "runs", tmp_path / "cache", [
        "memory=text_summary", "memory.max_tokens=32", "backbone=tiny_qwen2vl_vllm", "dataset.tasks=[ER,RCR]",
        "generation.max_tokens=8",
        "concurrency=4",
    ])
    run_dir = run(cfg)
    recs = records(run_dir)
    assert recs and all(r["error"] is None for r in recs), [r["error"] for r in recs if r["error"]][:3]
    for r in recs:
        assert r["frames"] and r["tokens"]["prompt"] > 0 and 0 < r["tokens"]["completion"] <= 8
        assert 0 < r["latency"]["engine_ttft_s"] <= r["latency"]["engine_total_s"]
        assert r["latency"]["ttft_s"] >= r["latency"]["engine_ttft_s"]
    # frames reach the engine: probes of one candidate share their text but for times, so the one
    # shown more frames must cost more prompt tokens
    pairs = 0
    for cand in {r["candidate_id"] for r in recs}:
        probes = sorted((r for r in recs if r["candidate_id"] == cand), key=lambda r: len(r["frames"]))
        for few, many in zip(probes, probes[1:]):
            if len(many["frames"]) - len(few["frames"]) >= 4:
                assert few["tokens"]["prompt"] < many["tokens"]["prompt"], (few["key"], many["key"])
                pairs += 1
    assert pairs > 0
    memory = [json.loads(line) for p in (run_dir / "memory").glob("*.jsonl") for line in p.read_text().splitlines()]
    assert memory and all(m["error"] is None and m["bytes"] > 0 for m in memory)  # the server wrote them
    (log,) = (run_dir / "jobs" / "shard-0-of-1").glob("vllm-server-*.log")
    assert log.stat().st_size > 0
    port = _port_from_log(log)
    assert port, f"no port in {log}"
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0  # the server is gone after the run


def _port_from_log(log) -> int | None:
    for line in log.read_text(errors="replace").splitlines():
        if "--port" in line:
            parts = line.split()
            return int(parts[parts.index("--port") + 1])
        if "http://127.0.0.1:" in line:
            return urlparse(line[line.index("http://127.0.0.1:"):].split()[0]).port
    return None
