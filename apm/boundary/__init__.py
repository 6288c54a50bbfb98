"""The process boundary (docs/boundary.md): a memory system in an environment of its own, as a child
process sealed from the release, fed only what the protocol allows, its state exported to the harness."""

from apm.boundary.child import ChildError, ChildSystem

__all__ = ["ChildError", "ChildSystem"]
