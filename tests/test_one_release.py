"""One release per comparison (issue 19): reduce refuses to build one table over runs of two releases,
and ``--compare`` refuses to pair their keys, each in one line naming the releases."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.runner import compose_run, run

from apm.cli.reduce import main as reduce_main
from apm.reduce.load import load_records
from apm.synth import generate

SETUP = ["memory=none", "backbone=random", "dataset.tasks=[ER,CT]"]


@pytest.fixture(scope="module")
def two_releases(tmp_path_factory) -> tuple[Path, Path, Path]:
    """One method run on two releases (same names, other annotations), and a second method on the first."""
    tmp = tmp_path_factory.mktemp("releases")
    first, second = (generate(tmp / name / "tiny", seed=seed, scale="tiny") for name, seed in (("a", 1), ("b", 2)))
    on_first = run(compose_run(first, tmp / "runs", tmp / "cache", SETUP))
    on_second = run(compose_run(second, tmp / "runs", tmp / "cache", SETUP))
    other_method = run(compose_run(first, tmp / "runs", tmp / "cache", ["memory=none", "backbone=oracle",
                                                                        "dataset.tasks=[ER,CT]"]))
    return on_first, on_second, other_method


def _fingerprint(run_dir: Path) -> str:
    return json.loads((run_dir / "config.json").read_text())["release_fingerprint"]


def test_one_table_over_two_releases_is_refused_naming_them(two_releases, tmp_path, capsys):
    on_first, on_second, _ = two_releases
    assert _fingerprint(on_first) != _fingerprint(on_second)
    assert reduce_main([str(on_first), str(on_second), "--out", str(tmp_path / "report"), "--no-figures"]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "2 different releases" in said[0], said
    assert _fingerprint(on_first) in said[0] and _fingerprint(on_second) in said[0], said
    assert not (tmp_path / "report").exists()
    assert reduce_main([str(on_first.parents[2]), "--out", str(tmp_path / "sweep"), "--no-figures"]) == 2


def test_compare_across_releases_is_refused(two_releases, tmp_path, capsys):
    on_first, on_second, _ = two_releases
    assert reduce_main(["--compare", str(on_first), str(on_second), "--out", str(tmp_path / "cmp")]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("apm-reduce: --compare: RUN_A and RUN_B answered 2 different"), said
    assert not (tmp_path / "cmp").exists()


def test_runs_of_one_release_still_reduce_and_compare(two_releases, tmp_path):
    on_first, _, other_method = two_releases
    assert reduce_main([str(on_first), str(other_method), "--out", str(tmp_path / "report"), "--no-figures"]) == 0
    assert reduce_main(["--compare", str(on_first), str(other_method), "--out", str(tmp_path / "cmp"),
                        "--bootstrap", "20"]) == 0
    assert (tmp_path / "cmp" / "compare.csv").exists()


def test_lines_from_before_records_named_their_release_take_config_json(two_releases, tmp_path):
    on_first, _, _ = two_releases
    old = tmp_path / on_first.name
    shutil.copytree(on_first, old)
    for path in (old / "records").glob("*.jsonl"):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        for line in lines:
            del line["run"]["release_fingerprint"]
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert set(load_records([old])["release_fingerprint"].astype(str)) == {_fingerprint(on_first)}
