"""The tests' one support package (importable as ``support``: conftest puts ``tests/`` on the path, and
subprocesses get it in ``PYTHONPATH``): :mod:`.runner` runs and their records, :mod:`.spies` and
:mod:`.adversaries` the memories and systems Hydra builds by ``_target_``, :mod:`.backbones` test
backbones, :mod:`.release` a hand-written release, :mod:`.video` time-coded videos, :mod:`.tiny_vlm`
and :mod:`.vllm_fixtures` the model tests' fixtures, :mod:`.ci_skips` the no-silent-skip plugin. No
test module imports another; the product never imports this."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The checkout under test."""
