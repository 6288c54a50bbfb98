"""Benchmark: ``apm-view`` as the instances grow, to show it linear and extrapolate to the paper's scale.

Two real runs of the tiny synthetic release (SimpleStream × random, raw video × oracle at ``--frames``
frames, judged gate-only) are copied into ``--methods`` methods (each its own config hash) and each
instance key ``k`` times (``key~i``), for each ``k`` of ``--copies``; ``apm-view`` builds each in a
subprocess. Printed per build: instances, cells, wall seconds, peak RSS, site bytes (data and
thumbnails), chunks and the largest, and — with Chromium, chromedriver and selenium — the seconds until
the first page has rendered. The paper's 5,631 instances × 10 methods are extrapolated from the per-cell
figures. Thumbnails are bounded per cell (``--frames-per-cell``) but dedupe far more on the tiny
release's short videos than on the paper's, so the site's thumbnail bytes are also given as their upper
bound (every capped thumbnail distinct). Run: ``.venv/bin/python bench/bench_view.py [--copies 1 4 8]``.

``--paper-release DIR --cache DIR`` measures thumbnails where they matter instead: :data:`PAPER_METHODS`
(ten methods of distinct frame choices on instant backbones) are run on a paper-shaped release (its
frame cache already built at ``--cache``, only read), judged gate-only and viewed; the site's data and
thumbnails, per instance and extrapolated linearly in trajectories to the paper's 5,631 instances (a
real release's trajectories have distinct videos, so they share no thumbnail). Runs go under
``--work`` (kept: a second call views them again without rerunning).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench_publish import cpu_model, synthesise
from hydra import compose, initialize_config_dir
from process_tree import TreePeak

from apm.cli.judge import main as judge
from apm.configs import CONF_DIR
from apm.data.instances import release_instances
from apm.data.release import load_release
from apm.runner.app import run_async, run_dir_of
from apm.synth import generate
from apm.view import DEFAULT_THUMB_GRID

PAPER_INSTANCES = 5_631
"""The paper's runtime instances: 5,371 probes of the 12 tasks and 260 EA questions."""
BASES = (("none", "random"), ("raw_video", "oracle"))
PAPER_METHODS = (
    ("memory=none", "backbone=random", "backbone.max_frames=1024"),
    ("memory=none", "memory.recent_frames=32", "backbone=random", "backbone.max_frames=1024"),
    ("memory=raw_video", "backbone=random", "backbone.max_frames=1024"),
    ("memory=raw_video", "backbone=random", "backbone.max_frames=128"),
    ("memory=raw_video", "backbone=random", "backbone.max_frames=1024", "frames.layout=session_stable"),
    ("memory=raw_video", "backbone=random", "backbone.max_frames=128", "frames.layout=session_stable"),
    ("memory=restricted", "backbone=random", "backbone.max_frames=1024"),
    ("memory=text_summary", "backbone=random", "backbone.max_frames=1024"),
    ("memory=retrieval_bm25", "backbone=random", "backbone.max_frames=1024"),
    ("memory=oracle", "backbone=oracle", "backbone.max_frames=64"),
)
"""The methods of ``--paper-release``: SimpleStream (4 and 32 recent frames), raw video at 1,024 and 128
frames in both layouts, restricted memory, a text summary and BM25 retrieval (the random backbone
writing), and oracle evidence: frames from a handful per request to 1,024, recent and spread."""


def judged_run(release: Path, out: Path, cache: Path, overrides: Sequence[str]) -> Path:
    """One apm-run of ``release`` (frames from ``cache``), judged gate-only; its run dir."""
    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        cfg = compose("config", overrides=[
            f"dataset.root={release}", f"output_root={out}", f"frames.cache_dir={cache}",
            "logging.wandb.mode=disabled", "logging.progress=false", *overrides])
    asyncio.run(run_async(cfg))
    assert judge([str(run_dir_of(cfg)), "judge=gate_only"]) == 0
    return run_dir_of(cfg)


