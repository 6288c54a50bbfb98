"""A judge stage a reviewer can trust: a failed judgement is unjudged (never a zero, never cached), a
judgement line is used only if it verifies, replies are capped, one apm-judge per run dir, the judge's
endpoint is preflighted and fails fast, and its key reaches no byte written."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.runner import GOOD_JUDGEMENT, compose_run, records, run, served

from apm.api.judge import judge_backbone
from apm.cli.judge import main as judge_main
from apm.cli.reduce import main as reduce_main
from apm.judge.stage import JudgeStage, JudgeStats
from apm.records.jsonl import read_folder
from apm.reduce import load_runs
from apm.reduce.units import unit_views
from apm.runner.stops import RunStopped
from apm.synth import generate

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-judge-0123456789abcdefSECRET"


@pytest.fixture(scope="module")
def judged_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An oracle run (every adaptive probe passes the gate) over RCR, MPA, PRM and ER."""
    tmp = tmp_path_factory.mktemp("trust")
    tiny = generate(tmp / "tiny", seed=3, scale="tiny")
    return run(compose_run(tiny, tmp / "runs", tmp / "cache",
                           ["memory=none", "backbone=oracle", "dataset.tasks=[RCR,MPA,PRM,ER]"]))


@pytest.fixture
def run_dir(judged_run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(judged_run, copy, ignore=shutil.ignore_patterns("judgements", "locks"))
    return copy


def gated(run_dir: Path) -> int:
    return len([r for r in records(run_dir) if r["family"] == "adaptive"])


def judge_at(url: str, monkeypatch: pytest.MonkeyPatch, *extra: str):
    monkeypatch.setenv("APM_JUDGE_KEY", KEY)
    return judge_backbone(["judge=deepseek_v4_flash", f"judge.base_url={url}", "judge.api_key_env=APM_JUDGE_KEY",
                           "judge.max_attempts=1", *extra])


def judge_once(judge, run_dir: Path, **options) -> JudgeStats:
    async def go() -> JudgeStats:
        await judge.start()
        try:
            return await JudgeStage(judge, concurrency=4, **options).run([run_dir])
        finally:
            await judge.close()
    return asyncio.run(go())


def reduce_to(run_dir: Path, out: Path, *flags: str) -> int:
    return reduce_main([str(run_dir), "--out", str(out), "--bootstrap", "0", "--no-figures", *flags])


def cell(out: Path, table: str, column: str) -> tuple[float, str]:
    """The first row's value of ``column`` in a table: numeric (CSV) and as printed (Markdown, past any
    block heading row)."""
    numeric = pd.read_csv(out / "tables" / f"{table}.csv", index_col=0).iloc[0][column]
    lines = (out / "tables" / f"{table}.md").read_text().splitlines()
    first = next(line for line in lines[4:] if not line.startswith("| **"))
    header, row = ([c.strip() for c in line.strip("|").split("|")] for line in (lines[2], first))
    return float(numeric), row[header.index(column)]


def test_a_failed_judgement_is_unjudged_never_a_zero_and_is_asked_again(run_dir, monkeypatch, tmp_path, capsys):
    n = gated(run_dir)
    good = GOOD_JUDGEMENT.replace('"score": 4', '"score": 2')
    fenced = f"```json\n{good}\n```"
    with served(reply=fenced) as srv:
        first = judge_once(judge_at(srv.base_url, monkeypatch), run_dir, invalid_retries=1)
    assert first.failed == n > 0 and first.judged == 0
    capsys.readouterr()
    assert reduce_to(run_dir, tmp_path / "refused") == 2  # failures are unjudged: refused, not reduced to zeros
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{n} gate-passing adaptive probe(s)" in err[0] and "apm-judge" in err[0]
    assert not (tmp_path / "refused").exists()

    out = tmp_path / "allowed"
    assert reduce_to(run_dir, out, "--allow-unjudged") == 0
    for task in ("RCR", "MPA", "PRM"):
        value, shown = cell(out, "table4", task)
        assert np.isnan(value) and shown == "–"  # withheld, never 0.00
    scores = pd.read_csv(out / "scores.csv")
    rcr = scores[(scores["metric"] == "task_score") & (scores["task"] == "RCR")].iloc[0]
    assert rcr["n_unjudged"] > 0
    assert cell(out, "table7", "Judge failures")[0] == n  # counted in Table 7

    with served(reply=good) as srv:
        second = judge_once(judge_at(srv.base_url, monkeypatch), run_dir)
    assert second.calls == n and second.judged == n and second.cached == 0  # failures were not cached
    final = tmp_path / "final"
    assert reduce_to(run_dir, final) == 0
    for task in ("RCR", "MPA", "PRM"):
        assert cell(final, "table4", task) == (pytest.approx(40.0), "40.00")
    assert "Judge: DeepSeek-V4-Flash (deepseek-v4-flash)" in (final / "tables" / "table4.md").read_text()


def _edit_first(run_dir: Path, edit) -> str:
    path = next((run_dir / "judgements").glob("*.jsonl"))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    edit(lines[0])
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return lines[0]["key"]


@pytest.mark.parametrize("field", ["score", "response_sha256"])
def test_an_edited_judgement_is_never_used_and_is_judged_again(run_dir, monkeypatch, field):
    n = gated(run_dir)
    with served(reply=GOOD_JUDGEMENT) as srv:
        assert judge_once(judge_at(srv.base_url, monkeypatch), run_dir).judged == n
        key = _edit_first(run_dir, lambda line: line.update(
            {field: 1 if field == "score" else "0" * 64}))
        with pytest.warns(UserWarning, match="do not verify"):
            runs = load_runs([run_dir])
        assert key not in set(runs.judgements["key"].astype(str))  # never used
        assert unit_views(runs.records, runs.judgements).unjudged == 1
        again = judge_once(judge_at(srv.base_url, monkeypatch), run_dir)
    assert again.calls == 1 and again.rejected == 1 and again.cached == n - 1  # redone, not a deadlock
    runs = load_runs([run_dir])
    assert unit_views(runs.records, runs.judgements).unjudged == 0
    assert set(runs.judgements["score"]) == {4.0}


def test_a_judge_reply_over_the_cap_is_a_judge_failure(run_dir, monkeypatch):
    n = gated(run_dir)
    huge = json.dumps({**json.loads(GOOD_JUDGEMENT), "justification": "x" * 8_000_000})
    with served(reply=huge, chunks=64) as srv:
        stats = judge_once(judge_at(srv.base_url, monkeypatch), run_dir, invalid_retries=0)
    assert stats.failed == n and stats.judged == 0
    written = list((run_dir / "judgements").glob("*.jsonl"))
    assert sum(p.stat().st_size for p in written) < 2_000 * n  # not 8 MB a probe
    assert all("over the cap" in j["error"] for j in read_folder(run_dir / "judgements"))


def test_two_apm_judge_at_once_judge_each_probe_once(run_dir, monkeypatch):
    monkeypatch.setenv("APM_JUDGE_KEY", KEY)
    with served(reply=GOOD_JUDGEMENT, latency_s=0.2) as srv:
        command = [sys.executable, "-m", "apm.cli.judge", str(run_dir), "judge=deepseek_v4_flash",
                   f"judge.base_url={srv.base_url}", "judge.api_key_env=APM_JUDGE_KEY"]
        both = [subprocess.Popen(command, cwd=REPO, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        codes = sorted(p.wait(timeout=300) for p in both)
        errors = [p.stderr.read().strip() for p in both]
    assert gated(run_dir) == len(list(read_folder(run_dir / "judgements")))  # each probe judged once
    assert codes == [0, 1]
    refused = next(e for e in errors if "being judged by another apm-judge" in e)
    assert len(refused.splitlines()) == 1


def test_a_dead_judge_endpoint_is_refused_before_any_probe(run_dir, monkeypatch, capsys):
    monkeypatch.setenv("APM_JUDGE_KEY", KEY)
    began = time.monotonic()
    code = judge_main([str(run_dir), "judge=deepseek_v4_flash", "judge.base_url=http://127.0.0.1:9/v1",
                       "judge.api_key_env=APM_JUDGE_KEY", "judge.backoff_max_s=2"])
    took = time.monotonic() - began
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "start the server, or set judge.base_url" in err[0], err
    assert took < 20 and not list(read_folder(run_dir / "judgements"))


def test_an_endpoint_dying_mid_stage_stops_it_after_fail_fast_calls(run_dir, monkeypatch):
    gone = judge_at("http://127.0.0.1:9/v1", monkeypatch)  # as if it died after the preflight
    stage = JudgeStage(gone, concurrency=1, preflight=False, fail_fast=3)

    async def go() -> None:
        await gone.start()
        try:
            await stage.run([run_dir])
        finally:
            await gone.close()

    assert gated(run_dir) > 3
    with pytest.raises(RunStopped, match="3 consecutive connection failures: judge 'DeepSeek-V4-Flash'"):
        asyncio.run(go())
    assert stage.stats.calls == 3


def test_an_echoing_judge_leaves_its_key_in_no_byte_written(run_dir, tmp_path):
    home = tmp_path / "wandb-home"  # wandb's own folders, grepped too
    env = {**os.environ, "APM_JUDGE_KEY": KEY, "WANDB_SILENT": "true", "WANDB_DIR": str(home),
           "WANDB_CACHE_DIR": str(home / "cache"), "WANDB_CONFIG_DIR": str(home / "config"),
           "WANDB_DATA_DIR": str(home / "data")}
    server = subprocess.Popen([sys.executable, "-m", "apm.testing.fake_server", "--port", "0", "--echo-headers"],
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        port = int(server.stdout.readline().split()[1])

        def cli(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-c", "import sys; from apm.cli.judge import main as j; "
                                   "from apm.cli.reduce import main as r; from apm.cli.view import main as v; "
                                   "sys.exit({'judge': j, 'reduce': r, 'view': v}[sys.argv[1]](sys.argv[2:]))",
                                   *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)

        judge = ["judge=deepseek_v4_flash", f"judge.base_url=http://127.0.0.1:{port}/v1",
                 "judge.api_key_env=APM_JUDGE_KEY", "judge.max_attempts=1"]
        preflighted = cli("judge", str(run_dir), *judge)
        assert preflighted.returncode == 2 and "***" in preflighted.stderr  # the echo, masked
        judged = cli("judge", str(run_dir), *judge, "--no-preflight")
        assert judged.returncode == 1, judged.stderr  # every judgement failed: the echo is in each line
        lines = list(read_folder(run_dir / "judgements"))
        assert len(lines) == gated(run_dir) and all("***" in j["error"] for j in lines), lines[0]["error"]
        reduced = cli("reduce", str(run_dir), "--out", str(tmp_path / "report"), "--allow-unjudged", "--bootstrap", "0",
                      "--wandb", "--wandb-mode", "offline")
        site = cli("view", str(run_dir), "--out", str(tmp_path / "site"))
        assert reduced.returncode == 0 and site.returncode == 0, reduced.stderr + site.stderr
    finally:
        server.terminate()
        server.wait(timeout=30)
    outputs = [preflighted, judged, reduced, site]
    assert [done.args[3] for done in outputs if KEY in done.stdout + done.stderr] == []
    roots = (run_dir, tmp_path / "report", tmp_path / "site", home)
    written = [p for root in roots for p in root.rglob("*") if p.is_file()]
    assert any("chunks" in p.parts for p in written) and any(p.suffix == ".wandb" for p in written)
    assert [str(p) for p in written if KEY.encode() in p.read_bytes()] == []


def test_the_caption_names_the_judge_of_each_row_when_judges_differ(tmp_path: Path) -> None:
    from apm.testing import fixtures

    for name, memory, judge in (("a", "raw_video", "judge-a"), ("b", "none", "judge-b")):
        probe = fixtures.record("RCR", "R1", "n1", run=fixtures.run_info(memory=memory), polarity="negative",
                                decision="SILENT", gate_pass=True)
        fixtures.write_run(tmp_path / name, [probe], [fixtures.judgement(probe, 4, judge=judge)])
    out = tmp_path / "out"
    assert reduce_to(tmp_path, out) == 0
    caption = (out / "tables" / "table4.md").read_text().splitlines()[0]
    assert ("Judged by judge-a: Raw Video as Memory · Qwen3-VL-8B-Instruct; "
            "judge-b: SimpleStream · Qwen3-VL-8B-Instruct.") in caption
