"""``apm-judge RUN_DIR… judge=<config> [overrides…]``: judge the records of finished runs."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from hydra.utils import instantiate
from omegaconf.errors import OmegaConfBaseException

from apm.backbones.base import EndpointError
from apm.configs import CONF_DIR
from apm.data.problems import ReleaseError
from apm.errors import OneLineParser, console_script, note_skipped
from apm.judge.stage import JudgeStage, ReleaseChanged
from apm.records.atomic import read_run_config
from apm.records.redact import redact_logging
from apm.records.rundir import find_runs
from apm.records.version import FormatError
from apm.runner.config import register


def judge_backbone(overrides: list[str]):
    """Instantiate the judge from the ``judge`` config group (e.g. ``judge=deepseek_v4_flash``), composed
    with the run's config (whose schema the command line tool, not the judge stage, registers)."""
    register()
    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        cfg = compose("config", overrides=overrides)
    if cfg.judge is None:
        raise SystemExit("apm-judge: choose a judge, e.g. judge=deepseek_v4_flash")
    return instantiate(cfg.judge, _convert_="all")


async def _main(run_dirs: list[Path], overrides: list[str], ns: argparse.Namespace) -> int:
    judge = judge_backbone(overrides)
    stage = JudgeStage(judge, concurrency=ns.concurrency, invalid_retries=ns.invalid_retries,  # registers its key
                       fail_fast=ns.fail_fast, preflight=not ns.no_preflight, exclusive=True)
    await judge.start()
    try:
        stats = await stage.run(run_dirs)
    finally:
        await judge.close()
    print(f"apm-judge ({judge.name}): {stats.judged} judged, {stats.failed} failed (unjudged: asked again on the "
          f"next run), {stats.cached} already judged, {stats.rejected} on record not verifying (judged again), "
          f"{stats.calls} model calls")
    return 1 if stats.failed else 0


@console_script("apm-judge",
                usage=(FileNotFoundError, ReleaseError, ReleaseChanged, EndpointError, HydraException,
                       OmegaConfBaseException, FormatError))
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
    redact_logging()  # the judge's key (registered by the stage) never reaches a log line
    overrides = [a for a in ns.args if "=" in a]
    folders = [a for a in ns.args if "=" not in a]
    if not folders:
        p.error("no run directories given")
    note_skipped("apm-judge", folders, need_config=True)
    run_dirs = find_runs(folders, need_config=True).paths
    if not run_dirs:
        p.error(f"no run directories (with config.json) at or below {', '.join(folders)}")
    for run_dir in run_dirs:
        read_run_config(run_dir)  # a damaged config.json is refused before any lock is taken (nothing written)
    return asyncio.run(_main(run_dirs, overrides, ns))


if __name__ == "__main__":
    sys.exit(main())
