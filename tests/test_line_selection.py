"""One rule chooses a key's line for every reader (apm.records.select), on the integers as written: two lines
whose write stamps a float64 cannot tell apart (today's stamps, ~1.8e18 ns, are held to ~256 ns) are still
two lines, and apm-reduce, apm-publish and apm-view all choose the newer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from apm.publish.source import chosen_line, instance_lines, judge_notes, read_methods
from apm.records.select import REVISION, STAMP, latest_by, line_id
from apm.reduce.load import _typed, latest, load_judgements, load_records
from apm.testing import fixtures
from apm.view.collect import ViewedRun, _lines, chosen, chosen_records

OLDER = 1_800_000_000_000_000_000
NEWER = OLDER + 1
"""Two write stamps one nanosecond apart: equal as float64."""


def _run(root: Path) -> Path:
    """One judged probe with two record lines and two judgement lines of one revision, the newer of each
    written first (so a reader that ties them takes the older, read later)."""
    base = fixtures.judged_record("C1")
    records = [{**base, "attempts": 2, REVISION: 1, STAMP: NEWER}, {**base, "attempts": 1, REVISION: 1, STAMP: OLDER}]
    judgements = [
        fixtures.judgement(base, 5, justification="newer", **{REVISION: 1, STAMP: NEWER}),
        fixtures.judgement(base, 1, justification="older", **{REVISION: 1, STAMP: OLDER}),
    ]
    return fixtures.write_run(root, records, judgements)


def test_float64_cannot_tell_the_stamps_apart() -> None:
    assert float(NEWER) == float(OLDER) and NEWER != OLDER


def test_reduce_chooses_the_newer_line(tmp_path: Path) -> None:
    root = _run(tmp_path / "run")
    records = load_records([root], detail=True)
    assert records["attempts"].tolist() == [2]
    assert records[STAMP].tolist() == [NEWER]
    assert load_judgements([root], records=records)["score"].tolist() == [5]


def test_publish_chooses_the_newer_line_and_its_judges_text(tmp_path: Path) -> None:
    (method,) = read_methods(_run(tmp_path / "run"), None, None, 0, 0)
    assert instance_lines(method, lambda line: line["attempts"]) == [2]
    (judgement,) = method.judgements.to_dict("records")
    assert judgement["score"] == 5
    assert judge_notes(method)[chosen_line(method.config_hash, judgement)]["justification"] == "newer"


def test_view_shows_the_newer_lines(tmp_path: Path) -> None:
    root = _run(tmp_path / "run")
    records = load_records([root])
    viewed = ViewedRun(root, str(records["config_hash"].iloc[0]), {}, "run", None)
    assert [line["attempts"] for _, line in chosen_records(records, [viewed])] == [2]
    picked = chosen(load_judgements([root], records=records), _lines([viewed], "judgements"))
    assert [line["justification"] for _, line in picked.values()] == ["newer"]


def test_the_reducer_and_the_line_readers_apply_one_rule() -> None:
    """Revision first, then stamp (none: 0), the later line on a full tie: ``latest_by`` on dicts and the
    reducer's ``latest`` on a table choose the same lines."""
    cases = [
        ("a", 7, 1),
        ("b", None, None),
        ("a", None, None),
        ("b", 3, 1),
        ("c", None, None),
        ("c", None, None),
        ("d", 4, 1),
        ("d", 2, 1),
        ("e", 1, None),
        ("e", 1, None),
        ("f", 9, 1),
        ("f", 2, 2),
        ("g", 5, None),
        ("g", 1, 1),
        ("h", NEWER, 1),
        ("h", OLDER, 1),
    ]
    lines = [
        {"key": k, "n": n, "run": {"config_hash": "h"}, STAMP: s, REVISION: r} for n, (k, s, r) in enumerate(cases)
    ]
    by_lines = {k: v["n"] for k, v in latest_by(lines, lambda line: line["key"]).items()}
    assert by_lines == {"a": 0, "b": 3, "c": 5, "d": 6, "e": 9, "f": 11, "g": 13, "h": 14}
    as_read = {"key": [k for k, _, _ in cases], STAMP: [s for _, s, _ in cases], REVISION: [r for _, _, r in cases]}
    table = _typed(pd.DataFrame({name: pd.Series(values, dtype=object) for name, values in as_read.items()}))
    assert table[STAMP].dtype == table[REVISION].dtype == np.uint64
    kept = latest(table.assign(n=range(len(cases))), ["key"])
    assert dict(zip(kept["key"], kept["n"])) == by_lines
    assert line_id(lines[14]) == ("h", "h", 1, NEWER) != line_id(lines[15])


def test_a_line_without_a_stamp_leaves_the_others_integers(tmp_path: Path) -> None:
    """A file whose stamps are integers and null (a line from before stamps) is still read as integers: a frame
    built from such a column would make it float64, and the two lines a nanosecond apart would tie again."""
    base = fixtures.record("ER", "C1")
    lines = [
        {**base, "attempts": 2, STAMP: NEWER},
        {**base, "attempts": 1, STAMP: OLDER},
        {**fixtures.record("ER", "C2"), STAMP: None},
    ]
    records = load_records([fixtures.write_run(tmp_path / "run", lines)], detail=True)
    assert records["attempts"].tolist() == [2, 1] and records[STAMP].tolist() == [NEWER, 0]
