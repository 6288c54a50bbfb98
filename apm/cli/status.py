"""``apm-status RUN_ROOT``: per config and shard, instances done / total, errors, the job's state, ETA
(``apm.scale.status``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from apm.errors import DEBUG_FLAG, OneLineParser, guarded, note_skipped


def main(argv: Sequence[str] | None = None) -> int:
    """``apm-status``: every error is one line (``--debug``: the traceback); exit 1 when a shard needs resubmitting."""
    p = OneLineParser(prog="apm-status", description=__doc__.splitlines()[0])
    p.add_argument("root", type=Path, help="a run dir or any folder above run dirs (an output_root)")
    p.add_argument("--json", action="store_true", help="one JSON object per shard instead of the table")
    p.add_argument(DEBUG_FLAG, action="store_true", help="show the traceback of an error")
    args = p.parse_args(argv)
    return guarded("apm-status", lambda: report(args.root, args.json), args.debug)


def report(root: Path, as_json: bool) -> int:
    """Print the sweep's status; exit status 1 when a shard needs resubmitting."""
    from apm.scale.status import render, sweep_status

    if not root.exists():
        raise FileNotFoundError(f"{root} does not exist")
    note_skipped("apm-status", [root])
    rows = sweep_status(root)
    if as_json:
        for r in rows:
            print(json.dumps(asdict(r) | {"failed": r.failed, "complete": r.complete}))
    else:
        print(render(rows))
    return 1 if any(r.failed for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
