"""Fuzzed annotations: every mutation of the tiny synthetic release is either accepted (and then loads
and expands into instances) or refused with ``file:line: field: message`` lines and exit 2 — never a
traceback. The videos are never touched; only trajectories.json, candidates.jsonl and
ea_candidates.jsonl are mutated, in process, so a thousand releases take seconds."""

from __future__ import annotations

import copy
import json
import random
import re
import shutil
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from apm.cli.data import main as apm_data
from apm.data.instances import release_instances
from apm.data.release import CANDIDATES, EA_CANDIDATES, TRAJECTORIES, load_release
from apm.data.stats import release_stats
from apm.synth import generate

SEED = 1234
MUTATIONS = 1000
FILES = (TRAJECTORIES, CANDIDATES, EA_CANDIDATES)
PROBLEM = re.compile(r"^(trajectories\.json|candidates\.jsonl|ea_candidates\.jsonl):(\d+): [^:\n]+: \S.*$")
RAW = "\x00raw{}\x00"
"""A placeholder string that :func:`_serialise` replaces by raw JSON text json.dumps cannot write."""

STRINGS = ["", " ", ".", "..", "../x", "x/", "/tmp", "C:\\x", "a\x00b", "DAY0", "DAY01", "DAY" + "9" * 5000,
           "DAY99999999999", "25:61:00", "00:00:00", "23:59:59", "11:02:10\n", "S001", "S001 ", "s001", "syn001.",
           "SYN001", "A", "E", "Z", "ER", "EA", "TPG", "é", "e\u0301", "\ud800", "\u202e", "*", "[a]", "%2F", "x" * 300]
RAW_TEXT = ["9" * 5000, "-" + "1" * 4400, "1e999", "-1e999", "NaN", "Infinity", "1." + "0" * 5000 + "1",
            "[" * 5000 + "]" * 5000, "{\"a\":" * 3000 + "0" + "}" * 3000, "[" * 60 + "]" * 60]


def _random_string(rng: random.Random) -> str:
    """A string a release should never (or only just) contain: path-like, unicode, control, odd times."""
    if rng.random() < 0.6:
        return rng.choice(STRINGS)
    return "".join(chr(rng.choice([rng.randrange(0, 0x80), rng.randrange(0x80, 0x3000), rng.randrange(0xD800, 0xE000)]))
                   for _ in range(rng.randrange(0, 12)))


def _near_miss(rng: random.Random, text: str) -> str:
    """``text`` slightly wrong: made path-like, given a control character, a huge number, another case…"""
    tail = rng.choice(["/", ".", " ", "\n", "\x00", "9" * 5000, "99999999", "\u0301", "\ud800", "x" * 300])
    if rng.random() < 0.5:
        return text + tail
    return rng.choice(["/" + text, "../" + text, text.upper(), text.lower(), text[:-1], text * 2])


def _random_value(rng: random.Random, raws: list[str]) -> Any:
    """Any JSON value, or a placeholder for raw text (huge numbers, deep nesting) json.dumps cannot write."""
    kind = rng.randrange(9)
    if kind == 0:
        raws.append(rng.choice(RAW_TEXT))
        return RAW.format(len(raws) - 1)
    values = [None, True, rng.randrange(-5, 10**6), rng.random() * 1e6, _random_string(rng), [], {},
              [_random_string(rng)]]
    return values[kind - 1]