def real_runs(tmp: Path, frames: int) -> list[Path]:
    """The two judged runs every method is copied from."""
    tiny = generate(tmp / "tiny", seed=3, scale="tiny")
    return [judged_run(tiny, tmp / "base", tmp / "cache",
                       [f"memory={memory}", f"backbone={backbone}", f"backbone.max_frames={frames}"])
            for memory, backbone in BASES]


def _copied_lines(path: Path, config_hash: str, copies: int) -> str:
    out = []
    for text in path.read_text().splitlines():
        line = json.loads(text)
        line["run"]["config_hash"] = config_hash
        for i in range(copies):
            out.append(json.dumps({**line, "key": line["key"] if i == 0 else f"{line['key']}~{i}"}))
    return "\n".join(out) + "\n"


def sweep(bases: list[Path], root: Path, methods: int, copies: int) -> Path:
    """``methods`` run dirs under ``root``, each a base run under its own config hash, every key ``copies`` times."""
    for m in range(methods):
        base = bases[m % len(bases)]
        target = root / f"method{m:02d}"
        shutil.copytree(base, target, ignore=shutil.ignore_patterns("records", "judgements"))
        (target / "prompts").mkdir(exist_ok=True)
        config_hash = f"{m:04d}" + json.loads((base / "config.json").read_text())["config_hash"][4:]
        saved = json.loads((target / "config.json").read_text())
        (target / "config.json").write_text(json.dumps({**saved, "config_hash": config_hash}))
        (target / "records").mkdir()
        for path in (base / "records").glob("*.jsonl"):
            (target / "records" / path.name).write_text(_copied_lines(path, config_hash, copies))
    assert judge([*(str(root / f"method{m:02d}") for m in range(methods)), "judge=gate_only"]) == 0
    return root


def first_page_s(site: Path) -> float | None:
    """Seconds from navigation to the first page's rows shown (the page's own ``performance.now()``, the
    median of 3 loads; None without Chromium)."""
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        return None
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.support.ui import WebDriverWait
    except ImportError:
        return None
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        times = []
        for _ in range(3):
            driver.get("about:blank")
            driver.get((site / "index.html").as_uri())
            WebDriverWait(driver, 60, poll_frequency=0.05).until(
                lambda d: d.execute_script("return document.body.dataset.shownMs"))
            times.append(float(driver.execute_script("return document.body.dataset.shownMs")) / 1e3)
        return sorted(times)[1]
    finally:
        driver.quit()


VIEW = "import sys; from apm.cli.view import main; sys.exit(main(sys.argv[1:]))"
"""``apm-view`` in a child process of its own; its whole tree (the record loader's workers included) is
sampled by :class:`process_tree.TreePeak`."""


