"""Suite-wide rules: test support modules importable by name, the paper's text from one place, and
no silent skip in CI."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

pytest_plugins = ["vllm_fixtures", "tiny_vlm"]
"""Shared fixtures (``vllm_python``, ``loop``; ``tiny_model``, ``tiny_qwen3vl``) available to every test
module without importing them."""

SPEC_EXCERPT = Path(__file__).parent / "spec" / "apm-bench-excerpt.md"
"""The paper's Table 4, Appendix A.3 and Appendix E, verbatim (checked against the full text by
tests/test_spec_excerpt.py whenever it lies beside the checkout)."""
SHARED_SPEC = Path(__file__).resolve().parents[2] / "shared" / "spec" / "apm-bench-paper.md"

ALLOWED_CI_SKIPS = {
    "tests/test_spec_excerpt.py::test_excerpt_is_verbatim_from_the_full_paper":
        "the full paper lies outside the repository, beside the checkout; CI's clone may not have it",
}
"""The only skips ``CI=true`` tolerates, each with the reason it cannot run there."""


@pytest.fixture(scope="session")
def paper_excerpt() -> str:
    """The verbatim excerpt of the paper the prompt, rubric and Table 4 tests compare against."""
    return SPEC_EXCERPT.read_text(encoding="utf-8")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """Under ``CI=true`` a skipped test fails (a skip must never pass for a pass there), unless it is
    on :data:`ALLOWED_CI_SKIPS`."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("CI") == "true" and not hasattr(report, "wasxfail"):
        if item.nodeid not in ALLOWED_CI_SKIPS:
            report.outcome = "failed"
            report.longrepr = f"skipped under CI=true (not on conftest.ALLOWED_CI_SKIPS): {report.longrepr}"
