"""Streaming memory systems: ingest the stream, answer probes from their state, export it per session."""

from apm.streaming.base import Answer, Probe, SessionContext, StreamingSystem

__all__ = ["Answer", "Probe", "SessionContext", "StreamingSystem"]
