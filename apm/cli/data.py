"""``apm-data``: synthesise, validate, summarise, list the instance keys of and cache APM-Bench releases."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from apm.data.problems import ReleaseError
from apm.data.tasks import EA, TASKS
from apm.errors import DEBUG_FLAG, OneLineParser, guarded


def _synth(args: argparse.Namespace) -> int:
    from apm.synth import generate

    root = generate(Path(args.out), seed=args.seed, scale=args.scale, limit_trajectories=args.trajectories)
    print(f"wrote synthetic release ({args.scale}, seed {args.seed}) to {root}")
    return 0


def _validate(args: argparse.Namespace) -> int:
    from apm.data.release import load_release

    release = load_release(args.root, check_videos=not args.skip_videos)
    n = len(release.candidates) + len(release.ea_candidates)
    print(f"{args.root}: valid ({len(release.trajectories)} trajectories, {n} candidates)")
    return 0


def _stats(args: argparse.Namespace) -> int:
    from apm.data.release import load_release
    from apm.data.stats import format_stats, release_stats

    stats = release_stats(load_release(args.root, check_videos=False))
    print(json.dumps(stats, indent=2) if args.json else format_stats(stats))
    return 0


def _keys(args: argparse.Namespace) -> int:
    """Every instance key of the release (the ``print_request=`` and record key), with its task; a task or
    trajectory filter that matches nothing is refused rather than printing nothing."""
    from apm.data.instances import release_instances
    from apm.data.release import load_release

    release = load_release(args.root, check_videos=False)
    chosen = [i for i in release_instances(release)
              if (not args.task or i.task in args.task) and (not args.trajectory or i.trajectory_id in args.trajectory)]
    if not chosen:
        print("apm-data: error: no instance matches --task/--trajectory", file=sys.stderr)
        return 2
    for inst in chosen:
        print(f"{inst.key}\t{inst.task}")
    print(f"apm-data: {len(chosen)} instance keys; show one's request with "
          f"apm-run dataset.root={args.root} print_request=KEY", file=sys.stderr)
    return 0


def _cache(args: argparse.Namespace) -> int:
    from apm.data.release import load_release
    from apm.video.cache import build_release_cache, default_cache_dir

    release = load_release(args.root)
    cache_dir = default_cache_dir(args.cache_dir)
    report = build_release_cache(release, cache_dir, fps=args.fps, max_side=args.max_side, workers=args.workers)
    for failure in report.failed:
        print(f"error: {failure}", file=sys.stderr)
    print(f"frame cache in {cache_dir}: {len(report.ready)} videos ready, {len(report.failed)} failed")
    return 1 if report.failed else 0


def _overlay(args: argparse.Namespace) -> int:
    from apm.video.overlay import overlay_timestamps

    overlay_timestamps(Path(args.input), Path(args.output), args.day, args.start)
    print(f"wrote {args.output}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="apm-data", description=__doc__)
    parser.add_argument(DEBUG_FLAG, action="store_true", help="show the traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("synth", help="write a synthetic release with real H.264 videos")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scale", choices=["tiny", "small", "paper"], default="tiny")
    p.add_argument("--trajectories", type=int, default=None, help="make only the first N trajectories")
    p.set_defaults(func=_synth)

    p = sub.add_parser("validate", help="check a release; list every problem as file:line: field")
    p.add_argument("root")
    p.add_argument("--skip-videos", action="store_true", help="do not open the session videos")
    p.set_defaults(func=_validate)

    p = sub.add_parser("stats", help="summarise a release (Figure 4 / Section 3 shapes)")
    p.add_argument("root")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_stats)

    p = sub.add_parser("keys", help="list the release's instance keys (for apm-run print_request=KEY)")
    p.add_argument("root")
    p.add_argument("--task", action="append", choices=[*TASKS, EA], help="only this task (repeatable)")
    p.add_argument("--trajectory", action="append", help="only this trajectory id (repeatable)")
    p.set_defaults(func=_keys)

    p = sub.add_parser("cache", help="decode every session once into the shared frame cache")
    p.add_argument("root")
    p.add_argument("--cache-dir", default=None, help="default: $APM_CACHE_DIR or ~/.cache/apm/frames")
    p.add_argument("--fps", type=float, default=1.0)
    p.add_argument("--max-side", type=int, default=448)
    p.add_argument("--workers", type=int, default=2)
    p.set_defaults(func=_cache)

    p = sub.add_parser("overlay", help="render wall-clock timestamps onto a session video")
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--day", default="DAY1")
    p.add_argument("--start", required=True, help="wall-clock time of the first frame, HH:MM:SS")
    p.set_defaults(func=_overlay)
    return parser


def _dispatch(args: argparse.Namespace) -> int:
    """Run the subcommand; a release's problems are ``validate``'s report, one per line, and one line
    naming their count and ``validate`` for the other subcommands (exit status 2 both)."""
    try:
        return args.func(args)
    except ReleaseError as e:
        if args.command == "validate":
            print(f"error: {e}", file=sys.stderr)
        else:
            print(f"apm-data: error: {str(e).splitlines()[0]}; `apm-data validate {args.root}` lists them",
                  file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    """``apm-data``: any error but a release's problems is one line, exit status 1 (``--debug``: the traceback)."""
    args = build_parser().parse_args(argv)
    return guarded("apm-data", lambda: _dispatch(args), args.debug)


if __name__ == "__main__":
    sys.exit(main())
