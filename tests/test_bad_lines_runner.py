"""One bad line stops no reader: apm-run (resume), apm-judge and apm-status skip it and go on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.runner import compose_run, records, run

from apm.cli.judge import main as judge_main
from apm.scale import scheduler, status
from apm.synth import generate

BAD = [b"null", b"\xff\xfe\x00 not utf-8", b'{"no": "key"}', b'{"key": 5, "run": "x"}', b"[]", b'"text"']


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("rel") / "tiny", seed=3, scale="tiny")


def _spoil(folder: Path) -> None:
    for path in folder.glob("*.jsonl"):
        with path.open("ab") as f:
            f.write(b"\n".join(BAD) + b"\n")


def test_every_reader_skips_bad_lines(tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      caplog: pytest.LogCaptureFixture) -> None:
    cfg = compose_run(tiny, tmp_path / "runs", tmp_path / "cache", ["memory=raw_video", "backbone=oracle"])
    run_dir = run(cfg)
    first = records(run_dir)
    assert judge_main([str(run_dir), "judge=gate_only"]) == 0
    for kind in ("records", "memory", "judgements"):
        _spoil(run_dir / kind)
    run(cfg)  # a resume reads every spoilt file: nothing is redone, nothing crashes
    lines = [json.loads(x) for p in (run_dir / "records").glob("*.jsonl") for x in p.read_bytes().splitlines()
             if x.startswith(b"{") and b'"no"' not in x and b'"run": "x"' not in x]
    assert len(lines) == len(first)
    assert "skipped 6 unusable line(s)" in caplog.text
    assert judge_main([str(run_dir), "judge=gate_only"]) == 0
    monkeypatch.setattr(scheduler, "available", lambda: False)
    (row,) = status.sweep_status(tmp_path / "runs")
    assert row.done == len(first) and row.state == "done"
