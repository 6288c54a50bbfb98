"""The Python API the console scripts wrap (docs/api.md): one config run by ``apm.run`` or by ``apm-run``
is one method (one run dir, config hash, choices and settings), and a sweep run, judged and reduced
through the API gives the ``scores.csv`` the console scripts give, byte for byte; ``import apm`` stays cheap."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import pandas as pd
import pytest
from nbclient import NotebookClient
from support import REPO
from support.runner import console, first_trajectory, records

import apm
from apm.api.reduce import Unjudged
from apm.synth import generate

MEMORIES = ("none", "raw_video")
"""The sweep: SimpleStream and raw video as memory, each on the random baseline."""


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("rel") / "tiny", seed=1, scale="tiny")


def _common(release: Path, root: Path) -> list[str]:
    return [
        f"dataset.root={release}",
        f"output_root={root / 'runs'}",
        f"frames.cache_dir={root / 'cache'}",
        "backbone=random",
        "logging.wandb.mode=disabled",
        "logging.progress=false",
    ]


def _env() -> dict[str, str]:
    """The console scripts import this checkout, and keep W&B out."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled"}
    env.pop("WANDB_SERVICE", None)
    return env


@pytest.fixture(scope="module")
def by_cli(release: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sweep as a user types it: ``apm-run -m``, ``apm-judge``, ``apm-reduce``; the report folder."""
    root = tmp_path_factory.mktemp("cli")
    console("apm-run", "-m", *_common(release, root), f"memory={','.join(MEMORIES)}", env=_env())
    console("apm-judge", str(root / "runs"), "judge=gate_only", env=_env())
    console(
        "apm-reduce", str(root / "runs"), "--out", str(root / "report"), "--bootstrap", "20", "--no-figures", env=_env()
    )
    return root


@pytest.fixture(scope="module")
def by_api(release: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[apm.RunResult]]:
    """The same sweep through ``from apm import …``."""
    root = tmp_path_factory.mktemp("api")
    runs = [apm.run([*_common(release, root), f"memory={memory}"]) for memory in MEMORIES]
    judged = apm.judge_runs([r.run_dir for r in runs], "gate_only")
    assert judged.judged > 0 and judged.failed == 0 and judged.run_dirs == tuple(r.run_dir for r in runs)
    reduced = apm.reduce_runs([r.run_dir for r in runs], root / "report", bootstrap=20, figures=False)
    assert reduced.scores_csv == (root / "report" / "scores.csv").resolve() and reduced.records > 0
    return root, runs


def _run_block(run_dir: Path) -> dict:
    return records(run_dir)[0]["run"]


def test_one_config_run_by_apm_run_and_by_the_api_is_one_method(by_cli: Path, by_api: tuple[Path, list]) -> None:
    """Issue 35.2: run in process, a config was another method (choices unknown, so its config name was its
    display name, 'Raw Video as Memory', and Tables 9 and 12 left it out)."""
    api_root, runs = by_api
    for result in runs:
        cli_dir = by_cli / "runs" / result.run_dir.relative_to(api_root / "runs")
        assert cli_dir.is_dir()  # one run dir: dataset / memory / backbone-<config hash>
        mine, theirs = _run_block(result.run_dir), _run_block(cli_dir)
        assert result.config_hash == mine["config_hash"] == theirs["config_hash"]
        assert mine["choices"] == theirs["choices"] and mine["choices"]["memory"] in MEMORIES
        assert mine["overrides"] == theirs["overrides"] == {}
    methods = {
        (r.memory_config, r.method_family)
        for r in pd.read_csv(api_root / "report" / "scores.csv").drop_duplicates("config_hash").itertuples()
    }
    assert methods == {("none", "reference"), ("raw_video", "reference")}


def test_a_sweep_through_the_api_reduces_to_the_scores_csv_of_the_console_scripts(
    by_cli: Path, by_api: tuple[Path, list]
) -> None:
    api_root, runs = by_api
    assert [r.new for r in runs] == [r.instances for r in runs] and not any(r.errors for r in runs)
    assert (api_root / "report" / "scores.csv").read_bytes() == (by_cli / "report" / "scores.csv").read_bytes()
    tables = sorted(p.name for p in (api_root / "report" / "tables").iterdir())
    assert tables == sorted(p.name for p in (by_cli / "report" / "tables").iterdir())
    for name in tables:
        mine, theirs = (root / "report" / "tables" / name for root in (api_root, by_cli))
        assert mine.read_bytes() == theirs.read_bytes(), name


def test_the_api_refuses_unjudged_probes_and_writes_nothing(release: Path, tmp_path: Path) -> None:
    unjudged = apm.run([*_common(release, tmp_path), "memory=none"])
    with pytest.raises(Unjudged, match="gate-passing adaptive probe"):
        apm.reduce_runs([unjudged.run_dir], tmp_path / "out", bootstrap=0)
    assert not (tmp_path / "out").exists()


def test_a_config_typo_raises_before_anything_is_written(release: Path, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="raw_vdeo"):
        apm.run([*_common(release, tmp_path), "memory=raw_vdeo"])
    assert not (tmp_path / "runs").exists()


def test_import_apm_loads_no_framework_and_resolves_the_api_on_use() -> None:
    probe = (
        "import sys, apm; heavy = sorted({m.split('.')[0] for m in sys.modules} & {'hydra', 'omegaconf', "
        "'pandas', 'numpy', 'torch', 'matplotlib'}); api = [m for m in sys.modules if m.startswith('apm.')]; "
        "print(json.dumps([heavy, api, apm.RunResult.__module__, 'run' in dir(apm)]))"
    )
    said = subprocess.run(
        [sys.executable, "-c", f"import json; {probe}"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
    ).stdout
    assert json.loads(said) == [[], [], "apm.api.run", True]
    with pytest.raises(AttributeError, match="no attribute 'runn'"):
        apm.runn  # noqa: B018 — the attribute access is the test


NOTEBOOK = REPO / "notebooks" / "api"


def test_the_api_notebook_pair_is_in_sync() -> None:
    py = jupytext.read(NOTEBOOK.with_suffix(".py"))
    ipynb = nbformat.read(NOTEBOOK.with_suffix(".ipynb"), as_version=4)
    assert [c.source for c in py.cells] == [c.source for c in ipynb.cells]


@pytest.mark.slow
def test_the_api_notebook_runs_judges_and_reduces_a_sweep(
    release: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APM_API_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("APM_RELEASE", str(release))
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the kernel imports this checkout
    nb = nbformat.read(NOTEBOOK.with_suffix(".ipynb"), as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(str(o.get("data", {}).get("text/markdown", "")) + o.get("text", "") for o in outputs)
    assert "Raw Video as Memory · Perceiver" in text and "SimpleStream · Perceiver" in text  # Table 3's rows
    scores = pd.read_csv(tmp_path / "out" / "report" / "scores.csv")
    assert set(scores["memory_config"]) == {"none", "raw_video"}


@pytest.mark.slow
def test_a_general_method_run_through_the_api_fills_its_column_of_table_12(
    release: Path, tiny_model: Path, tmp_path: Path
) -> None:
    """Issue 35.2: Tables 9 and 12 pick a column by the memory option a method's config chose; run in process,
    that choice was unknown, so a general model under raw video filled no column."""
    one = first_trajectory(release, tmp_path / "one")
    run = apm.run(
        [
            *_common(one, tmp_path),
            "memory=raw_video",
            "backbone=tiny_qwen2vl_hf",
            f"backbone.model={tiny_model}",
            "generation.max_tokens=8",
            "dataset.include_ea=false",
            "dataset.limit=12",
        ],
        strict=False,
    )
    apm.judge_runs([run.run_dir], "gate_only")
    report = apm.reduce_runs([run.run_dir], tmp_path / "report", bootstrap=0, figures=False)
    table12 = pd.read_csv(report.out / "tables" / "table12.csv", index_col="Model")
    assert table12.loc[:, "Video memory: Failures"].notna().sum() == 1, table12


def test_a_blocking_job_sees_no_exception_it_did_not_raise() -> None:
    """``blocking`` once ran the job inside its own ``except RuntimeError`` (no running loop): every job then
    read "RuntimeError: no running event loop" from ``sys.exc_info()`` and its ledger said it was interrupted."""
    import sys

    from apm.api.loop import blocking

    async def seen() -> object:
        return sys.exc_info()[1]

    assert blocking(seen()) is None
