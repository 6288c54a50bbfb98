"""Command-line errors as one line: ``<prog>: error: <what>`` on stderr and a non-zero exit, never a
traceback unless one is asked for (``--debug``; for the Hydra apps also ``HYDRA_FULL_ERROR=1``); a
config typo names the nearest option or key, and ``--verbose`` shows an error's whole message."""

from __future__ import annotations

import argparse
import difflib
import functools
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn, Protocol

from apm.records.redact import redact
from apm.records.rundir import find_runs

DEBUG_FLAG = "--debug"
VERBOSE_FLAG = "--verbose"
"""Show an error's whole message (Hydra's search path and option lists included), without the traceback."""
MAX_CHARS = 1000
"""An error line longer than this (a pasted value, most likely) is cut, so it stays one readable line."""
DETAIL_PREFIXES = ("full_key:", "object_type=", "reference_type=", "Set the environment variable HYDRA_FULL_ERROR")
"""Lines of OmegaConf's and Hydra's messages that locate an error in their own terms, not what is wrong."""


def one_line(error: BaseException) -> str:
    """An exception as one line: a config typo as the nearest names (:func:`config_hint`), else its
    message's lines joined by ``; `` (and its cause's first line, when the message does not say it
    already), a built-in exception's type named."""
    if hint := config_hint(error):
        return hint
    parts = _lines(str(error))
    cause = error.__cause__
    if cause is not None and _lines(str(cause)) and _lines(str(cause))[0] not in parts:
        parts.append(_lines(str(cause))[0])
    text = "; ".join(p.rstrip(".") for p in parts) or type(error).__name__
    if type(error).__module__ == "builtins" and not isinstance(error, RuntimeError | ValueError):
        text = f"{type(error).__name__}: {text}"
    text = redact("".join(ch if ch.isprintable() else " " for ch in text))
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 3] + "..."


def config_hint(error: BaseException) -> str | None:
    """A config-group option or config key that does not exist (Hydra's ``MissingConfigException``, or a
    composition error caused by OmegaConf's unknown key) as one line naming the nearest (difflib); None
    for any other error. Read from the exceptions' attributes, so nothing here imports Hydra."""
    options, missing = getattr(error, "options", None), getattr(error, "missing_cfg_file", None)
    if isinstance(missing, str) and isinstance(options, list):
        group, _, name = missing.rpartition("/")
        return f"{group}={name}: no such option ({_nearest(name, options, '')}); {VERBOSE_FLAG} shows Hydra's message"
    cause = error.__cause__
    key, parent = getattr(cause, "key", None), getattr(cause, "parent_node", None)
    if isinstance(key, str) and parent is not None and callable(getattr(parent, "keys", None)):
        full = str(getattr(cause, "full_key", None) or key)
        where = full.rpartition(".")[0]
        names = [str(k) for k in parent.keys() if k != "hydra" and not str(k).startswith("_")]
        return (f"{full}: no such key ({_nearest(key, names, f'{where}.' if where else '')}; +{full}=... adds a "
                f"new one); {VERBOSE_FLAG} shows Hydra's message")
    return None


def _nearest(name: str, names: list[str], prefix: str) -> str:
    near = difflib.get_close_matches(name, names, n=3)
    if near:
        return "did you mean " + " or ".join(prefix + n for n in near) + "?"
    return f"one of {', '.join(prefix + n for n in sorted(names))}"


def _lines(message: str) -> list[str]:
    stripped = (line.strip() for line in message.splitlines())
    return [line for line in stripped if line and not line.startswith(DETAIL_PREFIXES)]


def note_skipped(prog: str, paths: Iterable[str | os.PathLike[str]], need_config: bool = False) -> None:
    """Print one note line naming the folders at or below ``paths`` that look like runs but are not (every
    command skips them: :func:`apm.records.rundir.find_runs`); a path that does not exist is the command's to refuse."""
    note = find_runs([p for p in paths if os.path.exists(p)], need_config).note()
    if note:
        print(f"{prog}: note: {note}", file=sys.stderr)


def take_debug_flag(argv: list[str], flag: str = DEBUG_FLAG) -> tuple[list[str], bool]:
    """``argv`` without ``flag`` (``--debug``), and whether it was there."""
    return [a for a in argv if a != flag], flag in argv[1:]