def build(runs: Path, site: Path, frames_per_cell: int, thumb_grid: int = DEFAULT_THUMB_GRID) -> dict[str, Any]:
    """``apm-view`` in a subprocess: wall seconds, the peak summed RSS (MiB) and CPU seconds of its process
    tree, and what it wrote."""
    started = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    child = subprocess.Popen([sys.executable, "-c", VIEW, str(runs), "--out", str(site), "--frames-per-cell",
                              str(frames_per_cell), "--thumb-grid", str(thumb_grid)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    with TreePeak(child.pid) as tree:
        _, stderr = child.communicate()
    if child.returncode:
        raise SystemExit(f"apm-view failed ({child.returncode}): {stderr.strip()[-500:]}")
    wall = time.perf_counter() - started
    thumbs = list((site / "thumbs").glob("*.jpg"))
    chunks = list((site / "chunks").rglob("*.js"))
    data = sum(p.stat().st_size for p in site.rglob("*") if p.is_file()) - sum(p.stat().st_size for p in thumbs)
    return {"wall_s": wall, "rss_mib": tree.peak_kib / 1024, "cpu_s": tree.cpu_s, "data_bytes": data,
            "thumb_bytes": sum(p.stat().st_size for p in thumbs), "thumbs": len(thumbs), "chunks": len(chunks),
            "largest_chunk": max(p.stat().st_size for p in chunks), "first_page_s": first_page_s(site)}


def publish_shaped(work: Path, methods: int, per_method: int, frames_per_cell: int) -> int:
    """``bench_publish``'s paper-shaped records (``methods`` × ``per_method``, kept under ``work``), each
    method given a ``config.json`` whose release does not exist (the page then has no question texts and
    no thumbnails: the records' own size is what is measured), viewed."""
    runs = work / "runs"
    if not runs.exists():
        synthesise(runs, methods, per_method)
    for run_dir in sorted(runs.glob("method*")):
        with (run_dir / "records" / "shard-0.jsonl").open() as f:
            config_hash = json.loads(f.readline())["run"]["config_hash"]
        (run_dir / "config.json").write_text(json.dumps({
            "config_hash": config_hash, "release_fingerprint": None,
            "config": {"dataset": {"root": str(work / "no-release")}}}))
    load = os.getloadavg()
    got = build(runs, work / "site", frames_per_cell)
    cells = sum(1 for p in runs.glob("method*/records/*.jsonl") for _ in p.open())
    first = got["first_page_s"] or float("nan")
    print(f"{cpu_model()}; load average at the start {load[0]:.2f}, at the end {os.getloadavg()[0]:.2f}")
    print(f"{cells} paper-shaped cells: {got['wall_s']:.1f} s, CPU {got['cpu_s']:.1f} s, peak RSS of the tree "
          f"{got['rss_mib']:.0f} MiB, data {got['data_bytes'] / 1e6:.1f} MB, chunks {got['chunks']} "
          f"(largest {got['largest_chunk'] / 1e6:.2f} MB), first page {first:.2f} s")
    return 0


def extrapolated(rows: list[tuple[int, dict[str, Any]]], cells: int, frames_per_cell: int) -> str:
    """The marginal cost per cell between the smallest and largest build, and the build of ``cells``
    extrapolated from it; thumbnails as their upper bound (every capped thumbnail its own file)."""
    (c0, g0), (c1, g1) = rows[0], rows[-1]
    per = {k: (g1[k] - g0[k]) / (c1 - c0) for k in ("wall_s", "rss_mib", "data_bytes")}
    at = {k: g0[k] + per[k] * (cells - c0) for k in per}
    thumb = g1["thumb_bytes"] / max(1, g1["thumbs"])
    return (f"marginal per cell: {per['wall_s'] * 1e3:.2f} ms, {per['data_bytes'] / 1e3:.2f} kB data, "
            f"{per['rss_mib'] * 1024:.1f} KiB RSS\n"
            f"{cells} cells, extrapolated: {at['wall_s']:.0f} s, RSS {at['rss_mib']:.0f} MiB, "
            f"data {at['data_bytes'] / 1e6:.0f} MB; thumbnails without a grid at most "
            f"{cells * frames_per_cell * thumb / 1e6:.0f} MB ({frames_per_cell}/cell x {thumb / 1e3:.1f} kB, none "
            "shared; copies share their videos: --paper-release measures thumbnails)")


def paper(release: Path, cache: Path, work: Path, frames_per_cell: int, thumb_grid: int, keep: Path | None) -> int:
    """:data:`PAPER_METHODS` on ``release``, viewed: the site per instance and extrapolated to the paper."""
    for overrides in PAPER_METHODS:
        judged_run(release, work / "runs", cache, overrides)
    site = keep or work / "site"
    got = build(work / "runs", site, frames_per_cell, thumb_grid)
    instances = len(release_instances(load_release(release, check_videos=False)))
    scale = PAPER_INSTANCES / instances
    first = got["first_page_s"] or float("nan")
    print(f"{instances} instances x {len(PAPER_METHODS)} methods, {frames_per_cell} thumbnails per cell, grid "
          f"{thumb_grid} s: "
          f"{got['wall_s']:.1f} s, RSS {got['rss_mib']:.0f} MiB, data {got['data_bytes'] / 1e6:.2f} MB, "
          f"thumbs {got['thumbs']} ({got['thumb_bytes'] / 1e6:.2f} MB), chunks {got['chunks']} "
          f"(largest {got['largest_chunk'] / 1e6:.2f} MB), first page {first:.2f} s")
    print(f"per instance: data {got['data_bytes'] / instances / 1e3:.1f} kB, {got['thumbs'] / instances:.1f} "
          f"thumbnails ({got['thumb_bytes'] / instances / 1e3:.1f} kB)")
    print(f"x {scale:.1f} (the paper's {PAPER_INSTANCES} instances): data {got['data_bytes'] * scale / 1e6:.0f} MB, "
          f"thumbnails {got['thumbs'] * scale:.0f} ({got['thumb_bytes'] * scale / 1e6:.0f} MB), site "
          f"{(got['data_bytes'] + got['thumb_bytes']) * scale / 1e6:.0f} MB")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--copies", type=int, nargs="+", default=[1, 4, 8])
    p.add_argument("--methods", type=int, default=10)
    p.add_argument("--frames", type=int, default=64, help="frames per request of the raw-video base run")
    p.add_argument("--frames-per-cell", type=int, default=8)
    p.add_argument("--thumb-grid", type=int, default=DEFAULT_THUMB_GRID, help="apm-view --thumb-grid (seconds)")
    p.add_argument("--keep", type=Path, help="copy the last site here")
    p.add_argument("--paper-release", type=Path, help="measure PAPER_METHODS on this paper-shaped release instead")
    p.add_argument("--cache", type=Path, help="with --paper-release: its frame cache (read, never written)")
    p.add_argument("--work", type=Path, help="with --paper-release: where the runs and site go (runs are reused)")
    p.add_argument("--publish-shaped", type=int, metavar="PER_METHOD",
                   help="view --methods x PER_METHOD of bench_publish's paper-shaped records under --work instead")
    args = p.parse_args()
    print(f"# {platform.node()} · {os.cpu_count()} CPUs · Python {platform.python_version()}")
    if args.publish_shaped:
        if not args.work:
            p.error("--publish-shaped needs --work")
        return publish_shaped(args.work, args.methods, args.publish_shaped, args.frames_per_cell)
    if args.paper_release:
        if not (args.cache and args.work):
            p.error("--paper-release needs --cache and --work")
        return paper(args.paper_release, args.cache, args.work, args.frames_per_cell, args.thumb_grid, args.keep)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        bases = real_runs(tmp, args.frames)
        per_key = len({json.loads(t)["key"] for t in next((bases[0] / "records").glob("*.jsonl")).open()})
        rows = []
        for copies in args.copies:
            runs = sweep(bases, tmp / f"runs{copies}", args.methods, copies)
            got = build(runs, tmp / f"site{copies}", args.frames_per_cell, args.thumb_grid)
            cells = per_key * copies * args.methods
            rows.append((cells, got))
            first = got["first_page_s"] or float("nan")
            print(f"instances {per_key * copies:6d} cells {cells:7d}  {got['wall_s']:7.1f} s  "
                  f"RSS {got['rss_mib']:6.0f} MiB  data {got['data_bytes'] / 1e6:7.1f} MB  "
                  f"thumbs {got['thumbs']} ({got['thumb_bytes'] / 1e6:.1f} MB)  chunks {got['chunks']} "
                  f"(largest {got['largest_chunk'] / 1e6:.2f} MB)  first page {first:.2f} s")
            shutil.rmtree(runs)
            if args.keep:
                shutil.copytree(tmp / f"site{copies}", args.keep, dirs_exist_ok=True)
        if len(rows) < 2:
            return 0
        print(extrapolated(rows, PAPER_INSTANCES * args.methods, args.frames_per_cell))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
