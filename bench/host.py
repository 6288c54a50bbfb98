"""The host a figure is taken on, as every bench names it: the CPU model, its cores and its load."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what :mod:`platform` knows."""
    info = Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.exists() else []
    found = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")
    return found or platform.processor() or platform.machine()


def machine() -> str:
    """CPU model, cores, kernel and Python, in one line."""
    return f"{cpu_model()}, {os.cpu_count()} cores, Linux {platform.release()}, Python {platform.python_version()}"
