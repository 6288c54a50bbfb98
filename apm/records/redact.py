"""Secrets never written: API keys and URL passwords are replaced by ``***`` before any line, file,
log message or W&B value leaves the process.

Keys are known by value: the run registers the values of the environment variables its engines read
their keys from (``api_key_env``), so a server that echoes the key in an error body cannot get it
into a record. Credentials in URLs (``scheme://user:password@host``) are redacted wherever they
appear, registered or not.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from typing import Any

MASK = "***"
MIN_SECRET_CHARS = 8
"""A shorter value is not treated as a secret: masking it would garble ordinary text."""
URL_CREDENTIALS = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*):[^/\s@]+@")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""What an ``api_key_env`` value must look like: the *name* of a variable, never the key itself."""

_secrets: set[str] = set()


def register_secret(value: str | None) -> None:
    """Mask ``value`` from now on, wherever it appears (ignored when empty or too short to be a key)."""
    if value and len(value) >= MIN_SECRET_CHARS:
        _secrets.add(value)


def register_env_secrets(names: Iterable[str | None]) -> None:
    """Mask the values of the environment variables ``names`` (those that are set)."""
    for name in names:
        if name:
            register_secret(os.environ.get(name))


def redact(text: str) -> str:
    """``text`` with every registered secret and every URL password replaced by :data:`MASK`."""
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return URL_CREDENTIALS.sub(rf"\g<head>:{MASK}@", text) if "@" in text else text


def redact_data(value: Any) -> Any:
    """A copy of JSON-like ``value`` whose strings (keys and values) are :func:`redact`-ed."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact_data(k): redact_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_data(v) for v in value]
    return value


class RedactingFilter(logging.Filter):
    """A logging filter that redacts each record's message (and drops its args once rendered)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


def redact_logging() -> None:
    """Put :class:`RedactingFilter` on every handler of the root logger (console and log files)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
