"""No line can crash apm-reduce: unreadable lines are skipped, counted and named in the manifest."""

from __future__ import annotations

import json
import random
from pathlib import Path

import orjson
import pytest

from apm.cli.reduce import main
from apm.records.version import FIELD, refusal
from apm.reduce import load_runs, score_table
from apm.testing import fixtures


def _append(path: Path, *raw: bytes) -> None:
    with path.open("ab") as f:
        for line in raw:
            f.write(line + b"\n")


def test_bad_lines_are_skipped_and_named(tmp_path: Path) -> None:
    root = fixtures.small_run_set(tmp_path / "runs")
    good = fixtures.record("ER", "C1")
    probe = fixtures.record("RCR", "R1", "n1", polarity="negative", decision="SILENT", gate_pass=True, correct=None)
    _append(root / "main" / "records" / "shard-0.jsonl",
            b"null", b"\xff\xfe not utf-8", orjson.dumps({k: v for k, v in good.items() if k != "key"}),
            orjson.dumps({**good, "key": "T1/C7/query", "correct": "yes"}),
            orjson.dumps({k: v for k, v in good.items() if k != "run"}),
            orjson.dumps({**good, "key": "T1/C8/query", "latency": {"ttft_s": "fast"}}),
            orjson.dumps({**good, "task": "XX"}), b"[1, 2]")
    with (root / "main" / "records" / "shard-0.jsonl").open("ab") as f:
        f.write(b'{"key": "T1/C9/qu')  # a torn tail: a crash mid-write
    _append(root / "main" / "judgements" / "shard-0.jsonl",
            orjson.dumps(fixtures.judgement(probe, 99)), orjson.dumps(fixtures.judgement(probe, -3)),
            orjson.dumps(fixtures.judgement(probe, True)))
    _append(root / "main" / "memory" / "shard-0.jsonl",
            orjson.dumps({**fixtures.memory_line("T1", 9, 10, 1.0), "bytes": "big"}), b'"x"')
    with pytest.warns(UserWarning, match="skipped"):
        runs = load_runs([root])
    reasons = [s.reason for s in runs.skipped]
    assert len(reasons) == 14, reasons
    assert {"not a JSON object (NoneType)", "not valid JSON (or not UTF-8)", "key: missing",
            "unterminated last line (a crash mid-write)"} <= set(reasons)
    assert any(r.startswith("correct:") for r in reasons) and any(r.startswith("run:") for r in reasons)
    assert sum(r.startswith("score: not an integer 1–5") for r in reasons) == 3
    clean = load_runs([fixtures.small_run_set(tmp_path / "clean")])
    scores = score_table(runs.records, runs.judgements, runs.memory, reps=0)
    expected = score_table(clean.records, clean.judgements, clean.memory, reps=0)
    assert scores["value"].fillna(-1).tolist() == expected["value"].fillna(-1).tolist()  # bad lines change nothing
    with pytest.warns(UserWarning):
        assert main([str(root), "--out", str(tmp_path / "out"), "--bootstrap", "0", "--no-figures"]) == 0
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["skipped_lines"]["count"] == 14
    assert any("shard-0.jsonl:" in s and "key: missing" in s for s in manifest["skipped_lines"]["first"])


def _mutate(rng: random.Random, line: dict) -> bytes:
    """One random corruption of a valid line: a field deleted, retyped or replaced, or the bytes cut."""
    key = rng.choice(sorted(line))
    junk = rng.choice([None, 99, -3, 1e308, "x" * 50, True, [], {}, {"a": [1]}, "\u202e\x00", 10**4000])
    junk = "later" if key == FIELD and refusal(junk, "") else junk  # a later format version is refused, not skipped
    raw = json.dumps(line).encode()
    mutations = [
        lambda: json.dumps({k: v for k, v in line.items() if k != key}).encode(),
        lambda: json.dumps({**line, key: junk}).encode(),
        lambda: json.dumps(junk).encode(),
        lambda: raw[: rng.randrange(len(raw))],
        lambda: bytes(b ^ 0xFF if rng.random() < 0.02 else b for b in raw),
    ]
    return rng.choice(mutations)()


def test_fuzzed_lines_never_crash_a_reduction(tmp_path: Path) -> None:
    rng = random.Random(0)
    template = fixtures.small_run_set(tmp_path / "runs")
    lines = {kind: [json.loads(x) for f in sorted((template / "main" / kind).glob("*.jsonl"))
                    for x in f.read_text().splitlines()] for kind in ("records", "judgements", "memory")}
    for kind, originals in lines.items():
        with (template / "main" / kind / "fuzz.jsonl").open("wb") as f:
            for _ in range(300):
                f.write(_mutate(rng, rng.choice(originals)).replace(b"\n", b" ") + b"\n")
    with pytest.warns(UserWarning):
        runs = load_runs([template])
    assert len(runs.skipped) > 300
    score_table(runs.records, runs.judgements, runs.memory, reps=20)


@pytest.mark.parametrize("fingerprint", [["ab", "cd"], {"sha": "ab"}, 7, ""])
def test_a_run_block_whose_release_fingerprint_is_no_string_is_a_skipped_line(tmp_path: Path, fingerprint) -> None:
    """A retyped ``run.release_fingerprint`` is one skipped line, named, not a TypeError building the
    categorical columns (a list is unhashable)."""
    root = fixtures.small_run_set(tmp_path / "runs")
    good = fixtures.record("ER", "C9")
    _append(root / "main" / "records" / "shard-0.jsonl",
            orjson.dumps({**good, "run": {**good["run"], "release_fingerprint": fingerprint}}))
    with pytest.warns(UserWarning, match="skipped"):
        runs = load_runs([root])
    assert [s.reason for s in runs.skipped] == ["run.release_fingerprint: missing or of the wrong type"]
    assert "T1/C9/query" not in set(runs.records["key"])


def test_a_config_json_whose_release_fingerprint_is_no_string_names_no_release(tmp_path: Path) -> None:
    """Lines without a fingerprint take their run dir's from ``config.json`` only where it is a string."""
    root = fixtures.small_run_set(tmp_path / "runs")
    (root / "main" / "config.json").write_text(json.dumps({"release_fingerprint": ["ab", "cd"]}))
    runs = load_runs([root])
    assert runs.records["release_fingerprint"].isna().all()
