"""Issue 21's "Done when": a memory protocol that reports with the general protocols is one class and one
YAML outside the package, no other edit. The test writes both under ``tmp_path``, runs them with
``apm-run`` (``PYTHONPATH`` + ``hydra.searchpath``) beside a built-in protocol on the same release and the
tiny Qwen2-VL, judges gate-only and reduces: the plug-in's row stands among the general protocols of
Tables 3 and 4 (grouped by its class's declaration), with the storage its state folder holds."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest
from support.runner import console, first_trajectory, memory_records

from apm.memory.base import state_bytes
from apm.reduce.scores import read_scores
from apm.synth import generate

pytestmark = pytest.mark.slow
NAME = "Last Frame Memory (test plug-in)"
PLUGIN = '''
from pathlib import Path

from apm.memory.base import History, MemoryProtocol, prior_sessions
from apm.records.declaration import Declaration
from apm.video.select import Span


class LastFrameMemory(MemoryProtocol):
    """Keeps the last frame of each completed session and shows those of the sessions an instance may see."""

    declaration = Declaration("general", streaming=False, persistent=True)
    session_frames = 1 << 20

    async def end_session(self, view, state_dir: Path, writer=None) -> dict:
        last = view.frames[-1]
        state_dir.mkdir(parents=True, exist_ok=True)
        (state_dir / f"{view.session.key.replace('/', '_')}@{last.wall_clock}.jpg").write_bytes(last.jpeg)
        return {"kept": 1}

    def history(self, instance, trajectory, state_dir: Path) -> History:
        kept = {p.stem.split("@")[0]: int(p.stem.split("@")[1]) for p in state_dir.glob("*.jpg")}
        seen = [s.key for s in prior_sessions(instance, trajectory) if s.key.replace("/", "_") in kept]
        return History(spans=tuple(Span(k, kept[k.replace("/", "_")], kept[k.replace("/", "_")]) for k in seen))
'''
CONFIG = f"_target_: last_frame_memory.LastFrameMemory\nname: {NAME}\n"


@pytest.fixture(scope="module")
def report(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plug-in (one class, one YAML, written here), raw video and SimpleStream (a baseline), run,
    judged gate-only and reduced."""
    tmp = tmp_path_factory.mktemp("plugin")
    (tmp / "plugin" / "conf" / "memory").mkdir(parents=True)
    (tmp / "plugin" / "last_frame_memory.py").write_text(PLUGIN)
    (tmp / "plugin" / "conf" / "memory" / "last_frame.yaml").write_text(CONFIG)
    release = first_trajectory(generate(tmp / "tiny", seed=2, scale="tiny"), tmp / "release")
    env = {**os.environ, "PYTHONPATH": str(tmp / "plugin"), "APM_CACHE_DIR": str(tmp / "cache"),
           "APM_TINY_MODEL": str(tiny_model), "WANDB_MODE": "disabled"}
    env.pop("WANDB_SERVICE", None)
    common = [f"dataset.root={release}", f"output_root={tmp / 'runs'}", "backbone=tiny_qwen2vl_hf",
              "generation.max_tokens=8", "dataset.include_ea=false", "logging.progress=false",
              "logging.wandb.mode=disabled", f"hydra.searchpath=[file://{tmp / 'plugin' / 'conf'}]"]
    console("apm-run", "-m", *common, "memory=none,raw_video,last_frame", env=env)
    run_dirs = sorted(str(p.parent) for p in (tmp / "runs").rglob("config.json"))
    assert len(run_dirs) == 3
    console("apm-judge", *run_dirs, "judge=gate_only", env=env)
    console("apm-reduce", *run_dirs, "--out", str(tmp / "report"), "--bootstrap", "0", "--no-figures", env=env)
    return tmp / "report"


def _rows(report: Path, table: str) -> list[list[str]]:
    """A table's method rows, cell by cell, in the order it prints them."""
    return [[cell.strip() for cell in line.split("|")[1:-1]]
            for line in (report / "tables" / f"{table}.md").read_text().splitlines()
            if line.startswith("| ") and " · " in line]


def test_the_plugin_reports_among_the_general_protocols(report: Path) -> None:
    scores = read_scores(report / "scores.csv")
    families = scores.drop_duplicates("memory_config").set_index("memory_config")["method_family"]
    assert families.to_dict() == {"none": "baseline", "raw_video": "general", "last_frame": "general"}
    for table in ("table3", "table4"):
        methods = [row[0].split(" · ")[0] for row in _rows(report, table)]
        assert methods[0] == "SimpleStream" and set(methods[1:]) == {"Raw Video as Memory", NAME}, methods
    (plugin,) = [row for row in _rows(report, "table3") if row[0].startswith(NAME)]
    assert plugin[1:3] == ["✗", "✓"]  # Streaming, Persistent: as its class declares


def test_the_plugins_storage_is_what_its_state_folder_holds(report: Path) -> None:
    scores = read_scores(report / "scores.csv")
    storage = scores[scores["metric"] == "storage_bytes_per_hour"].set_index("memory_config")["value"]
    assert set(storage.index) == {"none", "raw_video", "last_frame"}
    assert pd.to_numeric(storage.drop("none")).gt(0).all() and pd.to_numeric(storage["none"]) == 0
    (run_dir,) = [p.parent for p in (report.parent / "runs").rglob("config.json") if "last-frame" in str(p)]
    (state,) = (run_dir / "memory_state").iterdir()
    assert state_bytes(state) == max(m["bytes"] for m in memory_records(run_dir)) > 0


def test_the_memory_doc_gives_a_spans_units() -> None:
    """Issue 36 item 9: a plug-in author reads what ``Span``'s numbers are without opening the code."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "memory.md").read_text()
    bullet = doc.split("- `spans`:")[1].split("\n- ")[0]
    assert "absolute second" in bullet and "inclusive" in bullet and "apm.data.clock.absolute" in bullet
