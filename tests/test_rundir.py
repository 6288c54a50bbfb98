"""``apm.records.rundir`` owns the run: ``RunDir`` names every path a real run writes, and every command
takes run dirs or any folder above them, skipping what is not a run with one note line."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from apm.cli.judge import main as judge_main
from apm.cli.publish import main as publish_main
from apm.cli.reduce import main as reduce_main
from apm.cli.status import main as status_main
from apm.cli.view import main as view_main
from apm.records import rundir
from apm.records.rundir import RunDir, find_runs
from apm.synth import generate

LIMIT = ("memory=raw_video", "dataset.limit=6", "logging.progress=false", "logging.wandb.mode=disabled",
         "preflight=false")
SHARD = "shard-0-of-1"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An output root with two finished runs and the debris of a start that failed before ``config.json``
    (a job folder holding only a log), as a missing engine leaves it."""
    base = tmp_path_factory.mktemp("sweep")
    release = generate(base / "rel", seed=3, scale="tiny")
    for backbone in ("random", "always_silent"):
        done = subprocess.run([sys.executable, "-m", "apm.cli.run", f"dataset.root={release}",
                               f"output_root={base / 'runs'}", f"frames.cache_dir={base / 'cache'}",
                               f"backbone={backbone}", *LIMIT], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    debris = base / "runs" / "synthetic" / "none" / "vllm-qwen-0123456789ab" / "jobs" / SHARD
    debris.mkdir(parents=True)
    (debris / "app.log").write_text("FileNotFoundError: [Errno 2] No such file or directory: 'vllm'\n")
    return base / "runs"


def runs_of(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("config.json"))


DEBRIS = "vllm-qwen-0123456789ab"


def one_note(err: str, prog: str) -> None:
    """Exactly one note line, naming the debris folder and no run."""
    notes = [line for line in err.splitlines() if line.startswith(f"{prog}: note: ")]
    assert len(notes) == 1 and DEBRIS in notes[0] and "skipped 1 folder" in notes[0], err


def test_run_dir_names_every_path_a_run_writes(sweep: Path) -> None:
    run = RunDir(runs_of(sweep)[0])
    trajectories = {json.loads(line)["trajectory_id"] for line in run.memory_file(SHARD).read_text().splitlines()}
    named = {run.config, run.records_file(SHARD), run.memory_file(SHARD), run.plan(SHARD), run.ledger(SHARD),
             run.manifest(SHARD), run.shard_lock(SHARD), run.prompts, *(run.memory_state(t) for t in trajectories)}
    assert all(p.exists() for p in named)
    written = {p for p in run.path.rglob("*") if p.is_file()}
    in_named = {p for p in written if any(p == n or n in p.parents for n in named)}
    others = {p.relative_to(run.path).as_posix() for p in written - in_named}
    # what else a run holds: Hydra's job log (named after the entry module, apm.cli.run), the shard-count group
    # locks (docs/records.md)
    assert others == {f"jobs/{SHARD}/run.log", "locks/count-1.group.lock", "locks/groups.lock"}, others


def test_find_runs_takes_a_run_dir_or_any_folder_above_and_skips_debris(sweep: Path) -> None:
    runs = runs_of(sweep)
    found = find_runs([sweep])
    assert found.paths == [p.resolve() for p in runs]
    assert [p.name for p in found.skipped] == [DEBRIS]
    assert find_runs([runs[0], sweep]).paths == found.paths  # each once, in path order
    assert find_runs(runs).skipped == [] and find_runs(runs).note() is None
    with pytest.raises(FileNotFoundError):
        find_runs([sweep / "nowhere"])


def test_a_folder_only_apm_submit_wrote_is_a_run_for_status_not_for_judge(tmp_path: Path) -> None:
    submitted = tmp_path / "run" / "jobs" / SHARD
    submitted.mkdir(parents=True)
    (submitted / "ledger.jsonl").write_text(json.dumps({"event": "submitted", "job_id": "7", "time": 0.0}) + "\n")
    assert find_runs([tmp_path]).paths == [(tmp_path / "run").resolve()]
    assert find_runs([tmp_path], need_config=True).skipped == [(tmp_path / "run").resolve()]


def test_judge_takes_a_parent_folder_and_skips_debris(sweep: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert judge_main([str(sweep), "judge=gate_only"]) == 0
    one_note(capsys.readouterr().err, "apm-judge")
    assert all(any(RunDir(p).judgements.glob("*.jsonl")) for p in runs_of(sweep))


def test_judge_takes_a_glob_that_matches_debris(sweep: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's ``apm-judge runs/*/*/*``: the debris among the matches does not refuse the call."""
    matches = sorted(p for p in sweep.glob("*/*/*"))
    assert any(p.name == DEBRIS for p in matches)
    assert judge_main([*map(str, matches), "judge=gate_only"]) == 0
    one_note(capsys.readouterr().err, "apm-judge")


def test_judge_refuses_a_folder_without_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as stop:
        judge_main([str(tmp_path / "empty"), "judge=gate_only"])
    assert stop.value.code == 2 and "no run directories" in capsys.readouterr().err


def test_reduce_takes_a_parent_folder_and_skips_debris(sweep: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert judge_main([str(sweep), "judge=gate_only"]) == 0
    capsys.readouterr()
    assert reduce_main([str(sweep), "--out", str(tmp_path / "report"), "--bootstrap", "0", "--no-figures"]) == 0
    one_note(capsys.readouterr().err, "apm-reduce")
    manifest = json.loads((tmp_path / "report" / "manifest.json").read_text())
    assert sorted(Path(i["run_dir"]) for i in manifest["inputs"]) == [p.resolve() for p in runs_of(sweep)]


def test_publish_takes_a_parent_folder_and_skips_debris(sweep: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    for var in ("WANDB_DIR", "WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_SERVICE", raising=False)
    assert publish_main([str(sweep), "--mode", "offline", "--dir", str(tmp_path / "pub"), "--bootstrap", "0"]) == 0
    captured = capsys.readouterr()
    one_note(captured.err, "apm-publish")
    hashes = {json.loads(RunDir(p).config.read_text())["config_hash"] for p in runs_of(sweep)}
    assert {line.split()[1].split("-")[0] for line in captured.out.splitlines()} == hashes


def test_view_takes_a_parent_folder_and_skips_debris(sweep: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert view_main([str(sweep), "--out", str(tmp_path / "site")]) == 0
    captured = capsys.readouterr()
    one_note(captured.err, "apm-view")
    assert " x 2 methods" in captured.out


def test_status_takes_a_parent_folder_and_skips_debris(sweep: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status_main([str(sweep), "--json"])
    captured = capsys.readouterr()
    one_note(captured.err, "apm-status")
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert sorted(r["run"] for r in rows) == sorted(p.relative_to(sweep).as_posix() for p in runs_of(sweep))
    assert all(r["state"] != "not started" for r in rows)


def test_status_names_runs_relative_to_the_folder_given(sweep: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(sweep.parent)
    status_main([sweep.name, "--json"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(r["run"] for r in rows) == sorted(p.relative_to(sweep).as_posix() for p in runs_of(sweep))


ROOT = Path(__file__).resolve().parents[1]
RUN_DIR_FOLDERS = frozenset({rundir.RECORDS, rundir.MEMORY, rundir.JUDGEMENTS, rundir.JOBS, rundir.LOCKS,
                             rundir.PROMPTS, rundir.PUBLISH, rundir.MEMORY_STATE, rundir.MEMORY_STATE_VISIBLE})
"""The folders of a run dir, as :mod:`apm.records.rundir` names them."""
GLOBS = ("glob", "rglob")


def _path_literal(node: ast.AST) -> str | None:
    """A string literal that is a run-dir folder or starts a path with one (``"records/*.jsonl"``), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        first = node.value.split("/", 1)[0]
        return node.value if first in RUN_DIR_FOLDERS else None
    return None


def spelled_paths(source: str) -> list[tuple[int, str]]:
    """``(line, literal)`` of each run-dir folder a module spells as a path: an operand of ``/``, a ``glob`` /
    ``rglob`` pattern, or any other literal (an f-string's part included) starting ``<folder>/``; docstrings
    are prose."""
    tree = ast.parse(source)
    prose = {id(node.value) for node in ast.walk(tree)
             if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            found += [(node.lineno, lit) for side in (node.left, node.right) if (lit := _path_literal(side))]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in GLOBS:
            found += [(node.lineno, lit) for arg in node.args[:1] if (lit := _path_literal(arg))]
        elif id(node) not in prose and (lit := _path_literal(node)) and "/" in lit:
            found.append((node.lineno, lit))
    return sorted(set(found))


@pytest.mark.parametrize(("source", "spelled"), [
    ('run_dir / "records"', "records"),
    ('(run / "memory_state") / tid', "memory_state"),
    ('out.rglob("records")', "records"),
    ('out.rglob("records/*.jsonl")', "records/*.jsonl"),
    ('files_in(run_dir, "judgements/*.jsonl")', "judgements/*.jsonl"),
    ('f"jobs/{shard}/plan.json"', "jobs/"),
    ('root / "publish"', "publish"),
])
def test_the_literal_check_finds_a_run_dir_folder_spelled_as_a_path(source: str, spelled: str) -> None:
    assert [s for _, s in spelled_paths(source)] == [spelled]


def test_the_literal_check_leaves_kinds_and_keys_alone() -> None:
    """A folder's name as a line kind, a dict key or a column is no path."""
    assert spelled_paths('read_lines(path, "records")\nrow["memory"]\ndf.to_dict("records")\n'
                         'run.files("judgements")\n"""records/*.jsonl: the docstring"""') == []


def test_no_stage_module_spells_a_run_dir_folder_as_a_path() -> None:
    """Every run-dir path goes through :class:`RunDir`: only ``apm/records/rundir.py`` spells the layout."""
    owner = ROOT / "apm" / "records" / "rundir.py"
    spelled = [f"{path.relative_to(ROOT)}:{line}: {literal!r}"
               for path in sorted((ROOT / "apm").rglob("*.py")) if path != owner
               for line, literal in spelled_paths(path.read_text(encoding="utf-8"))]
    assert spelled == [], "\n".join(spelled)
