"""Secrets never written: API keys and URL passwords are replaced by ``***`` before any line, file,
log message or W&B value leaves the process.

Keys are known by value: each stage registers the values of the environment variables its engines
read their keys from (``api_key_env``, anywhere in its config: :func:`register_config_secrets`), with
their percent-encoded and base64 forms, so a server that echoes the key cannot get it into a record.
Two kinds are masked wherever they appear, registered or not: a URL's whole userinfo in any form
(``scheme://TOKEN@``, ``user:password@``, a raw ``@`` in the password, percent-encoded: everything up
to the authority's last ``@``), and the credential of an echoed ``Bearer …`` or ``Basic …`` header.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, unquote

MASK = "***"
MIN_SECRET_CHARS = 8
"""A shorter value is not treated as a secret: masking it would garble ordinary text."""
URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^\s\"'<>`]*)@")
"""A URL's userinfo through the *last* ``@`` before the next blank or quote: a raw ``@``, ``/`` or ``:`` in
a password cannot leave part of it behind (a path holding an ``@`` is masked too, leaking nothing)."""
AUTH_HEADER = re.compile(r"(?P<scheme>(?<![A-Za-z])(?:Bearer|Basic)\s+)(?=[A-Za-z]*[0-9+/=._~-])[A-Za-z0-9._~+/=-]{8,}")
"""The credential of an echoed ``Authorization`` header, registered or not: a token of 8 or more characters
with a digit or a symbol in it (so prose such as "Basic ingredients" is left alone)."""
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""What an ``api_key_env`` value must look like: the *name* of a variable, never the key itself."""

_secrets: list[str] = []
"""Every registered form, longest first: one that contains another is masked whole, leaving no part behind."""


def register_secret(value: str | None) -> None:
    """Mask ``value`` from now on, wherever it appears, also percent-encoded or base64-encoded (ignored
    when empty or too short to be a key)."""
    if value and len(value) >= MIN_SECRET_CHARS:
        forms = {value, quote(value, safe=""), base64.b64encode(value.encode()).decode().rstrip("=")}
        _secrets[:] = sorted(set(_secrets) | forms, key=len, reverse=True)


def url_userinfo(text: str) -> list[str]:
    """The userinfo parts (``user:password``, or a token alone) of the URLs in ``text``."""
    return [m["userinfo"] for m in URL_USERINFO.finditer(text)]


def register_userinfo(userinfo: str) -> None:
    """Mask a URL's credentials in every form an echo could take: raw and percent-decoded, the password
    alone, and the whole (a token, or the ``user:password`` a ``Basic`` header carries in base64)."""
    for form in {userinfo, unquote(userinfo)}:
        register_secret(form)
        register_secret(form.partition(":")[2])


def register_env_secrets(names: Iterable[str | None]) -> None:
    """Mask the values of the environment variables ``names`` (those that are set)."""
    for name in names:
        if name:
            register_secret(os.environ.get(name))


def register_config_secrets(config: Any) -> None:
    """Register every secret a JSON-like config reaches: the value of each ``api_key_env`` variable it
    names, at any depth (backbone, writer, judge, a protocol's own engines), and each URL's userinfo."""
    if isinstance(config, dict):
        for key, value in config.items():
            if key == "api_key_env" and isinstance(value, str):
                register_env_secrets([value])
            register_config_secrets(value)
    elif isinstance(config, list | tuple):
        for value in config:
            register_config_secrets(value)
    elif isinstance(config, str):
        for userinfo in url_userinfo(config):
            register_userinfo(userinfo)


def redact(text: str) -> str:
    """``text`` with every registered secret, URL userinfo and echoed header credential replaced by
    :data:`MASK`."""
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    if "@" in text:
        text = URL_USERINFO.sub(rf"\g<scheme>{MASK}@", text)
    if "Bearer" in text or "Basic" in text:
        text = AUTH_HEADER.sub(rf"\g<scheme>{MASK}", text)
    return text


def may_redact_json(text: str) -> bool:
    """Whether :func:`redact` could change a string serialised in JSON ``text`` (keys included): the
    text holds a registered secret, an ``@`` or an auth scheme's name, or a secret is registered that
    JSON would escape (and so might not appear as itself). False means every string redacts to itself."""
    return ("@" in text or "Bearer" in text or "Basic" in text
            or any(secret in text or json.dumps(secret, ensure_ascii=False)[1:-1] != secret for secret in _secrets))


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
