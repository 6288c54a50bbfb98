"""The child side of apm's process boundary (docs/boundary.md): a streaming memory system that runs in
its own Python environment as a child process of ``apm-run``, speaking protocol version
:data:`PROTOCOL` over its standard streams.

Dependency-free and Python >= 3.9, so it runs beside an official system's pinned stack (transformers
4.x, forked model files). Write a subclass of :class:`System`, then start it with
``python -m apm_child path/to/file.py:MySystem`` (or ``package.module:MySystem``); ``apm-run`` puts this
package on the child's ``PYTHONPATH`` itself.
"""

from apm_child.system import (
    PROTOCOL,
    Answer,
    Composed,
    Frame,
    Harness,
    Probe,
    Reply,
    Session,
    System,
    Turn,
)

__all__ = ["PROTOCOL", "Answer", "Composed", "Frame", "Harness", "Probe", "Reply", "Session", "System", "Turn"]
