"""``apm-judge RUN_DIR… judge=<config> [overrides…]``: judge the records of finished runs (``apm.judge_runs``)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from apm.errors import OneLineParser, UsageErrors, console_script, note_skipped
from apm.records.rundir import find_runs


def _usage_errors() -> UsageErrors:
    """A missing path, a release, endpoint or config error: the command or its input is wrong (exit 2)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from apm.api.judge import NoJudge
    from apm.backbones.base import EndpointError
    from apm.data.problems import ReleaseError
    from apm.judge.stage import ReleaseChanged
    from apm.records.version import FormatError

    return (FileNotFoundError, ReleaseError, ReleaseChanged, EndpointError, HydraException, OmegaConfBaseException,
            NoJudge, FormatError)


@console_script("apm-judge", usage=_usage_errors)
def main(argv: Sequence[str] | None = None) -> int:
    """Judge; every error is one line (``--debug``: the traceback), a missing path, a release or config error
    exit 2."""
    p = OneLineParser(prog="apm-judge", description=__doc__)
    p.add_argument("args", nargs="+",
                   help="run dirs or folders above them, then Hydra overrides such as judge=deepseek_v4_flash")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--invalid-retries", type=int, default=2)
    p.add_argument("--fail-fast", type=int, default=3, metavar="N",
                   help="stop after N consecutive auth / not-found / connection failures (0: never)")
    p.add_argument("--no-preflight", action="store_true",
                   help="skip the check of the judge's endpoint, key and model before the first call")
    ns = p.parse_args(argv)
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    overrides = [a for a in ns.args if "=" in a]
    folders = [a for a in ns.args if "=" not in a]
    if not folders:
        p.error("no run directories given")
    note_skipped("apm-judge", folders, need_config=True)
    if not find_runs(folders, need_config=True).paths:
        p.error(f"no run directories (with config.json) at or below {', '.join(folders)}")
    from apm.api.judge import judge_runs

    done = judge_runs(folders, overrides=overrides, concurrency=ns.concurrency, invalid_retries=ns.invalid_retries,
                      fail_fast=ns.fail_fast, preflight=not ns.no_preflight)
    print(done.summary)
    return 1 if done.failed else 0


if __name__ == "__main__":
    sys.exit(main())
