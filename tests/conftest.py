"""Suite-wide rules: the support package (tests/support) importable as ``support``, the tiny synthetic
release (``tiny``, ``one``, ``cache``) and the paper's text from one place, spies' logs empty around
every test, and no silent skip in CI."""

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from support.runner import first_trajectory  # noqa: E402  (the support package, importable once the path is set)
from support.spies import SPY_LOGS  # noqa: E402

from apm.synth import generate  # noqa: E402

pytest_plugins = ["support.tiny_vlm", "support.vllm_fixtures", "support.ci_skips", "pytester"]
"""Shared fixtures (``vllm_python``, ``loop``; ``tiny_model``, ``tiny_qwen25vl``, ``tiny_qwen3vl``) available to
every test module without importing them; no silent skip in CI (:mod:`support.ci_skips`); ``pytester`` for
testing that."""

SPEC_EXCERPT = Path(__file__).parent / "spec" / "apm-bench-excerpt.md"
"""The paper's Table 4, Appendix A.3 and Appendix E, verbatim (checked against the full text by
tests/test_spec_excerpt.py whenever it lies beside the checkout)."""
SHARED_SPEC = Path(__file__).resolve().parents[2] / "shared" / "spec" / "apm-bench-paper.md"


@pytest.fixture(scope="session")
def paper_excerpt() -> str:
    """The verbatim excerpt of the paper the prompt, rubric and Table 4 tests compare against."""
    return SPEC_EXCERPT.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic release (seed 1, tiny scale), made once per module; a module that wants another
    seed defines its own ``tiny``."""
    return generate(tmp_path_factory.mktemp("rel") / "tiny", seed=1, scale="tiny")


@pytest.fixture(scope="module")
def one(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny``'s first trajectory alone (its sessions, candidates and videos), for slower runs."""
    return first_trajectory(tiny, tmp_path_factory.mktemp("one") / "rel")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's frame cache folder, shared by its runs."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def fresh_spies() -> Iterator[None]:
    """Every spy's log is empty when a test starts and after it ends: a test reads what it ran (a
    module-scoped fixture that runs a spy keeps a copy of what it read)."""
    for log in SPY_LOGS:
        log.clear()
    yield
    for log in SPY_LOGS:
        log.clear()
