"""How often one run composes its config (issue 37, item 6): ``apm-run`` without ``-m`` composes it once
(``Hydra.run``: not Hydra's main, which composes it first only to read ``hydra.mode``), ``apm.run`` once
(its ``compose``); each composes its method's chosen options' defaults once more
(:func:`apm.runner.config.method_identity`: the settings a run changes are what differs from them). Each
composition is counted where Hydra loads a config (``ConfigLoaderImpl.load_configuration``), in a child
process, by the function of Hydra's or apm's that asked for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from support import REPO

from apm.cli.run import one_job
from apm.synth import generate

SPY = """
import json, sys, traceback
from hydra._internal.config_loader_impl import ConfigLoaderImpl
load, asked = ConfigLoaderImpl.load_configuration, []
def counted(self, *args, **kwargs):
    names = {f.name for f in traceback.extract_stack()}
    asked.append(next(n for n in ("method_identity", "get_mode", "compose", "run") if n in names))
    return load(self, *args, **kwargs)
ConfigLoaderImpl.load_configuration = counted
overrides = json.loads(sys.argv[2])
if sys.argv[1] == "cli":
    from apm.cli.run import main
    sys.argv = ["apm-run", *overrides]
    try:
        main()
    except SystemExit as e:
        assert not e.code, e.code
else:
    import apm
    apm.run(overrides)
print(json.dumps(asked))
"""


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("rel") / "tiny", seed=1, scale="tiny")


def _composed(entry: str, release: Path, out: Path) -> Counter[str]:
    """Each composition one run made, by the function that asked for it."""
    overrides = [
        f"dataset.root={release}",
        f"output_root={out / 'runs'}",
        f"frames.cache_dir={out / 'cache'}",
        "dataset.limit=2",
        "logging.progress=false",
        "logging.wandb.mode=disabled",
    ]
    done = subprocess.run(
        [sys.executable, "-c", SPY, entry, json.dumps(overrides)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled"},
        cwd=out,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return Counter(json.loads(done.stdout.strip().splitlines()[-1]))


def test_apm_run_composes_the_config_once_and_the_methods_defaults_once(release: Path, tmp_path: Path) -> None:
    assert _composed("cli", release, tmp_path) == {"run": 1, "method_identity": 1}


def test_the_python_api_composes_the_config_once_and_the_methods_defaults_once(release: Path, tmp_path: Path) -> None:
    assert _composed("api", release, tmp_path) == {"compose": 1, "method_identity": 1}


@pytest.mark.parametrize(
    ("argv", "one"),
    [
        ([], True),
        (["memory=none", "+backbone@writer=random", "~judge"], True),
        (["-m", "memory=none,raw_video"], False),
        (["--multirun", "memory=none"], False),
        (["--cfg", "job"], False),
        (["--info"], False),
        (["-cd", "/elsewhere", "memory=none"], False),
        (["hydra.mode=MULTIRUN"], False),
        (["memory=none", "+hydra.mode=RUN"], False),
    ],
)
def test_only_overrides_none_of_them_hydra_mode_is_one_job_composed_once(argv: list[str], one: bool) -> None:
    assert one_job(argv) is one
