"""What ``apm-check-system`` cannot see of the system under check, said in words as ``NOT CHECKED`` lines
(docs/streaming-systems.md, "The checklist"): never a pass, never a failure.

A system run in this process is Python code beside the runner: the observer sees every call the runner
makes and what each run left, not what the code does besides. A subject run in a child process under a
sandbox (the route being built in ``apm.boundary``) could be checked on both counts; its subject would
return checks here instead of these lines."""

from __future__ import annotations

from apm.check.checks import Result
from apm.check.runs import Subject

FILES = "reading outside the protocol"
SHARED = "state outside the state folder"


def not_checked(subject: Subject) -> list[Result]:
    """The limits of checking ``subject``, each a ``NOT CHECKED`` result (the same for every subject run in
    this process, as every subject is today)."""
    what = "system" if subject.streaming else "memory protocol"
    return [
        Result(FILES, "NOT CHECKED", f"the {what} runs in this process, so it could open files the runner "
               "never hands it — the release's annotations beside the videos (candidates.jsonl, "
               "ea_candidates.jsonl), or the videos themselves, decoded behind the observer's back — and the "
               "checklist cannot detect either"),
        Result(SHARED, "NOT CHECKED", f"copies of the {what} in one process (each trajectory's, each EA "
               "visible set's, each run's) could share what they saw through class or module attributes (or "
               "any other global), and the checklist cannot detect it unless it changes a record"),
    ]
