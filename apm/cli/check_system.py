"""``apm-check-system CONFIG``: run the streaming-system contract's checks on a memory config (a
``conf/memory`` option, a YAML file or a ``_target_``) over a tiny synthetic release. It prints the backbone
the runs used (USING), one line per check (PASS, FAIL, or SKIP with why) and what it cannot see (NOT
CHECKED); exit status 0 unless a check failed or was skipped because a run it reads failed."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from apm.check import CHECKS
from apm.cli import config_errors
from apm.errors import OneLineParser, console_script

PROG = "apm-check-system"


NAMES = {c.replace(" ", "-").lower(): c for c in CHECKS}
"""Each check as ``--only`` takes it (``pixel-causality``)."""


def _checks(text: str) -> list[str]:
    """``--only``'s comma-separated check names, as the checks name themselves."""
    names = [t.strip().lower() for t in text.split(",") if t.strip()]
    unknown = [t for t in names if t not in NAMES]
    if unknown or not names:
        named = ", ".join(unknown) or repr(text)
        raise argparse.ArgumentTypeError(f"no check {named} (the checks: {', '.join(NAMES)})")
    return [NAMES[t] for t in names]


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog=PROG, description=__doc__)
    parser.add_argument("config", help="a memory option (kv_cache), a YAML file (my_conf/memory/x.yaml) or a "
                        "_target_ (my_module.MySystem); its module must be importable (PYTHONPATH)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, before or after the options, applied in "
                        "order over the config (later wins): memory.<key>=<value> (+, ++, ~ too) sets the "
                        "system's own arguments, whichever way it is named; every other one goes to each run "
                        "as apm-run takes it (hydra.searchpath=[file://…], backbone.model=DIR, "
                        "generation.max_tokens=6)")
    parser.add_argument("--backbone", help="the runs' backbone option, as the override backbone=NAME (name it "
                        "once); default: tiny_qwen2vl_hf for a system declaring a representation kept inside a "
                        "transformers model (kv_cache, visual_features, parametric; built in the work folder "
                        "when none is found), else perceiver; the first line printed says which")
    parser.add_argument("--release", type=Path, help="check over this release instead of a tiny synthetic one")
    parser.add_argument("--only", type=_checks, help=f"run only these checks, comma-separated ({', '.join(NAMES)})")
    parser.add_argument("--work", type=Path, help="keep the runs in this folder (default: a temporary one, removed)")
    return parser


def _print(lines: list[str]) -> None:
    for line in lines:
        print(line)


@console_script(PROG, usage=config_errors)
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_intermixed_args(argv)  # options anywhere, as the docs' examples type them
    from apm.check.system import check_system
    from apm.runner.config import ConfigError

    if args.release is not None and not (args.release / "trajectories.json").is_file():
        raise ConfigError(f"--release {args.release}: no release there (no trajectories.json)")
    with tempfile.TemporaryDirectory(prefix="apm-check-") as scratch:
        report = check_system(args.config, args.overrides, args.work or Path(scratch), args.release,
                              args.only or CHECKS, args.backbone)
    _print(report.lines)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
