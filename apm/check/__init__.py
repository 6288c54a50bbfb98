"""``apm-check-system``: the streaming-system contract's checklist run on any memory config, in or out
of the package, over a tiny synthetic release (docs/streaming-systems.md, "The checklist"): the checks
in :mod:`apm.check.system`. Only their names here, so the command's ``--help`` imports none of them."""

CHECKS = (
    "run",
    "pixel causality",
    "order",
    "non-mutating answers",
    "EA restriction",
    "state bytes",
    "schema",
    "resume",
    "sigkill determinism",
)
"""Every check, in the order the command prints them."""
