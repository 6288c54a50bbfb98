"""Command-line errors as one line: ``<prog>: error: <what>`` on stderr and a non-zero exit, never a
traceback unless one is asked for (``--debug``; for the Hydra apps also ``HYDRA_FULL_ERROR=1``)."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn, Protocol

from apm.records.redact import redact

DEBUG_FLAG = "--debug"
MAX_CHARS = 1000
"""An error line longer than this (a pasted value, most likely) is cut, so it stays one readable line."""
DETAIL_PREFIXES = ("full_key:", "object_type=", "reference_type=", "Set the environment variable HYDRA_FULL_ERROR")
"""Lines of OmegaConf's and Hydra's messages that locate an error in their own terms, not what is wrong."""


def one_line(error: BaseException) -> str:
    """An exception as one line: its message's lines joined by ``; `` (and its cause's first line, when
    the message does not say it already), a built-in exception's type named."""
    parts = _lines(str(error))
    cause = error.__cause__
    if cause is not None and _lines(str(cause)) and _lines(str(cause))[0] not in parts:
        parts.append(_lines(str(cause))[0])
    text = "; ".join(p.rstrip(".") for p in parts) or type(error).__name__
    if type(error).__module__ == "builtins" and not isinstance(error, RuntimeError | ValueError):
        text = f"{type(error).__name__}: {text}"
    text = redact("".join(ch if ch.isprintable() else " " for ch in text))
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 3] + "..."


def _lines(message: str) -> list[str]:
    stripped = (line.strip() for line in message.splitlines())
    return [line for line in stripped if line and not line.startswith(DETAIL_PREFIXES)]


def take_debug_flag(argv: list[str]) -> tuple[list[str], bool]:
    """``argv`` without ``--debug``, and whether it was there."""
    return [a for a in argv if a != DEBUG_FLAG], DEBUG_FLAG in argv[1:]


def guarded(prog: str, call: Callable[[], int | None], debug: bool,
            usage: tuple[type[BaseException], ...] = ()) -> int:
    """``call()``'s exit status; an exception is one line on stderr and status 2 (a ``usage`` error:
    the command or its config is wrong) or 1 — or, with ``debug``, raised with its traceback."""
    try:
        return call() or 0
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if debug:
            raise
        print(f"{prog}: error: {one_line(e)}", file=sys.stderr)
        return 2 if isinstance(e, usage) else 1


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (argparse's own prints the usage above the error)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {redact(message)} (--help lists the arguments)\n")


class Main(Protocol):
    """A console script's entry point: ``main(argv)``, ``sys.argv[1:]`` when None; its exit status."""

    def __call__(self, argv: Sequence[str] | None = None) -> int: ...


def console_script(prog: str, usage: tuple[type[BaseException], ...] = ()) -> Callable[[Main], Main]:
    """Make a console script's ``main(argv)`` :func:`guarded`: ``--debug`` is taken out of its arguments
    and shows the traceback; without it any error is one line (status 2 for a ``usage`` error, else 1)."""
    def wrap(main: Main) -> Main:
        @functools.wraps(main)
        def run(argv: Sequence[str] | None = None) -> int:
            args, debug = take_debug_flag([prog, *(sys.argv[1:] if argv is None else argv)])
            return guarded(prog, lambda: main(args[1:]), debug, usage)
        return run
    return wrap


_held: list[BaseException] = []


def hold(error: BaseException) -> None:
    """Keep a single-run Hydra task's exception until Hydra has returned (:func:`hydra_guarded` raises it
    then), so Hydra does not print its own line about the job before ours."""
    _held.append(error)


def _raise_held(_: None) -> None:
    if _held:
        raise _held.pop()


def unknown_hydra_flags(argv: Sequence[str]) -> list[str]:
    """The flags of ``argv`` that Hydra's command line does not know (its parser would print its usage
    block above the error)."""
    from hydra._internal.utils import get_args_parser  # Hydra's own parser: the flags it takes, exactly

    return get_args_parser().parse_known_args(list(argv))[1]


def hydra_guarded(prog: str, app: Callable[[], None], usage: tuple[type[BaseException], ...] = ()) -> int:
    """Run a ``@hydra.main`` app under :func:`guarded`: Hydra is made to raise instead of printing its own
    multi-line report; ``--debug`` (taken out of ``sys.argv``) or ``HYDRA_FULL_ERROR=1`` shows the traceback;
    an unknown flag is one line, exit 2."""
    sys.argv, debug = take_debug_flag(sys.argv)
    if unknown := unknown_hydra_flags(sys.argv[1:]):
        print(f"{prog}: error: unrecognized arguments: {redact(' '.join(unknown))} (--help lists them)",
              file=sys.stderr)
        return 2
    debug = debug or os.environ.get("HYDRA_FULL_ERROR") == "1"
    before = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        # _raise_held returns None by design: the call's status is None unless it raises
        return guarded(prog, lambda: _raise_held(app()), debug, usage)  # type: ignore[func-returns-value]
    finally:
        if before is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = before
