"""Benchmark: each console script's start-up, ``COMMAND --help``, this checkout against another (a baseline).

Each figure is the median over ``--repeats`` of the child process's CPU seconds (user + sys, from
``os.wait4``: on a shared machine the wall time is mostly other jobs'); the checkouts take turns per
command and repeat. Run: ``PYTHONPATH=$PWD .venv/bin/python bench/bench_startup.py --baseline
/path/to/other/checkout [--repeats 5] [--flag --version]``.
"""

from __future__ import annotations

import argparse
import configparser
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

from host import cpu_model

HERE = Path(__file__).resolve().parents[1]


def scripts(checkout: Path) -> dict[str, str]:
    """Each console script of ``checkout``'s setup.cfg and the module its ``main`` is in."""
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(checkout / "setup.cfg")
    lines = [line.split("=") for line in cfg["options.entry_points"]["console_scripts"].strip().splitlines()]
    return {name.strip(): target.strip().split(":")[0] for name, target in lines}


def cpu_seconds(checkout: Path, module: str, flag: str) -> float:
    """User + system CPU seconds of ``python -m module flag`` importing ``checkout``."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    child = subprocess.Popen(
        [sys.executable, "-m", module, flag],
        env=env,
        cwd=checkout,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"{module} {flag} exited {child.returncode} in {checkout}")
    return usage.ru_utime + usage.ru_stime



def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", type=Path, required=True, help="another checkout of apm (e.g. main's)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--flag", default="--help", help="what each command is given (default --help)")
    args = p.parse_args()
    checkouts = {"baseline": args.baseline.resolve(), "this": HERE}
    commands = scripts(HERE)
    load_before = os.getloadavg()[0]
    times: dict[tuple[str, str], list[float]] = {}
    for command, module in commands.items():
        for _ in range(args.repeats):
            for name, checkout in checkouts.items():
                times.setdefault((command, name), []).append(cpu_seconds(checkout, module, args.flag))
    print(
        f"{cpu_model()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"1-minute load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
    )
    print(f"| `COMMAND {args.flag}`, child CPU s (median of {args.repeats}) | baseline | this checkout |")
    print("| --- | ---: | ---: |")
    for command in commands:
        base, this = (statistics.median(times[command, name]) for name in checkouts)
        print(f"| `{command}` | {base:.2f} | {this:.2f} |")


if __name__ == "__main__":
    main()
