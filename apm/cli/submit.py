"""``apm-submit [-m] OVERRIDES…``: submit a whole sweep as one SLURM array and return at once
(``apm.scale.submit``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from apm.cli import config_errors
from apm.errors import OneLineParser, console_script


class RunShard:
    """What each array task calls: ``apm-run OVERRIDES`` in this process; requeued, it resumes."""

    def __call__(self, overrides: list[str]) -> None:
        from apm.cli.run import main as apm_run

        sys.argv = ["apm-run", *overrides]
        apm_run()

    def checkpoint(self, overrides: list[str]) -> Any:
        """Called by submitit on the warning signal: rerun the same overrides (records are skipped)."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, overrides)


@console_script("apm-submit", usage=config_errors)
def main(argv: Sequence[str] | None = None) -> int:
    """Submit the sweep's pending shard jobs; every error is one line (``--debug``: the traceback), a config
    error exit 2."""
    p = OneLineParser(prog="apm-submit", description=__doc__.splitlines()[0])
    p.add_argument("overrides", nargs="*", help="apm-run overrides, sweeps included (a,b / range(n))")
    p.add_argument("-m", "--multirun", action="store_true", help="accepted as apm-run accepts it; always a sweep")
    p.add_argument("--dry-run", action="store_true", help="list the jobs; submit nothing")
    args = p.parse_args(argv)
    from apm.scale.submit import expand, pending, request_totals, submit, unset_slurm_settings

    jobs, launcher = expand(args.overrides)
    todo, skipped = pending(jobs)
    for job, why in skipped:
        print(f"skip   {why:<10} {job.run_dir} {job.shard}")
    if args.dry_run or not todo:
        for job in todo:
            print(f"would submit   {job.run_dir} {job.shard}  {' '.join(job.overrides)}")
        print(f"apm-submit: would submit {request_totals(len(todo), launcher)}; {len(skipped)} skipped")
        for warning in unset_slurm_settings(launcher) if todo else []:
            print(warning, file=sys.stderr)
        return 0
    for job, job_id in submit(todo, launcher, RunShard()):
        print(f"submitted {job_id:<10} {job.run_dir} {job.shard}")
    for warning in unset_slurm_settings(launcher):
        print(warning, file=sys.stderr)
    root = os.path.commonpath([str(j.run_dir) for j in jobs])
    print(f"apm-submit: {len(todo)} jobs submitted, {len(skipped)} skipped ({request_totals(len(todo), launcher)}); "
          f"follow with: apm-status {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
