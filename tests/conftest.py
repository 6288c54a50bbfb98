"""Suite-wide rules: test support modules importable by name, the paper's text from one place, and
no silent skip in CI."""

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from adversaries import Omniscient  # noqa: E402  (test support, importable once the path is set)
from runner_helpers import ShownFrames  # noqa: E402
from slow_backbones import Overlapping  # noqa: E402
from streaming_spies import ChunkSpy, ClockWriter, HoardingSpy, PixelSpy  # noqa: E402

pytest_plugins = ["vllm_fixtures", "tiny_vlm", "ci_skips", "pytester"]
"""Shared fixtures (``vllm_python``, ``loop``; ``tiny_model``, ``tiny_qwen25vl``, ``tiny_qwen3vl``) available to
every test module without importing them; no silent skip in CI (:mod:`ci_skips`); ``pytester`` for testing that."""

SPEC_EXCERPT = Path(__file__).parent / "spec" / "apm-bench-excerpt.md"
"""The paper's Table 4, Appendix A.3 and Appendix E, verbatim (checked against the full text by
tests/test_spec_excerpt.py whenever it lies beside the checkout)."""
SHARED_SPEC = Path(__file__).resolve().parents[2] / "shared" / "spec" / "apm-bench-paper.md"


@pytest.fixture(scope="session")
def paper_excerpt() -> str:
    """The verbatim excerpt of the paper the prompt, rubric and Table 4 tests compare against."""
    return SPEC_EXCERPT.read_text(encoding="utf-8")


SPY_LOGS = (ShownFrames.seen, PixelSpy.ANSWERED, PixelSpy.FED, Omniscient.READ, Omniscient.OBSERVED,
            HoardingSpy.HOARD, Overlapping.PEAK, ChunkSpy.ALIGNED, ClockWriter.ASKED)
"""What the spies Hydra builds by ``_target_`` record (on their class, as no test holds the instance)."""


@pytest.fixture(autouse=True)
def fresh_spies() -> Iterator[None]:
    """Every spy's log is empty when a test starts and after it ends: a test reads what it ran (a
    module-scoped fixture that runs a spy keeps a copy of what it read)."""
    for log in SPY_LOGS:
        log.clear()
    yield
    for log in SPY_LOGS:
        log.clear()
