"""``apm-check-system CONFIG``: run the streaming-system contract's checks on a memory config (a
``conf/memory`` option, a YAML file or a ``_target_``) over a tiny synthetic release; one line per check,
exit status 0 only if every check that applies passes."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from apm.check import check_system
from apm.check.system import CHECKS
from apm.errors import OneLineParser, console_script
from apm.runner.config import ConfigError

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
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the runs (hydra.searchpath=[file://…], "
                        "memory settings are the config's own)")
    parser.add_argument("--backbone", default="random", help="the runs' backbone option (default: random, instant)")
    parser.add_argument("--release", type=Path, help="check over this release instead of a tiny synthetic one")
    parser.add_argument("--only", type=_checks, help=f"run only these checks, comma-separated ({', '.join(NAMES)})")
    parser.add_argument("--work", type=Path, help="keep the runs in this folder (default: a temporary one, removed)")
    return parser


def _print(lines: list[str]) -> None:
    for line in lines:
        print(line)


@console_script(PROG, usage=(ConfigError, HydraException, OmegaConfBaseException))
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.release is not None and not (args.release / "trajectories.json").is_file():
        raise ConfigError(f"--release {args.release}: no release there (no trajectories.json)")
    overrides = [f"backbone={args.backbone}", *args.overrides]
    with tempfile.TemporaryDirectory(prefix="apm-check-") as scratch:
        results = check_system(args.config, overrides, args.work or Path(scratch), args.release, args.only or CHECKS)
    _print([r.line for r in results])
    return 0 if all(r.status != "FAIL" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
