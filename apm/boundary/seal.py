"""Landlock, the Linux file-system sandbox a process can put itself in without privileges: the child of
the boundary starts through this file, which restricts itself to the paths it is given and then
executes the system's command (docs/boundary.md, "The seal").

It is run as a script by the harness's interpreter (``python -I -S seal.py SPEC -- COMMAND…``), before
anything else loads, so it imports only the standard library. What it allows: ``read`` paths to read
and execute, ``write`` paths to read and write; everything else on the file system is refused
(``EACCES``), and, where the kernel can (ABI ≥ 4), TCP connect and bind too, unless ``network``.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # the same numbers on every architecture
_VERSION_FLAG, _RULE_PATH_BENEATH, _NO_NEW_PRIVS = 1, 1, 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
READ = EXECUTE | READ_FILE | READ_DIR
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
"""The rights a rule on a file (not a folder) may carry."""
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi() -> int:
    """The kernel's Landlock ABI version; 0 where Landlock is absent or disabled."""
    try:
        version = _libc().syscall(ctypes.c_long(_CREATE_RULESET), None, ctypes.c_size_t(0),
                                  ctypes.c_uint32(_VERSION_FLAG))
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def handled_fs(version: int) -> int:
    """Every file-system right the kernel's ABI knows (each one handled is refused unless a rule allows it)."""
    rights = (1 << 13) - 1
    if version >= 2:
        rights |= REFER
    if version >= 3:
        rights |= TRUNCATE
    if version >= 5:
        rights |= IOCTL_DEV
    return rights


class _Ruleset(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def restrict(read: list[str], write: list[str], network: bool) -> None:
    """Restrict this process and everything it starts to ``read`` / ``write`` (paths that do not exist are
    left out); raises ``OSError`` where the kernel refuses."""
    libc, version = _libc(), abi()
    if version < 1:
        raise OSError("Landlock is not available on this kernel")
    fs = handled_fs(version)
    net = NET_BIND_TCP | NET_CONNECT_TCP if version >= 4 and not network else 0
    attr = _Ruleset(fs, net)
    size = ctypes.sizeof(_Ruleset) if net else ctypes.sizeof(ctypes.c_uint64)
    ruleset = libc.syscall(ctypes.c_long(_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    for paths, rights in ((read, READ & fs), (write, fs)):
        for path in paths:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            allowed = rights & FILE_RIGHTS if not os.path.isdir(path) else rights
            rule = _PathBeneath(allowed, fd)
            done = libc.syscall(ctypes.c_long(_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                                ctypes.byref(rule), ctypes.c_uint32(0))
            os.close(fd)
            if done < 0:
                raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
    if libc.prctl(_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.syscall(ctypes.c_long(_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    os.close(ruleset)


def main(argv: list[str]) -> None:
    """``seal.py SPEC -- COMMAND…``: SPEC is JSON ``{"read": [...], "write": [...], "network": bool}``."""
    if len(argv) < 3 or argv[1] != "--":
        raise SystemExit("usage: seal.py SPEC -- COMMAND...")
    spec = json.loads(argv[0])
    try:
        restrict(spec["read"], spec["write"], spec["network"])
    except OSError as e:
        raise SystemExit(f"apm seal: {e}") from None
    command = argv[2:]
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
