"""``apm-reduce``: scores.csv, the paper's tables and figures (and a paired comparison) from run dirs
(``apm.reduce_runs``), and their W&B runs (``--wandb``)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from apm.errors import OneLineParser, console_script
from apm.records.atomic import DamagedRunFile, OutputRefused

if TYPE_CHECKING:
    from apm.api.reduce import ReduceResult

PROG = "apm-reduce"


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=__doc__)
    p.add_argument("runs", nargs="*", type=Path, metavar="RUN_DIR", help="run dirs, or folders above them")
    p.add_argument("--out", type=Path, required=True,
                   help="report folder: new, empty, or an earlier apm-reduce report (replaced whole)")
    p.add_argument("--judge", help="prefer judgements by this judge model")
    p.add_argument("--rubric", help="prefer judgements with this rubric version")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--bootstrap", type=int, default=1000, metavar="N", help="replicates; 0: no intervals")
    p.add_argument("--compare", nargs=2, type=Path, metavar=("RUN_A", "RUN_B"), help="paired bootstrap B − A")
    p.add_argument("--allow-unjudged", action="store_true",
                   help="reduce although gate-passing adaptive probes have no judgement ('–' in those cells)")
    p.add_argument("--complete", action="store_true",
                   help="refuse (exit 2, nothing written) when any method's records do not cover its plan")
    p.add_argument("--no-figures", action="store_true", help="skip the figures")
    p.add_argument("--wandb", action="store_true",
                   help="publish W&B runs as apm-publish does (one per method and stage) and the report's run")
    p.add_argument("--wandb-project", default="apm-bench")
    p.add_argument("--wandb-entity")
    p.add_argument("--wandb-group", help="the sweep (default: the release the methods ran on)")
    p.add_argument("--wandb-dir", type=Path,
                   help="offline runs go to DIR/wandb (default: $WANDB_DIR/apm-publish, else the sweep root's "
                        "publish/), as apm-publish --dir")
    p.add_argument("--wandb-verbose", action="store_true", help="show wandb's own 'wandb:' lines (default: silent)")
    p.add_argument("--wandb-mode", default=os.environ.get("WANDB_MODE", "offline"),
                   choices=["online", "offline", "disabled"], help="default: $WANDB_MODE, else offline")
    return p


def _said(args: argparse.Namespace, done: ReduceResult) -> list[str]:
    """The lines printed once the report is in place."""
    said = []
    if done.scores is not None:
        said.append(f"apm-reduce: {done.records} records, {done.scores.shape[0]} scores, "
                    f"{len({p.stem for p in done.tables})} tables, {len({p.stem for p in done.figures})} figures "
                    f"-> {args.out}")
    if args.compare:
        said.append(f"apm-reduce: {done.headline}")
        said.append(f"apm-reduce: paired comparison -> {args.out / 'compare.csv'}")
    return said


REDUCE_SETTINGS = ("judge", "rubric", "seed", "bootstrap", "allow_unjudged", "complete")
"""The options of a reduction that its W&B report run carries as config."""


def _wandb(args: argparse.Namespace) -> list[str]:
    """``--wandb``, once the report is in place: the runs ``apm-publish`` builds (the same code) and the
    report's run, into one folder; nothing (a warning) without wandb, nothing with ``--wandb-mode
    disabled``."""
    from apm.publish.report import report_run, wandb_usable
    from apm.publish.wandb_runs import PublishOptions, publish_methods, read_all, sync_command

    if not wandb_usable(args.wandb_mode):
        return []
    opts = PublishOptions(
        project=args.wandb_project, entity=args.wandb_entity, group=args.wandb_group, mode=args.wandb_mode,
        directory=args.wandb_dir, judge=args.judge, rubric=args.rubric, seed=args.seed, bootstrap=args.bootstrap,
        verbose=args.wandb_verbose,
    )
    methods = read_all(args.runs, opts)
    settings = {k: getattr(args, k) for k in REDUCE_SETTINGS}
    published = publish_methods(methods, opts, [report_run(args.out, methods, opts, settings)])
    sync = sync_command(published)
    return [f"apm-reduce: W&B ({args.wandb_mode}): the report's run and {len(published) - 1} method runs"
            + (f"; upload with: {sync}" if sync else "")]


@console_script(PROG)
def main(argv: Sequence[str] | None = None) -> int:
    """Reduce; user errors (a missing run dir, unjudged probes, a full disk) are one line and exit 2 (any
    other error one line and exit 1; ``--debug``: the traceback)."""
    args = parser().parse_args(argv)
    if not args.runs and not args.compare:
        parser().error("give RUN_DIR(s), --compare RUN_A RUN_B, or both")
    from apm.api.reduce import Incomplete, Unjudged, reduce_runs
    from apm.records.version import FormatError
    from apm.reduce.load import MixedIdentities, MixedReleases, UnmatchedPreference

    started = time.perf_counter()
    try:
        done = reduce_runs(args.runs, args.out, judge=args.judge, rubric=args.rubric, seed=args.seed,
                           bootstrap=args.bootstrap, compare=args.compare, allow_unjudged=args.allow_unjudged,
                           complete=args.complete, figures=not args.no_figures,
                           warn=lambda line: print(f"{PROG}: {line}", file=sys.stderr))
        said = _said(args, done)
        if args.wandb and done.scores is not None:  # after the swap: the report run's artifact is the report in place
            said += _wandb(args)
    except Incomplete as e:
        print(f"{PROG}: --complete: {e} (above); nothing written", file=sys.stderr)
        return 2
    except (OutputRefused, MixedReleases, MixedIdentities, UnmatchedPreference, Unjudged, DamagedRunFile,
            FormatError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    except FileNotFoundError as e:
        print(f"{PROG}: no such run directory: {e.filename or e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"apm-reduce: cannot write {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    print("\n".join(said))
    print(f"apm-reduce: done in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
