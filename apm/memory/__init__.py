"""Memory protocols: what persists across sessions and what an instance is shown of it."""

from apm.memory.base import History, MemoryProtocol, Note, SessionView

__all__ = ["History", "MemoryProtocol", "Note", "SessionView"]