def _nodes(value: Any, path: tuple = ()) -> list[tuple]:
    """The path of every value inside ``value`` (keys and indices), the document's own path first."""
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _nodes(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _nodes(v, path + (i,))
    return out


def _get(value: Any, path: tuple) -> Any:
    for part in path:
        value = value[part]
    return value


def _mutate_value(rng: random.Random, doc: Any, raws: list[str]) -> Any:
    """One structural change: delete, duplicate, copy in a value from elsewhere, retype, or a new string."""
    nodes = _nodes(doc)
    strings = [p for p in nodes if isinstance(_get(doc, p), str)]
    path = rng.choice(strings if strings and rng.random() < 0.5 else nodes)  # most annotation content is strings
    if not path:
        return _random_value(rng, raws)
    parent, key = _get(doc, path[:-1]), path[-1]
    op = rng.choice(["delete", "duplicate", "copy", "copy", "retype", "retype", "string", "near", "near"])
    if op == "delete":
        del parent[key]
    elif op == "duplicate" and isinstance(parent, list):
        parent.insert(key, copy.deepcopy(parent[key]))
    elif op == "copy":  # plausible but wrong: another id, time, session or whole object
        parent[key] = copy.deepcopy(_get(doc, rng.choice(nodes)))
    elif op == "near" and isinstance(parent[key], str):
        parent[key] = _near_miss(rng, parent[key])
    elif op in ("string", "near"):
        parent[key] = _random_string(rng)
    else:
        parent[key] = _random_value(rng, raws)
    return doc


def _serialise(value: Any, raws: list[str], indent: int | None) -> str:
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    for i, raw in enumerate(raws):
        text = text.replace(json.dumps(RAW.format(i), ensure_ascii=False), raw)
    return text


def _mutate_json(rng: random.Random, name: str, text: str) -> str:
    """Structural mutations of one document (trajectories.json) or of one line of a ``.jsonl`` file."""
    raws: list[str] = []
    if name == TRAJECTORIES:
        doc = json.loads(text)
        for _ in range(rng.randrange(1, 4)):
            doc = _mutate_value(rng, doc, raws)
        return _serialise(doc, raws, 2) + "\n"
    lines = text.splitlines()
    i = rng.randrange(len(lines))
    doc = json.loads(lines[i])
    for _ in range(rng.randrange(1, 4)):
        doc = _mutate_value(rng, doc, raws)
    lines[i] = _serialise(doc, raws, None)
    return "\n".join(lines) + "\n"


def _mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    """A byte-level change: truncation, binary junk, an invalid UTF-8 sequence, a lost or doubled line."""
    at = rng.randrange(len(data) + 1)
    op = rng.randrange(5)
    if op == 0:
        return data[:at]
    if op == 1:
        return data[:at] + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8))) + data[at:]
    if op == 2:
        return data[:at] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\r", b"\n"]) + data[at:]
    lines = data.split(b"\n")
    j = rng.randrange(len(lines))
    return b"\n".join(lines[:j] + lines[j + 1 :] if op == 3 else lines[: j + 1] + lines[j:])


def mutation(rng: random.Random, name: str, original: bytes) -> bytes:
    """A mutated copy of one annotation file (structural three times out of four)."""
    if rng.random() < 0.75:
        return _mutate_json(rng, name, original.decode()).encode("utf-8", "surrogatepass")
    return _mutate_bytes(rng, original)


def _check_refusal(err: str, root: Path) -> None:
    """Exit 2 printed a header, then one ``file:line: field: message`` line per problem (50 at most)."""
    header, *lines = err.splitlines()
    n = int(re.match(rf"error: {re.escape(str(root))}: (\d+) problems? in the release$", header).group(1))
    assert 1 <= n and len(lines) == min(n, 50) + (n > 50), err
    if n > 50:
        assert lines.pop() == f"... and {n - 50} more problems"
    for line in lines:
        m = PROBLEM.match(line)
        assert m, line
        assert int(m.group(2)) <= (root / m.group(1)).read_bytes().count(b"\n") + 1, line


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("fuzz") / "tiny", seed=0, scale="tiny")


@pytest.mark.slow
def test_no_mutated_release_crashes_the_validator(template, tmp_path, capsys):
    root = tmp_path / "release"
    shutil.copytree(template / "videos", root / "videos")  # a videos folder linked out of the release is refused
    originals = {name: (template / name).read_bytes() for name in FILES}
    for name, data in originals.items():
        (root / name).write_bytes(data)
    rng = random.Random(SEED)
    outcomes: Counter[str] = Counter()
    crashes: dict[str, str] = {}
    started = time.perf_counter()
    for i in range(MUTATIONS):
        name = rng.choice(FILES)
        (root / name).write_bytes(mutation(rng, name, originals[name]))
        videos = name == TRAJECTORIES  # the videos' checks can only change with the sessions that name them
        try:
            code = apm_data(["validate", str(root)] + ([] if videos else ["--skip-videos"]))
            err = capsys.readouterr().err
            if code == 0:
                release = load_release(root, check_videos=videos)
                release_instances(release)
                release_stats(release)
                outcomes["accepted"] += 1
            else:
                assert code == 2, err
                _check_refusal(err, root)
                outcomes["rejected"] += 1
        except Exception as e:  # the harness collects every distinct crash, with a mutation that shows it
            frame = traceback.extract_tb(e.__traceback__)[-1]
            where = f"{type(e).__name__} at {Path(frame.filename).name}:{frame.lineno}"
            crashes.setdefault(where, f"#{i}: {str(e)[:120]}")
        (root / name).write_bytes(originals[name])
    took = time.perf_counter() - started
    print(f"{MUTATIONS} mutations in {took:.1f} s: {outcomes['accepted']} accepted, {outcomes['rejected']} rejected")
    assert not crashes, f"{len(crashes)} distinct crashes (where: first mutation): {json.dumps(crashes, indent=1)}"
    assert outcomes["accepted"] > 50 and outcomes["rejected"] > 500
