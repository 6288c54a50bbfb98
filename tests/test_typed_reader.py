"""The reducer's typed reader (apm.records.lines.read_typed) reads exactly the lines the dict reader
(read_lines) reads, skips the others with the same ``file:line: reason``, and reads a file's ``run``
block once, not once per line."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pandas as pd
import pytest

from apm.cli.reduce import main
from apm.records import lines
from apm.records.lines import Kind, Skipped, read_lines, read_typed
from apm.records.version import FIELD, refusal
from apm.reduce import load, units
from apm.testing import fixtures

JUNK = [None, 99, -3, 0, 1.5, 1e308, -1e-300, 2**63, 2**64 - 1, 2**64, "", "x" * 50, "ok", "failed", "ER",
        "positive", "SILENT", True, False, [], {}, {"a": [1]}, {"ttft_s": "fast"}, {"ttft_s": 1, "mode": 3},
        "\u202e\x00"]
"""Values a mutation puts in a field: every type, and the edge values of each check."""
UNREAD = [b"1e999", b"-1.8E+308", b"9" * 320, b"[1,\t2e400]", b"1e-999", b"1.5e300", b'"c0ffee3e1234"', b'"\xff"',
          b'"\xc3\xa9"', b'"\xed\xa0\x80"']
"""Raw values a mutation puts in a field no check reads: numbers beyond (and within) a double's range,
bytes that are not UTF-8 (and one that is); orjson refuses the first kind, msgspec skips them unread."""


def _junk(rng: random.Random, key: str) -> Any:
    """A value of :data:`JUNK` for field ``key``, but never a later format version: a line of one is refused,
    not skipped (tests/test_format_version.py)."""
    value = rng.choice(JUNK)
    return "later" if key == FIELD and refusal(value, "") else value


def _mutate(rng: random.Random, line: dict[str, Any]) -> bytes:
    """One corruption of a valid line: a field (or one of its block's) deleted or replaced, or the bytes cut
    or flipped."""
    key = rng.choice(sorted(line))
    raw = json.dumps(line).encode()
    nested = line[key] if isinstance(line[key], dict) and line[key] else None
    mutations = [
        lambda: json.dumps({k: v for k, v in line.items() if k != key}).encode(),
        lambda: json.dumps({**line, key: _junk(rng, key)}).encode(),
        lambda: json.dumps(rng.choice(JUNK)).encode(),
        lambda: raw[: rng.randrange(len(raw))],
        lambda: bytes(b ^ 0xFF if rng.random() < 0.02 else b for b in raw),
        lambda: raw.replace(b"{", b"[" * 995 + b"{", 1) + b"]" * 995,  # deeper than msgspec's limit
        lambda: raw[:-1] + b', "unread": ' + rng.choice(UNREAD) + b"}",
    ]
    if nested:
        inner = rng.choice(sorted(nested))
        mutations.append(lambda: json.dumps({**line, key: {**nested, inner: rng.choice(JUNK)}}).encode())
    return rng.choice(mutations)()


def _fuzzed(tmp_path: Path, kind: Kind, count: int = 400) -> Path:
    rng = random.Random(f"typed-{kind}")
    template = fixtures.small_run_set(tmp_path / "runs")
    originals = [json.loads(x) for f in sorted((template / "main" / kind).glob("*.jsonl"))
                 for x in f.read_text().splitlines()]
    path = tmp_path / f"{kind}.jsonl"
    with path.open("wb") as f:
        for _ in range(count):
            f.write(_mutate(rng, rng.choice(originals)).replace(b"\n", b" ") + b"\n")
        f.write(b'{"key": "torn')
    return path


@pytest.mark.parametrize("kind", ["records", "judgements", "memory"])
def test_the_typed_reader_skips_exactly_what_the_dict_reader_skips(tmp_path: Path, kind: Kind) -> None:
    path = _fuzzed(tmp_path, kind)
    by_dict: list[Skipped] = []
    by_type: list[Skipped] = []
    lines = list(read_lines(path, kind, by_dict))
    typed = read_typed(path, kind, ("output", "day_id", "frames"), by_type, keep_raw=True)
    assert [str(s) for s in by_type] == [str(s) for s in by_dict]
    assert 30 < len(lines) < 370 and len(by_dict) > 30  # the fuzz both keeps and skips lines
    assert len(typed.lines) == len(typed.run_of) == len(typed.raw) == len(lines)
    for line, got, run in zip(lines, typed.lines, typed.run_of):
        assert typed.runs[run] == line["run"]
        for name in got.__struct_fields__:
            value = getattr(got, name)
            if name != "run" and not isinstance(value, msgspec.Struct):
                assert value == line.get(name) and type(value) is type(line.get(name)) or _same_number(
                    value, line.get(name)), name


def _same_number(typed: Any, read: Any) -> bool:
    """A float field holds an integer as its float (the reducer's frames are float64 either way)."""
    return isinstance(typed, float) and isinstance(read, int) and float(read) == typed


@pytest.mark.parametrize("unread", UNREAD)
def test_a_field_no_check_reads_is_still_valid_json_to_both_readers(tmp_path: Path, unread: bytes) -> None:
    """orjson refuses a number beyond a double's range and a byte that is not UTF-8 anywhere in a line;
    the typed decoder skips such a field unread, so the typed reader leaves those lines to the dict path."""
    path = tmp_path / "records.jsonl"
    path.write_bytes(orjson.dumps({**fixtures.record("ER", "C1"), "frames": []})[:-1] + b', "x": ' + unread + b"}\n")
    by_dict: list[Skipped] = []
    by_type: list[Skipped] = []
    lines = list(read_lines(path, "records", by_dict))
    assert len(read_typed(path, "records", (), by_type).lines) == len(lines)
    assert [str(s) for s in by_type] == [str(s) for s in by_dict]
    refused = unread in (b"1e999", b"-1.8E+308", b"9" * 320, b"[1,\t2e400]", b'"\xff"', b'"\xed\xa0\x80"')
    assert [s.reason for s in by_dict] == (["not valid JSON (or not UTF-8)"] if refused else [])


def _count_run_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count how often the loader decodes a run block's declarations (once per derived column per block)."""
    calls = [0]
    real = load.from_record

    def counting(block: Any) -> Any:
        calls[0] += 1
        return real(block)

    monkeypatch.setattr(load, "from_record", counting)
    return calls


def _one_file_run(root: Path, lines: int) -> Path:
    records = [fixtures.record("ER", f"C{i}") for i in range(lines)]
    fixtures.write_jsonl(root / "records" / "shard-0.jsonl", records)
    return root


def test_the_run_block_is_derived_once_per_file_whatever_its_lines(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_run_reads(monkeypatch)
    few = load.load_records([_one_file_run(tmp_path / "few", 3)])
    per_file = calls[0]
    many = load.load_records([_one_file_run(tmp_path / "many", 300)])
    assert (len(few), len(many)) == (3, 300)
    assert calls[0] - per_file == per_file > 0  # 100× the lines, the same derivations
    assert many["memory_config"].astype(str).unique().tolist() == few["memory_config"].astype(str).unique().tolist()


def test_a_reduction_builds_its_candidate_units_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The unjudged count and both score views share one join of records with judgements (issue 24)."""
    calls = [0]
    real = units.with_judge_scores

    def counting(*args: Any) -> Any:
        calls[0] += 1
        return real(*args)

    monkeypatch.setattr(units, "with_judge_scores", counting)
    root = fixtures.small_run_set(tmp_path / "runs")
    assert main([str(root), "--out", str(tmp_path / "out"), "--bootstrap", "0", "--no-figures"]) == 0
    assert calls[0] == 1


@pytest.mark.parametrize("status", ["absent", "bogus", 3])
def test_a_judgements_status_is_typed_by_its_own_check_not_the_score_check(tmp_path: Path, status: Any) -> None:
    """The score check reads ``status`` too; the status check's type (required, ok or failed) still binds."""
    line = fixtures.judgement(fixtures.record("ER", "C1"), None, status="failed")
    line = {k: v for k, v in line.items() if k != "status"} if status == "absent" else {**line, "status": status}
    path = fixtures.write_jsonl(tmp_path / "judgements.jsonl", [line])
    by_type: list[Skipped] = []
    assert read_typed(path, "judgements", (), by_type).lines == []
    wrong = f"status: not one of ('ok', 'failed') ({str(status)!r})"
    assert [s.reason for s in by_type] == ["status: missing" if status == "absent" else wrong]


def _line_by_line(monkeypatch: pytest.MonkeyPatch, path: Path, kind: Kind) -> tuple[Any, list[str]]:
    """read_typed as it reads a file its one-pass read (lines._all_typed) declines: line by line."""
    skipped: list[Skipped] = []
    with monkeypatch.context() as m:
        m.setattr(lines, "_all_typed", lambda *_: None)
        typed = read_typed(path, kind, ("output", "day_id", "frames"), skipped, keep_raw=True)
    return typed, [str(s) for s in skipped]


@pytest.mark.parametrize("kind", ["records", "judgements", "memory"])
def test_a_file_read_in_one_pass_reads_as_it_does_line_by_line(tmp_path: Path, kind: Kind,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Each fuzzed line among valid ones, and the valid ones alone (with a torn or blank tail): the one-pass
    read (taken for the valid files) gives the same lines, run blocks, bytes and skipped lines."""
    rng = random.Random(f"one-pass-{kind}")
    template = fixtures.small_run_set(tmp_path / "runs")
    valid = [x.encode() for f in sorted((template / "main" / kind).glob("*.jsonl")) for x in f.read_text().splitlines()]
    taken = [0]
    real = lines._all_typed

    def counting(*args: Any) -> Any:
        found = real(*args)
        taken[0] += found is not None
        return found

    monkeypatch.setattr(lines, "_all_typed", counting)
    files = [b"\n".join(valid) + b"\n", b"\n".join(valid) + b"\n" + valid[0][:20], b"\n".join(valid) + b"\n \n"]
    files += [b"\n".join([*valid[:2], _mutate(rng, json.loads(rng.choice(valid))).replace(b"\n", b" ")]) + b"\n"
              for _ in range(150)]
    for i, data in enumerate(files):
        path = tmp_path / f"{i}.jsonl"
        path.write_bytes(data)
        skipped: list[Skipped] = []
        typed = read_typed(path, kind, ("output", "day_id", "frames"), skipped, keep_raw=True)
        slow, slow_skipped = _line_by_line(monkeypatch, path, kind)
        assert [str(s) for s in skipped] == slow_skipped, data
        assert (typed.lines, typed.runs, typed.run_of, typed.raw) == (slow.lines, slow.runs, slow.run_of, slow.raw)
    assert taken[0] > 10, taken  # valid files and harmless mutations were read in one pass; the rest line by line


def test_the_screen_names_each_line_with_a_number_beyond_a_double(tmp_path: Path) -> None:
    """An exponent of three digits or more ending a number (by any byte JSON allows after one), or 200 digits
    in a row, names its line; a hash's or a word's ``e123`` does not."""
    flagged = [b'{"a": 1e999}', b'{"a": [1.5E+300]}', b'{"a": -2e-0400 }', b'{"a":1e300\t}',
               b'{"b": "' + b"9" * 200 + b'"}', b'{"a": {"b": 7e0310}}', b'{"a":[0,1e999]}']
    clean = [b'{"h": "c0ffee3e1234"}', b'{"w": "see 12e45"}', b'{"a": 1e99}', b'{"a": "x1e999"}', b'{"a": 1.5e30}']
    data = b"\n".join(x for pair in zip(clean + clean, flagged) for x in pair) + b"\n"
    assert lines._beyond_double(data) == {2 * (i + 1) for i in range(len(flagged))}


def test_workers_read_a_load_as_it_is_read_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """apm-reduce's worker processes (load_runs' ``workers``) give the same frames, skipped lines and
    warnings, in the same order, as reading every file in the caller."""
    root = fixtures.small_run_set(tmp_path / "runs")
    with (root / "main" / "records" / "shard-0.jsonl").open("ab") as f:
        f.write(b'{"key": 3}\nnull\n{"torn')
    with (root / "main" / "judgements" / "judge.jsonl").open("ab") as f:
        f.write(b"[]\n")
    pools = [0]

    class Counted(load.ProcessPoolExecutor):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pools[0] += 1
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(load, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(load, "ProcessPoolExecutor", Counted)
    monkeypatch.setattr(load.os, "sched_getaffinity", lambda _: {0, 1})
    read = []
    for workers in (1, 2):
        with pytest.warns(UserWarning) as warned:
            runs = load.load_runs([root], workers=workers)
        read.append((runs, [str(w.message) for w in warned]))
    assert pools[0] == 1
    (here, here_warned), (there, there_warned) = read
    assert there_warned == here_warned and len(here_warned) == 2  # one a file with a skipped line
    assert [str(s) for s in there.skipped] == [str(s) for s in here.skipped] and len(here.skipped) == 4
    for frame in ("records", "judgements", "memory"):
        pd.testing.assert_frame_equal(getattr(there, frame), getattr(here, frame))


def test_the_typed_latency_block_keeps_its_timings_and_what_the_reader_asks_for(tmp_path: Path) -> None:
    """A block's field the reader names (``latency.mode``) is read into the typed block beside its checked
    timings, with the value the dict reader gives; the block's other fields are skipped unread."""
    path = fixtures.write_jsonl(tmp_path / "records.jsonl", [fixtures.record("ER", "C1")])
    typed = read_typed(path, "records", ("latency.mode", "latency.prep_s"))
    block = typed.lines[0].latency
    assert set(block.__struct_fields__) == {"ttft_s", "total_s", "rtf", "mode", "prep_s"}
    line = next(read_lines(path, "records"))
    assert (block.mode, block.prep_s, block.ttft_s) == (line["latency"]["mode"], line["latency"].get("prep_s"),
                                                          line["latency"]["ttft_s"])
    with pytest.raises(ValueError, match="latency has no field nope"):
        lines.typed_line("records", ("latency.nope",))


def test_files_typed_one_by_one_join_as_one_file_of_all_their_lines(tmp_path: Path) -> None:
    """Each file's frame is typed where it is read (a worker) and the frames joined by their categories'
    union: the same frame, categories and their order included, as one file holding every line in order,
    whatever each file's values (a column null throughout one file, values and methods only one file has)."""
    def shard(memory: str, trajectory: str, answer: str | None, decision: str | None) -> list[dict[str, Any]]:
        return [fixtures.record("ER", f"C{i}", trajectory=trajectory, run=fixtures.run_info(memory), answer=answer,
                                decision=decision) for i in range(3)]

    shards = [shard("raw_video", "T9", None, None), shard("none", "T1", "D", "SILENT"), shard("bm25", "T5", "A", None)]
    for i, lines_of in enumerate(shards):
        fixtures.write_jsonl(tmp_path / "split" / "records" / f"shard-{i}.jsonl", lines_of)
    fixtures.write_jsonl(tmp_path / "whole" / "records" / "shard-0.jsonl", [x for s in shards for x in s])
    split, whole = (load.load_records([tmp_path / name], detail=True) for name in ("split", "whole"))
    assert split["answer"].cat.categories.tolist() == ["A", "D"]
    assert split["memory"].cat.categories.tolist() == ["bm25", "none", "raw_video"]
    pd.testing.assert_frame_equal(split, whole, check_exact=True)


def test_categorical_parts_of_different_types_join_through_their_values() -> None:
    """Parts whose categories do not share a type (a column no check types) join as ``astype("category")``
    of their joined values would type them, never raise."""
    parts = [pd.Series([2, 1]).astype("category"), pd.Series(["b", None]).astype("category")]
    joined = pd.Series(load._union(parts))
    expected = pd.Series([2, 1, "b", None], dtype=object).astype("category")
    pd.testing.assert_series_equal(joined, expected)


@pytest.mark.parametrize("kind", ["records", "judgements", "memory"])
def test_a_file_read_in_blocks_reads_as_it_does_whole(tmp_path: Path, kind: Kind,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37.3: a file was held whole (three times: its bytes, their translation, their lines); read in
    blocks of a few lines, the fuzzed file gives the same lines, run blocks, bytes and skipped lines (their
    numbers the file's), whichever block a line, a torn tail or a bad line falls in."""
    path = _fuzzed(tmp_path, kind)
    whole: list[Skipped] = []
    typed = read_typed(path, kind, ("output", "day_id", "frames"), whole, keep_raw=True)
    for size in (1, 700, 4096):
        monkeypatch.setattr(lines, "BLOCK_BYTES", size)
        blocks: list[Skipped] = []
        small = read_typed(path, kind, ("output", "day_id", "frames"), blocks, keep_raw=True)
        assert [str(s) for s in blocks] == [str(s) for s in whole], size
        assert [typed.runs[i] for i in typed.run_of] == [small.runs[i] for i in small.run_of]
        assert (small.lines, small.raw) == (typed.lines, typed.raw)
