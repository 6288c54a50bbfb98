"""Under ``CI=true`` nothing that did not run passes: a skipped test, a module skipped at collection
(``importorskip``, ``skip(allow_module_level=True)``) and an ``xfail`` (failing or passing) all fail;
outside CI they keep pytest's meaning."""

from __future__ import annotations

import pytest

KINDS = {
    "skip": "import pytest\n\ndef test_it():\n    pytest.skip('not here')\n",
    "importorskip": "import pytest\n\npytest.importorskip('no_such_module_anywhere')\n\ndef test_it():\n    pass\n",
    "module_skip": "import pytest\n\npytest.skip('not here', allow_module_level=True)\n\ndef test_it():\n    pass\n",
    "xfail": "import pytest\n\n@pytest.mark.xfail(reason='known')\ndef test_it():\n    assert False\n",
    "xpass": "import pytest\n\n@pytest.mark.xfail(reason='known')\ndef test_it():\n    pass\n",
}
"""Each way a test can end without running to a pass, as a test module of its own."""


def _outcomes(pytester: pytest.Pytester, kind: str) -> dict[str, int]:
    pytester.makepyfile(**{f"test_{kind}": KINDS[kind]})
    return pytester.runpytest_inprocess("-p", "support.ci_skips").parseoutcomes()


@pytest.mark.parametrize("kind", KINDS)
def test_under_ci_it_fails(kind: str, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    outcomes = _outcomes(pytester, kind)
    failed = outcomes.get("failed", 0) + outcomes.get("errors", 0) + outcomes.get("error", 0)
    assert failed == 1 and not {"passed", "skipped", "xfailed", "xpassed"} & outcomes.keys(), outcomes


@pytest.mark.parametrize(("kind", "outcome"), [("skip", "skipped"), ("importorskip", "skipped"),
                                               ("module_skip", "skipped"), ("xfail", "xfailed"), ("xpass", "xpassed")])
def test_outside_ci_it_keeps_its_meaning(kind: str, outcome: str, pytester: pytest.Pytester,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    assert _outcomes(pytester, kind) == {outcome: 1}
