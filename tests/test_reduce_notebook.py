"""notebooks/analysis.ipynb runs top to bottom on a small synthetic run set, and matches its .py pair."""

from __future__ import annotations

from pathlib import Path

import jupytext
import nbformat
import pytest
from nbclient import NotebookClient

from apm.cli.reduce import main
from apm.testing import fixtures

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def test_pair_in_sync() -> None:
    py = jupytext.read(NOTEBOOKS / "analysis.py")
    ipynb = nbformat.read(NOTEBOOKS / "analysis.ipynb", as_version=4)
    assert [c.source for c in py.cells] == [c.source for c in ipynb.cells]


@pytest.mark.slow
def test_notebook_executes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = fixtures.small_run_set(tmp_path / "runs")
    fixtures.synthetic_run(root / "none", fixtures.run_info(memory="none"), trajectories=3, seed=4)
    out = tmp_path / "out"
    main([str(root), "--out", str(out), "--bootstrap", "20", "--no-figures"])
    monkeypatch.setenv("APM_RUNS", str(root))
    monkeypatch.setenv("APM_REDUCE_OUT", str(out))
    monkeypatch.setenv("APM_TASK", "ERA")
    nb = nbformat.read(NOTEBOOKS / "analysis.ipynb", as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 2
    text = "".join(str(o.get("data", {}).get("text/plain", "")) + o.get("text", "") for o in outputs)
    assert "T1/E1/p" in text  # the ERA probe with the wrong option is listed among the failures


@pytest.mark.slow
def test_notebook_reads_make_demos_output_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Opened from ``notebooks/`` beside ``make demo``'s ``demo-out/`` (runs and report), with nothing set."""
    demo = tmp_path / "demo-out"
    root = fixtures.small_run_set(demo / "runs")
    main([str(root), "--out", str(demo / "report"), "--bootstrap", "20", "--no-figures"])
    for name in ("APM_RUNS", "APM_REDUCE_OUT", "APM_TASK"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "notebooks").mkdir()
    nb = nbformat.read(NOTEBOOKS / "analysis.ipynb", as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path / "notebooks")}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert "T1/E1/p" in "".join(str(o.get("data", {}).get("text/plain", "")) + o.get("text", "") for o in outputs)
