"""``apm-view RUN_DIR… --out SITE``: a static page of every instance, side by side across methods."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from apm.errors import OneLineParser, console_script, note_skipped
from apm.records.atomic import OutputRefused
from apm.view import DEFAULT_FRAMES_PER_CELL, DEFAULT_THUMB_GRID, PROG


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=__doc__)
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run dirs, or folders above them")
    p.add_argument("--out", type=Path, required=True,
                   help="site folder: new, empty, or an earlier apm-view site (replaced whole)")
    p.add_argument("--judge", help="prefer judgements by this judge (as apm-reduce --judge)")
    p.add_argument("--thumb-side", type=int, default=160, metavar="PX",
                   help="longer side of each thumbnail in pixels (default 160)")
    p.add_argument("--frames-per-cell", type=int, default=DEFAULT_FRAMES_PER_CELL, metavar="N",
                   help="thumbnails per method cell, evenly spread with the first and last "
                        f"(default {DEFAULT_FRAMES_PER_CELL}; 0: every frame); the full strip is one click away")
    p.add_argument("--thumb-grid", type=int, default=DEFAULT_THUMB_GRID, metavar="S",
                   help="between a cell's first and last frame, thumbnail only frames at a multiple of S seconds "
                        f"of their session's video, shared across cells (default {DEFAULT_THUMB_GRID}; 0: evenly "
                        "spread over all frames)")
    return p


@console_script(PROG)
def main(argv: Sequence[str] | None = None) -> int:
    """Build the site; a missing run dir or a write failure is one line and exit 2 (any other error one
    line and exit 1; ``--debug``: the traceback)."""
    args = parser().parse_args(argv)
    if args.thumb_side < 16:
        parser().error("--thumb-side must be at least 16")
    if args.frames_per_cell < 0:
        parser().error("--frames-per-cell must be 0 (every frame) or more")
    if args.thumb_grid < 0:
        parser().error("--thumb-grid must be 0 (no grid) or more seconds")
    from apm.records.version import FormatError
    from apm.reduce import UnmatchedPreference
    from apm.view.collect import ReleaseChanged
    from apm.view.site import build_site

    started = time.perf_counter()
    try:
        site = build_site(args.runs, args.out, args.judge, args.thumb_side, args.frames_per_cell,
                          args.thumb_grid)
    except (OutputRefused, ReleaseChanged, UnmatchedPreference, FormatError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a run dir that is not there, or a site that cannot be written (disk full, …)
        print(f"apm-view: {e.strerror or e}: {e.filename or args.out}", file=sys.stderr)
        return 2
    note_skipped(PROG, args.runs, need_config=True)  # after any refusal, which stays the one line
    print(f"apm-view: {site.instances} instances x {site.methods} methods, {site.thumbnails} thumbnails "
          f"({site.thumbnail_bytes / 1e6:.1f} MB), {site.chunks} chunks (largest {site.largest_chunk / 1e6:.2f} MB) "
          f"-> {site.index} ({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
