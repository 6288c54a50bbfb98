"""``apm-publish RUN_DIR…``: build W&B runs from the records — one per method and stage, replacing
what an earlier publish wrote (docs/publish.md)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from apm.errors import OneLineParser, console_script, note_skipped

if TYPE_CHECKING:
    from apm.publish.wandb_runs import Published, PublishOptions


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="apm-publish", description=__doc__)
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run dirs, or folders above them")
    p.add_argument("--project", default="apm-bench")
    p.add_argument("--entity")
    p.add_argument("--group", help="the sweep (default: the release each method ran on, <dataset>-<fingerprint>)")
    p.add_argument("--mode", default=os.environ.get("WANDB_MODE", "offline"), choices=["offline", "online"],
                   help="default: $WANDB_MODE, else offline (then wandb sync)")
    p.add_argument("--dir", type=Path,
                   help="offline runs go to DIR/wandb (default: $WANDB_DIR/apm-publish, else the sweep root's "
                        "publish/); DIR must be new, empty or an earlier apm-publish folder")
    p.add_argument("--judge", help="prefer judgements by this judge (as apm-reduce)")
    p.add_argument("--rubric", help="prefer judgements with this rubric version")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--bootstrap", type=int, default=1000, metavar="N", help="replicates; 0: no intervals")
    p.add_argument("--all-frames", action="store_true", help="thumbnails for every instance, not only wrong or failed")
    p.add_argument("--cache-dir", help="frame cache for thumbnails (default: the run's frames.cache_dir)")
    p.add_argument("--wandb-verbose", action="store_true",
                   help="show wandb's own 'wandb:' lines (default: silent; apm-publish prints what it wrote)")
    p.add_argument("--report", action="store_true",
                   help="also a W&B Report and workspace view of Tables 3-4 and Figure 2 per group (offline: "
                        "their specification, DIR/report.json)")
    return p


def groups_by_home(published: list[Published]) -> dict[Path, set[str]]:
    """The groups published into each publish folder."""
    found: dict[Path, set[str]] = {}
    for p in published:
        found.setdefault(p.home, set()).add(p.group)
    return found


def options(args: argparse.Namespace) -> PublishOptions:
    from apm.publish.wandb_runs import PublishOptions

    return PublishOptions(
        project=args.project, entity=args.entity, group=args.group, mode=args.mode, directory=args.dir,
        judge=args.judge, rubric=args.rubric, seed=args.seed, bootstrap=args.bootstrap,
        all_frames=args.all_frames, cache_dir=args.cache_dir, verbose=args.wandb_verbose,
    )


@console_script("apm-publish")
def main(argv: Sequence[str] | None = None) -> int:
    """Publish; no records, a missing run dir or wandb, or a config in two run dirs is one line, exit 2
    (any other error one line and exit 1; ``--debug``: the traceback)."""
    args = parser().parse_args(argv)
    note_skipped("apm-publish", args.runs)
    from apm.publish.dashboard import build
    from apm.publish.wandb_runs import publish, sync_command

    try:
        published = publish(args.runs, options(args))
    except FileNotFoundError as e:
        print(f"apm-publish: no such run directory: {e.filename or e}", file=sys.stderr)
        return 2
    except (ImportError, ValueError) as e:  # UnmatchedPreference among them
        print(f"apm-publish: {e}", file=sys.stderr)
        return 2
    if not published:
        print(f"apm-publish: no records under {', '.join(map(str, args.runs))}", file=sys.stderr)
        return 2
    for p in published:
        print(f"{p.job_type:>6}  {p.run_id}  {p.name}" + (f"  {p.folder}" if p.folder else ""))
    methods = len({p.run_id.split("-")[0] for p in published})
    sync = sync_command(published)
    print(f"apm-publish: {len(published)} W&B runs of {methods} methods ({args.mode})"
          + (f"; upload with: {sync}" if sync else ""), file=sys.stderr)
    if args.report:
        for home, groups in groups_by_home(published).items():
            built = build(groups, args.project, args.entity, args.mode, home)
            print(f"apm-publish: the Report of {', '.join(sorted(groups))}: {' '.join(built)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
