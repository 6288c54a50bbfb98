"""``apm-check-system``: the streaming-system contract's checklist run on any memory config, in or out
of the package, over a tiny synthetic release (docs/streaming-systems.md, "The checklist")."""

from apm.check.checks import Result
from apm.check.system import Report, check_system

__all__ = ["Report", "Result", "check_system"]
