"""What a child process may see (docs/boundary.md, "The seal"): the file-system view, the environment
variables, and the command that starts it sealed.

The view is the system's own environment (its interpreter's installation, the ``read`` paths the config
names), the operating system's files, a scratch folder and the one state folder it exports into; never
the release (its annotations and videos), another trajectory's state or another run. A ``read`` path
that would show any of those is refused before the child starts.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from apm.boundary import seal
from apm.records.rundir import MEMORY_STATE, MEMORY_STATE_VISIBLE
from apm.streaming.base import SessionContext

SYSTEM_READ = ("/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/proc", "/sys")
"""The operating system's files a process needs to start and run (read and execute)."""
SYSTEM_WRITE = ("/dev",)
"""Devices a process writes (``/dev/null``, ``/dev/shm``, a GPU's nodes)."""
PASSED_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""The harness's environment variables a child inherits; nothing else (no key, no token, no run path)."""
MECHANISMS = ("auto", "landlock", "off")


class SealError(ValueError):
    """The seal cannot be applied as configured; the message says what to change."""


@functools.cache
def landlock_abi() -> int:
    """The kernel's Landlock ABI (0: none); asked once per process."""
    return seal.abi()


def mechanism(setting: str) -> str | None:
    """The seal a child runs under for ``memory.seal``: ``landlock`` where the kernel offers it
    (``auto``, ``landlock``), or None (``off``; ``auto`` without Landlock). ``landlock`` without it is refused."""
    if setting not in MECHANISMS:
        raise SealError(f"memory.seal={setting!r}: expected one of {', '.join(MECHANISMS)}")
    if setting == "off":
        return None
    if landlock_abi() >= 1:
        return "landlock"
    if setting == "landlock":
        raise SealError("memory.seal=landlock: this kernel offers no Landlock; use memory.seal=auto to run "
                        "unsealed, marked 'not sealed' in every table")
    return None


def child_package() -> Path:
    """The ``apm_child`` package folder, copied into each child's scratch folder."""
    import apm_child

    return Path(apm_child.__file__).parent


def child_environment(scratch: Path, lib: Path, extra: dict[str, str]) -> dict[str, str]:
    """The child's environment: :data:`PASSED_ENV` from the harness, ``HOME``/``TMPDIR`` in its scratch
    folder, ``apm_child`` first on its ``PYTHONPATH``, Hugging Face offline, then the config's ``env``."""
    env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    env.update(HOME=str(scratch), TMPDIR=str(scratch / "tmp"), PYTHONPATH=str(lib), PYTHONDONTWRITEBYTECODE="1",
               HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    for key, value in extra.items():
        env[key] = f"{lib}{os.pathsep}{value}" if key == "PYTHONPATH" else str(value)
    return env


def interpreter_roots(executable: str, path: str | None) -> list[Path]:
    """Where the command's program lives: its installation (a virtual environment's root and the Python
    it was made from, or the folder above ``bin/``)."""
    found = shutil.which(executable, path=path)
    if found is None:
        raise SealError(f"memory.command: {executable!r} is not found (on the child's PATH)")
    roots = []
    for exe in (Path(os.path.abspath(found)), Path(os.path.realpath(found))):
        root = exe.parent.parent
        roots.append(root)
        cfg = root / "pyvenv.cfg"
        if cfg.exists():
            for line in cfg.read_text(encoding="utf-8", errors="replace").splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "home":
                    roots.append(Path(value.strip()).parent)
    return roots


@dataclass(frozen=True)
class View:
    """The paths a sealed child may read (and execute) and write."""

    read: tuple[str, ...]
    write: tuple[str, ...]


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def run_folder(state_dir: Path) -> Path:
    """The run folder a state folder lies in (``<run>/memory_state/<trajectory>``, or a restricted visible
    set's ``<run>/memory_state_visible/<trajectory>/<sessions>``)."""
    state_dir = Path(os.path.realpath(state_dir))
    return next((p.parent for p in state_dir.parents if p.name in (MEMORY_STATE, MEMORY_STATE_VISIBLE)),
                state_dir.parent)


def forbidden(context: SessionContext) -> list[Path]:
    """What no child may see: the release's folders (every session video's, and the one above it, where
    the annotations lie) and the run folder around the state folder."""
    videos = {Path(os.path.realpath(s.video)).parent for s in context.trajectory.sessions}
    return sorted({*videos, *(v.parent for v in videos), run_folder(context.state_dir)})


def view(command: Sequence[str], env: dict[str, str], read: Sequence[str], scratch: Path,
         context: SessionContext) -> View:
    """The child's view: the operating system, its interpreter's installation, the config's ``read``
    paths, its scratch folder and its state folder; refused if a path it may read holds something
    :func:`forbidden`."""
    readable = [*interpreter_roots(command[0], env.get("PATH")), *(Path(os.path.realpath(p)) for p in read)]
    for path in readable:
        for secret in forbidden(context):
            if _within(secret, path) or _within(path, secret):
                raise SealError(f"memory.read: the child would see {secret} through {path}; name a folder "
                                "that holds only the system's code and weights")
    return View(read=tuple(dict.fromkeys([*SYSTEM_READ, *map(str, readable)])),
                write=(*SYSTEM_WRITE, str(scratch), os.path.abspath(context.state_dir)))


def sealed(view: View, network: bool, command: Sequence[str]) -> list[str]:
    """The command line that starts ``command`` restricted to ``view`` (:mod:`apm.boundary.seal`)."""
    import json

    spec = json.dumps({"read": list(view.read), "write": list(view.write), "network": network})
    return [sys.executable, "-I", "-S", seal.__file__, spec, "--", *command]
