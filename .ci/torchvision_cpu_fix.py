"""Lets PyPI's CUDA torchvision wheel import next to the CPU torch wheel.

Its C extension cannot load there, yet ``torchvision._meta_registrations`` still registers fake
kernels for ``torchvision::nms``/``qnms`` and so fails. This hook skips fake-kernel registrations for
operators that do not exist while that module runs. Standalone (no ``apm`` imports): only this project's
CI and dev venvs get it, from a ``.pth`` file (``.ci/torchvision-cpu-fix.sh``); the package never imports it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any, Sequence

_TARGET = "torchvision._meta_registrations"


def _op_exists(qualname: str) -> bool:
    """Whether ``namespace::name`` is a registered torch operator."""
    import torch

    namespace, name = qualname.split("::", 1)
    try:
        getattr(getattr(torch.ops, namespace), name.split(".", 1)[0])
    except (AttributeError, RuntimeError):
        return False
    return True


class _TolerantLoader(importlib.abc.Loader):
    """Runs the wrapped loader with ``torch.library.register_fake`` skipping absent operators."""

    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        import torch.library

        original = torch.library.register_fake

        def register_fake(op: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(op, str) and not _op_exists(op):
                return lambda fn: fn
            return original(op, *args, **kwargs)

        torch.library.register_fake = register_fake
        try:
            self._inner.exec_module(module)
        finally:
            torch.library.register_fake = original


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the loader of ``torchvision._meta_registrations`` only."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _TolerantLoader(spec.loader)
        return spec


def install() -> None:
    """Puts the hook on ``sys.meta_path`` (once); call before torchvision is first imported."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