UsageErrors = tuple[type[BaseException], ...]
Usage = UsageErrors | Callable[[], UsageErrors]
"""The errors that mean the command or its config is wrong (exit status 2): their classes, or a function
giving them where they live in a heavy package (Hydra's, OmegaConf's), called only once an error is met,
so a command's ``--help`` imports none of them."""


def _usage_errors(usage: Usage) -> UsageErrors:
    return usage() if callable(usage) else usage


PIPE_CLOSED = 141
"""The exit status of a command whose reader closed the pipe early (128 + SIGPIPE, as a shell's own tools)."""


def guarded(prog: str, call: Callable[[], int | None], debug: bool, usage: Usage = (), verbose: bool = False) -> int:
    """``call()``'s exit status; an exception is one line on stderr (``verbose``: its whole message) and
    status 2 (a ``usage`` error: the command or its config is wrong) or 1 — or, with ``debug``, raised
    with its traceback; a reader that closed the pipe early ends it quietly (:data:`PIPE_CLOSED`)."""
    try:
        status = call() or 0
        sys.stdout.flush()  # here, not at exit: a reader that stopped early is met below
        return status
    except BrokenPipeError:  # ``apm-data keys | head -1``: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        return PIPE_CLOSED
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if debug:
            raise
        print(f"{prog}: error: {redact(str(e)) if verbose else one_line(e)}", file=sys.stderr)
        return 2 if isinstance(e, _usage_errors(usage)) else 1


VERSION_FLAG = "--version"
Version = Callable[[str], str]
"""What ``--version`` prints for a command (its name given): set once for every command by :mod:`apm.cli`."""
_version: list[Version] = []


def say_version_with(version: Version) -> None:
    """Make every command's ``--version`` print ``version(prog)`` (:mod:`apm.cli` names apm's version and
    code identity, which this module, below the runner, cannot compute)."""
    _version[:] = [version]


class _PrintVersion(argparse.Action):
    """``--version``: print the command's version line (computed only when asked) and exit 0."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(_version[0](parser.prog))
        parser.exit(0)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (argparse's own prints the usage above the error),
    with ``--version`` once :func:`say_version_with` has been told what to print."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if _version:
            self.add_argument(VERSION_FLAG, action=_PrintVersion, nargs=0,
                              help="print apm's version and the identity of its code, and exit")

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {redact(message)} (--help lists the arguments)\n")


class Main(Protocol):
    """A console script's entry point: ``main(argv)``, ``sys.argv[1:]`` when None; its exit status."""

    def __call__(self, argv: Sequence[str] | None = None) -> int: ...


def console_script(prog: str, usage: Usage = ()) -> Callable[[Main], Main]:
    """Make a console script's ``main(argv)`` :func:`guarded`: ``--debug`` is taken out of its arguments
    and shows the traceback; without it any error is one line (status 2 for a ``usage`` error, else 1)."""
    def wrap(main: Main) -> Main:
        @functools.wraps(main)
        def run(argv: Sequence[str] | None = None) -> int:
            args, debug = take_debug_flag([prog, *(sys.argv[1:] if argv is None else argv)])
            args, verbose = take_debug_flag(args, VERBOSE_FLAG)
            return guarded(prog, lambda: main(args[1:]), debug, usage, verbose)
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


def hydra_guarded(prog: str, app: Callable[[], None], usage: Usage = ()) -> int:
    """Run a ``@hydra.main`` app under :func:`guarded`: Hydra is made to raise instead of printing its own
    multi-line report; ``--debug`` (taken out of ``sys.argv``) or ``HYDRA_FULL_ERROR=1`` shows the traceback;
    an unknown flag is one line, exit 2."""
    sys.argv, debug = take_debug_flag(sys.argv)
    sys.argv, verbose = take_debug_flag(sys.argv, VERBOSE_FLAG)
    if VERSION_FLAG in sys.argv[1:] and _version:  # apm's, not Hydra's own version
        print(_version[0](prog))
        return 0
    if unknown := unknown_hydra_flags(sys.argv[1:]):
        print(f"{prog}: error: unrecognized arguments: {redact(' '.join(unknown))} (--help lists them)",
              file=sys.stderr)
        return 2
    debug = debug or os.environ.get("HYDRA_FULL_ERROR") == "1"
    before = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        # _raise_held returns None by design: the call's status is None unless it raises
        return guarded(prog, lambda: _raise_held(app()), debug, usage,  # type: ignore[func-returns-value]
                       verbose)
    finally:
        if before is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = before
