"""``apm-reduce``: scores.csv, the paper's tables and figures (and a paired comparison) from run dirs."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from apm.errors import OneLineParser, console_script, note_skipped
from apm.publish.report import report_run, wandb_usable
from apm.publish.wandb_runs import PublishOptions, publish_methods, read_all, sync_command
from apm.records.atomic import OutputRefused, claim_output, replaced_output, write_json_atomically
from apm.records.version import FormatError
from apm.reduce.compare import compare_runs
from apm.reduce.figures import write_figures
from apm.reduce.load import (
    WORKERS,
    MixedReleases,
    RunSet,
    UnmatchedPreference,
    check_preference,
    load_runs,
    one_release,
)
from apm.reduce.manifest import reduce_manifest
from apm.reduce.report_index import write_report_index
from apm.reduce.scores import judge_note, score_table
from apm.reduce.tables import coverage_gaps, method_rows, write_tables
from apm.reduce.units import unit_views

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
    p.add_argument("--wandb-mode", default=os.environ.get("WANDB_MODE", "offline"),
                   choices=["online", "offline", "disabled"], help="default: $WANDB_MODE, else offline")
    return p


def coverage_warnings(scores: pd.DataFrame) -> list[str]:
    """One line per method whose records do not cover its plan, or that has no plan to compare with."""
    labels = method_rows(scores).drop_duplicates("config_hash").set_index("config_hash")["method"].astype(str)
    gaps = coverage_gaps(scores)
    unplanned = scores.loc[scores["n_planned"].isna(), "config_hash"].astype(str).unique()
    return [f"apm-reduce: {labels.get(h, h)} [{h}]: {gap}" for h, gap in sorted(gaps.items())] + [
        f"apm-reduce: {labels.get(h, h)} [{h}]: coverage unknown (no jobs/*/plan.json with its run dir's config.json)"
        for h in sorted(unplanned)
    ]


def _report(args: argparse.Namespace, runs: RunSet | None, scores: pd.DataFrame | None, out: Path) -> list[str]:
    """Write the whole report into ``out``; returns the lines to print once it is in place."""
    said = []
    if runs is not None and scores is not None:
        scores.to_csv(out / "scores.csv", index=False)
        tables = write_tables(scores, out / "tables", judge_note(runs.judgements))
        figures = [] if args.no_figures else write_figures(scores, out / "figures", runs.memory)
        write_json_atomically(out / "manifest.json", reduce_manifest(args.runs, runs, args.seed, args.bootstrap))
        if args.compare:
            _compare(args, out)
        write_report_index(out, tables, figures)
        said.append(f"apm-reduce: {len(runs.records)} records, {scores.shape[0]} scores, "
                    f"{len(tables)} table files, {len(figures)} figures -> {args.out}")
    elif args.compare:
        _compare(args, out)
    if args.compare:
        said.append(f"apm-reduce: paired comparison -> {args.out / 'compare.csv'}")
    return said


REDUCE_SETTINGS = ("judge", "rubric", "seed", "bootstrap", "allow_unjudged", "complete")
"""The options of a reduction that its W&B report run carries as config."""


def _wandb(args: argparse.Namespace) -> list[str]:
    """``--wandb``, once the report is in place: the runs ``apm-publish`` builds (the same code) and the
    report's run, into one folder; nothing (a warning) without wandb, nothing with ``--wandb-mode
    disabled``."""
    if not wandb_usable(args.wandb_mode):
        return []
    opts = PublishOptions(
        project=args.wandb_project, entity=args.wandb_entity, group=args.wandb_group, mode=args.wandb_mode,
        directory=args.wandb_dir, judge=args.judge, rubric=args.rubric, seed=args.seed, bootstrap=args.bootstrap,
    )
    methods = read_all(args.runs, opts)
    settings = {k: getattr(args, k) for k in REDUCE_SETTINGS}
    published = publish_methods(methods, opts, [report_run(args.out, methods, opts, settings)])
    sync = sync_command(published)
    return [f"apm-reduce: W&B ({args.wandb_mode}): the report's run and {len(published) - 1} method runs"
            + (f"; upload with: {sync}" if sync else "")]


def _compare(args: argparse.Namespace, out: Path) -> None:
    a, b = (load_runs([p], args.judge, args.rubric, workers=WORKERS) for p in args.compare)
    compare_runs(a, b, args.seed, args.bootstrap).to_csv(out / "compare.csv", index=False)


@console_script(PROG)
def main(argv: Sequence[str] | None = None) -> int:
    """Reduce; user errors (a missing run dir, unjudged probes, a full disk) are one line and exit 2 (any
    other error one line and exit 1; ``--debug``: the traceback)."""
    args = parser().parse_args(argv)
    if not args.runs and not args.compare:
        parser().error("give RUN_DIR(s), --compare RUN_A RUN_B, or both")
    started = time.perf_counter()
    try:
        claim_output(args.out, PROG)
        note_skipped(PROG, args.runs)
        runs = load_runs(args.runs, args.judge, args.rubric, workers=WORKERS) if args.runs else None
        if runs is not None:
            one_release(runs.records)
            check_preference(runs.judgements, args.judge, args.rubric)
        units = unit_views(runs.records, runs.judgements) if runs is not None else None
        unjudged = units.unjudged if units is not None else 0
        if unjudged and not args.allow_unjudged:
            print(f"apm-reduce: {unjudged} gate-passing adaptive probe(s) have no judgement (none, a failed one, or "
                  "one that does not verify); run apm-judge on these run dirs first, it asks them again (or pass "
                  "--allow-unjudged to show – for the affected scores)", file=sys.stderr)
            return 2
        scores = None if runs is None else score_table(runs.records, runs.judgements, runs.memory, args.seed,
                                                       args.bootstrap, runs.plans, units)
        gaps = [] if scores is None else coverage_warnings(scores)
        for line in gaps:
            print(line, file=sys.stderr)
        if gaps and args.complete:
            print(f"apm-reduce: --complete: {len(gaps)} method(s) do not cover their plan (above); nothing written",
                  file=sys.stderr)
            return 2
        with replaced_output(args.out, PROG) as out:  # a kill or a full disk: the previous report
            said = _report(args, runs, scores, out)
        if args.wandb and runs is not None:  # after the swap: the report run's artifact is the report in place
            said += _wandb(args)
    except (OutputRefused, MixedReleases, UnmatchedPreference, FormatError) as e:
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
