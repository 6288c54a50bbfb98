"""Where the Hydra configs are: ``apm/conf`` inside an installed wheel (the build copies the project's
top-level ``conf/`` there), else the ``conf/`` of the source checkout this package is imported from."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
CONF_DIR = str(_PACKAGE / "conf" if (_PACKAGE / "conf" / "config.yaml").is_file() else _PACKAGE.parent / "conf")
"""The folder holding ``config.yaml`` and the config groups (``memory/``, ``backbone/``, …)."""
