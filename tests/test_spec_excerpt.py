"""The vendored excerpt of the paper (tests/spec/) is the paper's text, word for word."""

from __future__ import annotations

import pytest
from conftest import SHARED_SPEC, SPEC_EXCERPT


def test_excerpt_is_verbatim_from_the_full_paper() -> None:
    if not SHARED_SPEC.exists():
        pytest.skip(f"the full paper is not beside this checkout ({SHARED_SPEC})")
    full = SHARED_SPEC.read_text(encoding="utf-8")
    parts = SPEC_EXCERPT.read_text(encoding="utf-8").split("<!-- part -->\n")[1:]
    assert len(parts) == 3
    for part in parts:
        assert part in full


def test_excerpt_holds_what_the_tests_need(paper_excerpt: str) -> None:
    for heading in ("Table 4:", "### A.3 LLM-as-Judge rubric", "## Appendix E Task Prompts", "### E.5"):
        assert heading in paper_excerpt
