"""bench/bench_paper_scale.py's pure parts: a child's CPU and peak RSS from ``os.wait4``, the linearity
table's marginal costs and the harness share with its extrapolation to the paper's instances. (The bench
end to end on the tiny release takes over a minute here: docs/performance.md has its paper-scale run.)"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import bench_paper_scale as bench  # noqa: E402

BUSY = ("import time; block = bytearray(200 * 2**20); block[::4096] = b'x' * len(block[::4096]); "
        "end = time.process_time() + 0.3\nwhile time.process_time() < end: pass")
"""A child that touches 200 MiB and burns 0.3 CPU seconds."""


def test_a_childs_cpu_and_peak_rss_are_its_own(tmp_path: Path) -> None:
    """Even from a large process (as a test suite's is by then): its 600 MiB is not the child's figure."""
    ballast = bytearray(600 * 2**20)
    ballast[::4096] = b"x" * len(ballast[::4096])
    own = time.process_time()  # at least this process's start-up and three times the child's 200 MiB
    wall, cpu, rss = bench.measured([sys.executable, "-c", BUSY], tmp_path / "busy.log")
    del ballast
    assert 0.3 <= cpu < own + 0.3 and wall >= 0.3  # the child's burn counted, this process's CPU not
    assert 200 <= rss < 400


def test_a_failing_stage_says_so_with_its_log(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="exited 3") as e:
        bench.measured([sys.executable, "-c", "print('the reason'); raise SystemExit(3)"], tmp_path / "x.log")
    assert "the reason" in str(e.value)


def test_a_live_processs_cpu() -> None:
    before = bench.process_cpu_s(os.getpid())
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    assert bench.process_cpu_s(os.getpid()) - before >= 0.15


def test_records_counts_every_line_of_every_records_file(tmp_path: Path) -> None:
    for run, n in (("a/x", 3), ("b/y", 2)):
        (tmp_path / run / "records").mkdir(parents=True)
        (tmp_path / run / "records" / "shard-0-of-1.jsonl").write_text("{}\n" * n)
    (tmp_path / "a/x/judgements").mkdir()
    (tmp_path / "a/x/judgements/j.jsonl").write_text("{}\n" * 7)
    assert bench.records(tmp_path) == 5


def linear_sweep(copies: tuple[int, ...]) -> dict[int, dict[str, bench.Stage]]:
    """Stages whose CPU is exactly 1 s + 10 ms per instance (runs) and 2 s + 1 ms per instance (the rest)."""
    by_copies = {}
    for k in copies:
        n = 68 * k
        stages = {f"apm-run {m}": bench.Stage(5.0 * k, 1 + 0.01 * n, 100.0, n, 0.5) for m in bench.METHODS}
        stages |= {f"apm-{s}": bench.Stage(1.0 * k, 2 + 0.001 * 4 * n, 150.0, 4 * n) for s in bench.POST}
        by_copies[k] = stages
    return by_copies


def test_the_tables_show_every_stage_linear() -> None:
    by_copies = linear_sweep((1, 2, 4))
    stages = bench.stage_table(by_copies)
    assert len(stages) == 2 + 3 * (len(bench.METHODS) + len(bench.POST))
    assert "| apm-run raw_video | 4 | 272 | 20.0 | 3.7 | 100 | 0.5 |" in stages
    assert "| apm-view | 2 | 544 | 2.0 | 2.5 | 150 |  |" in stages
    linear = bench.linear_table(by_copies)
    assert "marginal CPU/instance ×1→×2 (ms) | marginal CPU/instance ×2→×4 (ms)" in linear[0]
    run = next(r for r in linear if r.startswith("| apm-run none |")).split(" | ")
    assert run[1:4] == [f"{1000 * (1 + 0.68) / 68:.1f}", f"{1000 * (1 + 1.36) / 136:.1f}",
                        f"{1000 * (1 + 2.72) / 272:.1f}"]
    assert run[5:7] == ["10.0", "10.0"]  # the same marginal cost on both steps: linear
    judge = next(r for r in linear if r.startswith("| apm-judge |")).split(" | ")
    assert judge[5:7] == ["1.0", "1.0"]


def test_the_share_is_measured_and_extrapolated_to_the_papers_instances() -> None:
    by_copies = linear_sweep((1, 4))
    measured = (4 * (1 + 2.72) + 4 * (2 + 1.088)) / (4 * 272)
    paper = (4 * (1 + 0.01 * 5631) + 4 * (2 + 0.001 * 4 * 5631)) / (4 * 5631)
    assert bench.harness_cpu_per_probe(by_copies[4]) == pytest.approx(measured)
    assert bench.paper_cpu_per_probe(by_copies[1], by_copies[4]) == pytest.approx(paper)
    rows = bench.share_table(by_copies, None)
    assert [r.split(":")[0] for r in rows[2:5]] == [f"| assumed {g:g} s (not measured)" for g in (0.5, 1, 2)]
    assert rows[3] == (f"| assumed 1 s (not measured): 1.000 | {100 * measured:.2f} % | {100 * paper:.2f} % "
                       "| not met / met |")
    assert rows[-1] == (f"| where the harness is exactly 2 % | {measured / 0.02:.3f} GPU s per probe "
                        f"| {paper / 0.02:.3f} GPU s per probe | |")


def test_a_gpu_figure_gives_each_method_and_their_mean(tmp_path: Path) -> None:
    figure = tmp_path / "bench_gpu_hf.json"
    figure.write_text(json.dumps({"machine": "H200", "methods": {"SimpleStream": {"gpu_s_per_probe": 0.2},
                                                                 "raw video · uniform": {"gpu_s_per_probe": 1.0}}}))
    assert bench.gpu_seconds(figure) == [("SimpleStream (bench_gpu_hf.json)", 0.2),
                                         ("raw video · uniform (bench_gpu_hf.json)", 1.0),
                                         ("mean of the 2 (bench_gpu_hf.json)", pytest.approx(0.6))]
    rows = bench.share_table(linear_sweep((2,)), figure)
    assert len(rows) == 2 + 3 + 1 and "extrapolated" not in rows[0]  # one k: measured only
