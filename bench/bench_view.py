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
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir

from apm.cli.judge import main as judge
from apm.configs import CONF_DIR
from apm.runner.app import run_async, run_dir_of
from apm.synth import generate

PAPER_INSTANCES = 5_631
"""The paper's runtime instances: 5,371 probes of the 12 tasks and 260 EA questions."""
BASES = (("none", "random"), ("raw_video", "oracle"))


def real_runs(tmp: Path, frames: int) -> list[Path]:
    """The two judged runs every method is copied from."""
    tiny = generate(tmp / "tiny", seed=3, scale="tiny")
    dirs = []
    for memory, backbone in BASES:
        with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
            cfg = compose("config", overrides=[
                f"dataset.root={tiny}", f"output_root={tmp / 'base'}", f"frames.cache_dir={tmp / 'cache'}",
                "logging.wandb.mode=disabled", "logging.progress=false", f"memory={memory}",
                f"backbone={backbone}", f"backbone.max_frames={frames}"])
        asyncio.run(run_async(cfg))
        dirs.append(run_dir_of(cfg))
        assert judge([str(dirs[-1]), "judge=gate_only"]) == 0
    return dirs


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


MEASURED = ("import resource, sys; from apm.cli.view import main; code = main(sys.argv[1:]); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); sys.exit(code)")
"""``apm-view`` in a child that reports its own peak RSS (KiB) last on stderr."""


def build(runs: Path, site: Path, frames_per_cell: int) -> dict[str, Any]:
    """``apm-view`` in a subprocess: wall seconds, its peak RSS (MiB) and what it wrote."""
    started = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    done = subprocess.run([sys.executable, "-c", MEASURED, str(runs), "--out", str(site), "--frames-per-cell",
                           str(frames_per_cell)], check=True, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - started
    thumbs = list((site / "thumbs").glob("*.jpg"))
    chunks = list((site / "chunks").rglob("*.js"))
    data = sum(p.stat().st_size for p in site.rglob("*") if p.is_file()) - sum(p.stat().st_size for p in thumbs)
    return {"wall_s": wall, "rss_mib": int(done.stderr.split()[-1]) / 1024, "data_bytes": data,
            "thumb_bytes": sum(p.stat().st_size for p in thumbs), "thumbs": len(thumbs), "chunks": len(chunks),
            "largest_chunk": max(p.stat().st_size for p in chunks), "first_page_s": first_page_s(site)}


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
            f"data {at['data_bytes'] / 1e6:.0f} MB; thumbnails at most {cells * frames_per_cell * thumb / 1e6:.0f} MB "
            f"({frames_per_cell}/cell x {thumb / 1e3:.1f} kB, none shared)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--copies", type=int, nargs="+", default=[1, 4, 8])
    p.add_argument("--methods", type=int, default=10)
    p.add_argument("--frames", type=int, default=64, help="frames per request of the raw-video base run")
    p.add_argument("--frames-per-cell", type=int, default=8)
    p.add_argument("--keep", type=Path, help="copy the last site here")
    args = p.parse_args()
    print(f"# {platform.node()} · {os.cpu_count()} CPUs · Python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        bases = real_runs(tmp, args.frames)
        per_key = len({json.loads(t)["key"] for t in next((bases[0] / "records").glob("*.jsonl")).open()})
        rows = []
        for copies in args.copies:
            runs = sweep(bases, tmp / f"runs{copies}", args.methods, copies)
            got = build(runs, tmp / f"site{copies}", args.frames_per_cell)
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
