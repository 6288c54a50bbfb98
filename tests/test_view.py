"""apm-view: the static instance viewer built from real runs of the tiny release, checked in the data and
in a real headless Chromium (file://, no network): filters, rows against the records, thumbnails decode.

The browser tests skip when Chromium, chromedriver or selenium is missing, and fail instead under
``APM_REQUIRE_BROWSER=1`` (as in CI).
"""

from __future__ import annotations

import ast
import base64
import importlib.util
import json
import os
import re
import shutil
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from support.runner import compose_run, records, release_instance_count, run

from apm.cli.judge import main as judge
from apm.cli.view import main as view
from apm.data.instances import release_instances
from apm.data.release import load_release
from apm.data.tasks import TASKS
from apm.records.prompts import reader, restore
from apm.records.rundir import RunDir
from apm.reduce import load_runs, score_table
from apm.reduce.tables import method_rows
from apm.synth import generate
from apm.video.cache import FrameCache
from apm.video.thumbnails import recorded_frame
from apm.view import DEFAULT_FRAMES_PER_CELL, DEFAULT_THUMB_GRID
from apm.view.collect import on_grid, strip, thumbed

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1400,1000",
)
METHODS = (("none", "random"), ("raw_video", "oracle"))
"""Two methods that disagree often: SimpleStream with random answers, raw video with the oracle."""
FAULTS = {
    "errored": {"error": "TimeoutError: backbone timed out", "output": "", "finish_reason": None,
                "parse_status": None, "parse_error": None, "answer": None, "correct": None},
    "parse_failed": {"output": "I cannot tell.", "parse_status": "failed", "parse_error": "no_answer", "answer": None,
                     "correct": False},
}
"""What the runner writes of a backbone error and of an output with no answer in it, injected into the oracle's
first ER records (the tiny real backbones neither fail nor ramble)."""


def inject_faults(run_dir: Path) -> dict[str, str]:
    """Give the run's first ER records the :data:`FAULTS` (rewriting its records files); key → fault."""
    faulted: dict[str, str] = {}
    for path in sorted((run_dir / "records").glob("*.jsonl")):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        for line in lines:
            if line["task"] == "ER" and len(faulted) < len(FAULTS):
                fault = list(FAULTS)[len(faulted)]
                line.update(FAULTS[fault])
                faulted[line["key"]] = fault
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return faulted


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two judged runs of the tiny release and the site built from their parent folder."""
    tmp = tmp_path_factory.mktemp("view")
    tiny = generate(tmp / "tiny", seed=3, scale="tiny")
    dirs = []
    for memory, backbone in METHODS:
        cfg = compose_run(tiny, tmp / "runs", tmp / "cache",
                          [f"memory={memory}", f"backbone={backbone}", "backbone.max_frames=8"])
        dirs.append(run(cfg))
    faults = inject_faults(dirs[-1])
    for d in dirs:
        assert judge([str(d), "judge=gate_only"]) == 0
    assert view([str(tmp / "runs"), "--out", str(tmp / "site")]) == 0
    order = [i.key for i in release_instances(load_release(tiny, check_videos=False))]
    by_method = {records(d)[0]["run"]["config_hash"]: {r["key"]: r for r in records(d)} for d in dirs}
    return {"site": tmp / "site", "runs": tmp / "runs", "dirs": dirs, "order": order, "records": by_method,
            "release": tiny, "faults": faults}


def page_data(site: Path) -> dict[str, Any]:
    """The JSON of ``data.js``: methods, scores and every instance's filter entry."""
    text = (site / "data.js").read_text(encoding="utf-8")
    return json.loads(text.removeprefix("window.APM_VIEW = (").rstrip().removesuffix(");"))


def chunk(site: Path, name: str) -> dict[str, Any]:
    """``chunks/<name>.js`` as JSON: ``{"rows": {key: …}, "texts": {digest: text}}``."""
    text = (site / "chunks" / f"{name}.js").read_text(encoding="utf-8")
    return json.loads(text.removeprefix(f"window.APM_VIEW_CHUNK({json.dumps(name)}, ").rstrip().removesuffix(");"))


def page_instances(site: Path) -> list[dict[str, Any]]:
    """The instances whole, in page order, assembled as the page does from their chunks: the instance's own
    fields, ``by`` (each method's cell) and ``texts`` (the prompt texts its methods were sent, by digest)."""
    loaded: dict[str, dict[str, Any]] = {}
    rows = []
    data = page_data(site)
    for entry in data["instances"]:
        own = f"{entry['task']}/i-{entry['chunk']}"
        cells = {m["id"]: f"{entry['task']}/m{i}-{n}" for i, (m, n) in enumerate(zip(data["methods"], entry["cells"]))
                 if n is not None}
        for name in (own, *cells.values()):
            loaded.setdefault(name, chunk(site, name))
        by = {h: loaded[name]["rows"][entry["key"]] for h, name in cells.items()}
        rows.append({**loaded[own]["rows"][entry["key"]], "differs": entry["differs"], "by": by,
                     "texts": loaded[own]["texts"]})
    return rows


def right(record: dict[str, Any]) -> bool:
    """Right as the scores count it: the answer (MCQA, EA) or the gate (adaptive)."""
    return (record["gate_pass"] if record["family"] == "adaptive" else record["correct"]) is True


def differing_keys(by_method: dict[str, dict[str, dict[str, Any]]]) -> set[str]:
    """Keys whose methods disagree on answer, decision or right/wrong."""
    keys = set().union(*by_method.values())
    seen = {k: {(m[k]["answer"], m[k]["decision"], right(m[k])) for m in by_method.values() if k in m} for k in keys}
    return {k for k, outcomes in seen.items() if len(outcomes) > 1}


def test_data_holds_every_record_with_its_judgement_and_frames(built: dict[str, Any]) -> None:
    data, rows = page_data(built["site"]), page_instances(built["site"])
    by_method = built["records"]
    assert {m["id"] for m in data["methods"]} == set(by_method)
    assert [i["key"] for i in data["instances"]] == [i["key"] for i in rows] == built["order"]
    judged = {(j["run"]["config_hash"], j["key"]): j for d in built["dirs"] for p in (d / "judgements").glob("*.jsonl")
              for j in map(json.loads, p.read_text().splitlines())}
    for inst, entry in zip(rows, data["instances"]):
        assert entry["outcomes"] == "".join(inst["by"][m["id"]]["outcome"][0] if m["id"] in inst["by"] else "-"
                                            for m in data["methods"])
        for h, v in inst["by"].items():
            record = by_method[h][inst["key"]]
            assert (v["output"], v["answer"], v["decision"]) == (record["output"], record["answer"], record["decision"])
            assert [(f["i"], f["session"], f["offset"], f["wall_clock"]) for f in v["frames"]] == [
                (i, *(record["frames"][i][k] for k in ("session", "offset", "wall_clock")))
                for i in thumbed(record["frames"], DEFAULT_FRAMES_PER_CELL, DEFAULT_THUMB_GRID)]
            assert all(f.get("src") for f in v["frames"]), v["frames"]
            judgement = judged.get((h, inst["key"]))
            assert (v["judgement"] or {}).get("justification") == (judgement or {}).get("justification")
        assert inst["differs"] == (inst["key"] in differing_keys(by_method))
        assert inst["prompt"][-1]["time"] == inst["probe_time"]
    era = next(i for i in rows if i["task"] == "ERA")
    assert era["prompt"][0]["label"].startswith("question") and len(era["prompt"][0]["options"]) == 4


def test_scores_at_the_top_are_the_reducers(built: dict[str, Any]) -> None:
    runs = load_runs(built["dirs"])
    scores = score_table(runs.records, runs.judgements, runs.memory, reps=0)
    data = page_data(built["site"])
    for method in data["methods"]:
        mine = scores[scores["config_hash"].astype(str) == method["id"]]
        overall = mine[(mine["metric"] == "overall") & (mine["task"] == "all")]["value"].item()
        assert method["scores"]["overall/all"]["value"] == pytest.approx(overall)
        assert method["scores"]["task_score/ER"]["n"] == release_instance_count(built["release"], {"ER"})


def test_the_score_table_is_in_the_papers_order(built: dict[str, Any]) -> None:
    """Issue 36.9: columns as the paper's Tables 3 and 4 order them (capabilities, Overall; the tasks, EA, EU),
    rows (methods) as ``apm-reduce``'s tables order them; each column names the instances behind it."""
    data = page_data(built["site"])
    assert [c["label"] for c in data["score_columns"]] == ["CS Und.", "Perception", "Adaptive", "Overall", *TASKS,
                                                           "EA", "EU"]
    assert [c["id"] for c in data["score_columns"]][:5] == [
        "capability_score/cross_session", "capability_score/perception", "capability_score/adaptive", "overall/all",
        "task_score/ER"]
    filters = {c["id"]: c["filter"] for c in data["score_columns"]}
    assert filters["overall/all"] == {} and filters["capability_score/perception"] == {"family": "perception"}
    assert filters["task_score/TPG"] == {"task": "TPG"} and filters["eu_accuracy/EA"] == {"task": "EA"}
    runs = load_runs(built["dirs"])
    rows = method_rows(score_table(runs.records, runs.judgements, runs.memory, reps=0))
    assert [m["label"] for m in data["methods"]] == list(rows["method"].cat.categories)
    assert data["methods"][-1]["label"].endswith("(baseline)")  # the random backbone: a reference row, last


def test_each_instance_names_its_errored_and_unparsed_methods(built: dict[str, Any]) -> None:
    """An instance's ``faults``: per method ``e`` (backbone error), ``p`` (parse failed), ``.`` or ``-`` (no record)."""
    data = page_data(built["site"])
    for entry in data["instances"]:
        expected = ""
        for m in data["methods"]:
            record = built["records"][m["id"]].get(entry["key"])
            expected += "-" if record is None else "e" if record["error"] else \
                "p" if record["parse_status"] == "failed" else "."
        assert entry["faults"] == expected
    marked = {e["key"]: e["faults"].strip(".-") for e in data["instances"] if e["faults"].strip(".-")}
    assert marked == {k: {"errored": "e", "parse_failed": "p"}[f] for k, f in built["faults"].items()}


def test_site_is_self_contained_and_thumbnails_are_small(built: dict[str, Any]) -> None:
    site = built["site"]
    for name in ("index.html", "app.js", "style.css", "data.js"):
        text = (site / name).read_text(encoding="utf-8")
        assert "http://" not in text and "https://" not in text and "fetch(" not in text, name
    thumbs = sorted((site / "thumbs").glob("*.jpg"))
    assert thumbs and sum(p.stat().st_size for p in thumbs) < 5_000_000
    for path in thumbs[:50]:
        with Image.open(path) as im:
            assert max(im.size) <= 160
    sources = {f["src"] for i in page_instances(site) for v in i["by"].values() for f in v["frames"]}
    assert {p.relative_to(site).as_posix() for p in thumbs} == sources  # each distinct frame once


def test_a_missing_run_dir_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert view([str(tmp_path / "nope"), "--out", str(tmp_path / "site")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "nope" in err and not (tmp_path / "site").exists()


def test_the_site_embeds_no_absolute_path(built: dict[str, Any]) -> None:
    site, where = built["site"], str(built["site"].parent)
    assert all(d.startswith("runs/") for m in page_data(site)["methods"] for d in m["run_dirs"])
    for path in [*site.glob("*.js"), *site.glob("chunks/*.js"), site / "index.html"]:
        assert where not in path.read_text(encoding="utf-8"), path.name


def test_a_run_whose_release_changed_is_refused(built: dict[str, Any], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    saved = json.loads((built["dirs"][0] / "config.json").read_text())
    release = shutil.copytree(saved["config"]["dataset"]["root"], tmp_path / "rel")
    run_dir = shutil.copytree(built["dirs"][0], tmp_path / "runs" / "one")
    saved["config"]["dataset"]["root"] = str(release)
    (run_dir / "config.json").write_text(json.dumps(saved))
    assert view([str(run_dir), "--out", str(tmp_path / "site")]) == 0  # the same release elsewhere: fine
    (release / "candidates.jsonl").write_text((release / "candidates.jsonl").read_text().replace("?", "??", 1))
    capsys.readouterr()
    assert view([str(run_dir), "--out", str(tmp_path / "site2")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "one: the release at dataset.root changed since the run" in err, err
    assert not (tmp_path / "site2").exists()


def test_each_cell_shows_the_prompt_sent_checked_against_its_digest(built: dict[str, Any]) -> None:
    """Issue 23.7: the viewer shows the text each backbone received (kept beside the records), not template
    fields, and only once it reproduces the record's prompt_sha256."""
    for inst in page_instances(built["site"]):
        for h, v in inst["by"].items():
            record = built["records"][h][inst["key"]]
            assert v["sent"] == {"messages": record["prompt"]}
            run_dir = next(d for d in built["dirs"] if records(d)[0]["run"]["config_hash"] == h)
            canon = restore(v["sent"]["messages"], record["frames"], record["prompt_sha256"],
                            lambda digest: inst["texts"][digest])
            assert canon == restore(record["prompt"], record["frames"], record["prompt_sha256"], reader(run_dir))


def test_a_record_without_a_kept_prompt_says_so(built: dict[str, Any], tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    shutil.copytree(built["dirs"][0], runs / built["dirs"][0].name)
    shutil.rmtree(RunDir(runs / built["dirs"][0].name).prompts)
    assert view([str(runs), "--out", str(tmp_path / "site")]) == 0
    cells = [v for i in page_instances(tmp_path / "site") for v in i["by"].values()]
    assert cells and all("cannot be rebuilt" in v["sent"]["problem"] for v in cells)


@pytest.fixture(scope="module")
def capped(built: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same runs' site with 3 thumbnails per cell, evenly spread (no grid)."""
    site = tmp_path_factory.mktemp("capped") / "site"
    assert view([str(built["runs"]), "--out", str(site), "--frames-per-cell", "3", "--thumb-grid", "0"]) == 0
    return site


def decoded(strip: dict[str, Any]) -> list[list[Any]]:
    """The frames of a cell's strip as ``[session, offset]`` (what app.js's stripFrames computes)."""
    if "frames" in strip:
        return strip["frames"]
    rate = Fraction(strip["rate"])
    out = []
    for session, first, bits in strip["runs"]:
        marks = base64.b64decode(bits)
        out += [[session, float((first + j) / rate)] for j in range(len(marks) * 8) if marks[j // 8] & (0x80 >> j % 8)]
    return out


def test_the_strip_is_exact_on_and_off_the_sample_grid() -> None:
    frames = [{"session": "DAY1/S001", "offset": o} for o in (0.0, 3.0, 4.0, 700.0)] + [
        {"session": "DAY1/S002", "offset": 1.0}, {"session": "DAY1/S002", "offset": 0.5},
        {"session": "DAY1/S001", "offset": 2.0}]
    on_grid = strip(frames, Fraction(2))
    assert decoded(on_grid) == [[f["session"], f["offset"]] for f in frames] and len(on_grid["runs"]) == 4
    assert len(json.dumps(strip([{"session": "S", "offset": float(3 * i)} for i in range(1024)], Fraction(1)))) < 1_000
    off_grid = strip(frames, Fraction(1))
    assert off_grid == {"count": 7, "frames": [[f["session"], f["offset"]] for f in frames]}


def test_frames_per_cell_are_capped_with_the_full_strip_kept(built: dict[str, Any], capped: Path) -> None:
    """Issue 23.8: at most N thumbnails per cell, evenly spread with the first and the last; every frame
    sent is still listed (the full strip), so nothing shown misstates what the model saw."""
    cells = [(h, i["key"], v) for i in page_instances(capped) for h, v in i["by"].items()]
    for h, key, v in cells:
        record = built["records"][h][key]
        assert decoded(v["strip"]) == [[f["session"], f["offset"]] for f in record["frames"]]
        assert "runs" in v["strip"] and v["strip"]["count"] == len(record["frames"])
        assert len(v["frames"]) == min(3, len(record["frames"]))
        if v["frames"]:
            assert v["frames"][0]["i"] == 0 and v["frames"][-1]["i"] == len(record["frames"]) - 1
        for f in v["frames"]:
            assert record["frames"][f["i"]]["wall_clock"] == f["wall_clock"]
    sent = {(r["trajectory_id"], f["session"], f["offset"]) for m in built["records"].values() for r in m.values()
            for f in r["frames"]}
    assert len(list((capped / "thumbs").glob("*.jpg"))) < len(sent)


def test_thumbed_keeps_the_ends_and_only_grid_frames_between() -> None:
    frames = [{"session": "S", "offset": float(o)} for o in (3, 10, 20, 25, 30, 40, 50, 57)]
    assert thumbed(frames, 0, 10) == list(range(8))
    assert thumbed(frames, 4, 0) == [0, 2, 5, 7]  # evenly spread, as uniform_indices
    assert thumbed(frames, 8, 10) == [0, 1, 2, 4, 5, 6, 7]  # 25 s is off the 10 s grid
    assert thumbed(frames, 4, 10) == [0, 1, 6, 7]  # 2 of the 5 grid frames between, evenly spread
    assert thumbed(frames, 8, 7) == [0, 7] and thumbed(frames, 1, 10) == [7]
    assert on_grid({"offset": 120.0}, 60) and not on_grid({"offset": 60.5}, 60)


GRID = 10
"""The grid of the gridded site (seconds): the tiny release's sessions last about 45 s."""


@pytest.fixture(scope="module")
def gridded(built: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The runs of ``built`` and raw video x oracle at 64 frames (thumbnails of most cached seconds),
    viewed with no grid, with a 10 s grid, and with it again."""
    tmp = tmp_path_factory.mktemp("gridded")
    cache = built["runs"].parent / "cache"
    wide = run(compose_run(built["release"], tmp / "wide", cache,
                           ["memory=raw_video", "backbone=oracle", "backbone.max_frames=64"]))
    assert judge([str(wide), "judge=gate_only"]) == 0
    sites = {}
    for name, grid in (("flat", 0), ("grid", GRID), ("again", GRID)):
        sites[name] = tmp / name
        assert view([str(built["runs"]), str(tmp / "wide"), "--out", str(sites[name]), "--thumb-grid", str(grid)]) == 0
    by_method = {**built["records"], records(wide)[0]["run"]["config_hash"]: {r["key"]: r for r in records(wide)}}
    return {**sites, "records": by_method, "cache": cache}


def test_a_thumbnail_grid_bounds_the_site(built: dict[str, Any], gridded: dict[str, Any]) -> None:
    """Issue 23.8: with a grid of G s a site's thumbnails are at most the grid's points of the sessions'
    cached videos plus the cells' first and last frames, on runs whose thumbnails without one exceed that;
    each thumbnail between a cell's ends is on the grid, each is of a frame its record lists, and the
    page says the rule."""
    release = load_release(built["release"], check_videos=False)
    cache = FrameCache(str(gridded["cache"]))
    points = sum(len(range(0, cache.entry(s.video).count, GRID)) for t in release.trajectories for s in t.sessions)
    ends = {(r["trajectory_id"], r["frames"][i]["session"], r["frames"][i]["offset"])
            for method in gridded["records"].values() for r in method.values() if r["frames"] for i in (0, -1)}
    bound = points + len(ends)
    files = {name: {p.name for p in (gridded[name] / "thumbs").glob("*.jpg")} for name in ("flat", "grid")}
    assert len(files["flat"]) > bound >= len(files["grid"]), (len(files["flat"]), bound, len(files["grid"]))
    shown = set()
    for inst in page_instances(gridded["grid"]):
        trajectory = release.trajectory(inst["trajectory_id"])
        for h, v in inst["by"].items():
            sent = gridded["records"][h][inst["key"]]["frames"]
            for f in v["frames"]:
                assert (f["session"], f["offset"]) == (sent[f["i"]]["session"], sent[f["i"]]["offset"])
                assert f["i"] in (0, len(sent) - 1) or on_grid(f, GRID), (f, len(sent))
                video = trajectory.session(f["session"]).video
                assert f["src"] == f"thumbs/{recorded_frame(cache, video, f['offset']).name}"
                shown.add(f["src"].removeprefix("thumbs/"))
    assert shown == files["grid"]
    assert f"multiple of {GRID} s" in page_data(gridded["grid"])["notes"]["thumbnails"]
    assert "evenly spread" in page_data(gridded["flat"])["notes"]["thumbnails"]


def test_the_gridded_site_is_deterministic(gridded: dict[str, Any]) -> None:
    """Two builds of the same runs with the same grid write the same bytes: data, chunks and thumbnails."""
    def written(site: Path) -> dict[str, bytes]:
        return {p.relative_to(site).as_posix(): p.read_bytes() for p in sorted(site.rglob("*"))
                if p.is_file() and p.name != ".apm-output.json"}

    assert written(gridded["grid"]) == written(gridded["again"])


def test_chunks_are_per_task_and_method_and_bounded(built: dict[str, Any], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24.4: chunks hold one task and one part (an instance's own fields, or one method's cells),
    written as they fill, each at most CHUNK_BYTES (here forced small, so they split)."""
    from apm.view import site as site_module

    monkeypatch.setattr(site_module, "CHUNK_BYTES", 8_000)
    assert view([str(built["runs"]), "--out", str(tmp_path / "site")]) == 0
    files = sorted((tmp_path / "site" / "chunks").rglob("*.js"))
    assert len(files) > len(list((built["site"] / "chunks").rglob("*.js")))
    for path in files:
        name = path.relative_to(tmp_path / "site" / "chunks").as_posix().removesuffix(".js")
        assert re.fullmatch(r"[A-Z]+/(i|m\d+)-\d+", name), name
        rows = chunk(tmp_path / "site", name)["rows"]
        assert len(rows) == 1 or path.stat().st_size <= 8_000
        assert {r.get("task", name.split("/")[0]) for r in rows.values()} <= {name.split("/")[0]}
    def cells(site: Path) -> list[dict[str, Any]]:
        return [{k: v for k, v in i.items() if k != "texts"} for i in page_instances(site)]

    assert cells(tmp_path / "site") == cells(built["site"])


def test_each_video_is_resolved_once(built: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24.4: FrameCache.entry() per frame view was 59 % of a build: now once per video."""
    calls: list[Path] = []
    original = FrameCache.entry

    def counted(self: FrameCache, video: Any) -> Any:
        calls.append(Path(video))
        return original(self, video)

    monkeypatch.setattr(FrameCache, "entry", counted)
    assert view([str(built["runs"]), "--out", str(tmp_path / "site")]) == 0
    assert calls and len(calls) == len(set(calls))


def test_view_imports_only_the_layers_below_it() -> None:
    """apm.view reads records, data, scores and the frame cache (and its one thumbnail path), and reports its
    progress; it never imports the runner."""
    allowed = ("apm.records", "apm.errors", "apm.data", "apm.reduce", "apm.video.cache", "apm.video.thumbnails",
               "apm.video.select", "apm.live.progress", "apm.view")
    package = Path(importlib.util.find_spec("apm.view").origin).parent
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("apm"):
                assert node.module.startswith(allowed), f"{path.name} imports {node.module}"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("apm") and not a.name.startswith(allowed) for a in node.names)


# --- in a real browser -------------------------------------------------------------------------------------------


def browser_problem() -> str | None:
    """Why no headless Chromium can be driven here, or None."""
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        return "no chromium/chromedriver on PATH (apt-get install -y chromium chromium-driver)"
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed (pip install -e '.[dev]')"
    return None


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Headless Chromium through chromedriver; a skip (a failure under ``APM_REQUIRE_BROWSER=1``) without one."""
    problem = browser_problem()
    if problem and os.environ.get("APM_REQUIRE_BROWSER") == "1":
        pytest.fail(f"APM_REQUIRE_BROWSER=1 but {problem}")
    if problem:
        pytest.skip(problem)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def settle(driver: Any) -> None:
    """Wait until the page has placed the rows of its current filters (their chunks load async)."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 10).until(lambda d: d.execute_script("return document.body.dataset.busy === '0'"))


def open_page(driver: Any, site: Path) -> None:
    """Load the site from file:// with no filter and wait until it has rendered."""
    driver.get("about:blank")
    driver.get((site / "index.html").as_uri())
    settle(driver)


def shown(driver: Any) -> list[Any]:
    """The instance rows on screen, once the page has settled."""
    settle(driver)
    return driver.find_elements("css selector", "article.instance")


def test_task_filter_shows_the_records_side_by_side(built: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.support.ui import Select

    open_page(browser, built["site"])
    by_method = built["records"]
    assert f"Thumbnails: at most {DEFAULT_FRAMES_PER_CELL} per cell" in browser.find_element("id", "notes").text
    Select(browser.find_element("id", "f-task")).select_by_value("ER")
    expected = [k for k in built["order"] if next(iter(by_method.values())).get(k, {}).get("task") == "ER"]
    rows = shown(browser)
    assert [r.get_attribute("data-key") for r in rows] == expected
    assert len(expected) == release_instance_count(built["release"], {"ER"})
    for row in rows:
        key = row.get_attribute("data-key")
        for section in row.find_elements("css selector", "section.method"):
            record = by_method[section.get_attribute("data-method")][key]
            assert section.get_attribute("data-answer") == (record["answer"] or "")
            assert section.get_attribute("data-outcome") == ("right" if right(record) else "wrong")
            captions = [c.text for c in section.find_elements("css selector", ".frames figcaption")]
            places = thumbed(record["frames"], DEFAULT_FRAMES_PER_CELL, DEFAULT_THUMB_GRID)
            assert len(captions) == len(places) > 0
            assert all(c.startswith(f"#{i + 1} ") and record["frames"][i]["wall_clock"] in c
                       for i, c in zip(places, captions))
            assert record["output"] in section.find_element("css selector", "pre.output").text
    assert "#task=ER" in browser.current_url


def test_every_shown_thumbnail_decodes(built: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.support.ui import Select, WebDriverWait

    open_page(browser, built["site"])
    Select(browser.find_element("id", "f-task")).select_by_value("TR")
    settle(browser)
    images = browser.find_elements("css selector", "article.instance img")
    assert len(images) >= 6 * 4
    browser.execute_script("for (const img of arguments[0]) { img.loading = 'eager'; img.scrollIntoView(); }", images)
    WebDriverWait(browser, 10).until(lambda d: d.execute_script("return arguments[0].every(i => i.complete)", images))
    widths = browser.execute_script("return arguments[0].map(i => i.naturalWidth)", images)
    assert all(w > 0 for w in widths), widths


def test_differs_filter_and_paging(built: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.support.ui import Select

    open_page(browser, built["site"])
    first_page = [r.get_attribute("data-key") for r in shown(browser)]
    assert first_page == built["order"][:25]
    browser.find_element("id", "next").click()
    assert [r.get_attribute("data-key") for r in shown(browser)] == built["order"][25:50]
    browser.find_element("id", "f-differs").click()
    differing = differing_keys(built["records"])
    assert browser.find_element("id", "count").get_attribute("data-matching") == str(len(differing))
    assert {r.get_attribute("data-key") for r in shown(browser)} <= differing and len(shown(browser)) == 25
    random_id = next(iter(built["records"]))
    Select(browser.find_element("id", "f-outcome")).select_by_value("wrong")
    Select(browser.find_element("id", "f-of")).select_by_value(random_id)
    wrong = {k for k in differing if not right(built["records"][random_id][k])}
    assert browser.find_element("id", "count").get_attribute("data-matching") == str(len(wrong)) and wrong
    assert all("differs" in r.find_element("css selector", ".head").text for r in shown(browser))
    oracle_id = next(h for h in built["records"] if h != random_id)
    browser.find_element("css selector", f"#score-table input[data-method='{oracle_id}']").click()
    assert shown(browser)
    sections = [s.get_attribute("data-method") for s in browser.find_elements("css selector", "#rows .method")]
    assert set(sections) == {random_id} and f"hide={oracle_id}" in browser.current_url


def _built_on_toggle(driver: Any, section: Any, css: str) -> list[Any]:
    """The elements a ``<details>`` builds when opened: its ``toggle`` event fires after the click returns."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 10).until(lambda _: section.find_elements("css selector", css))
    return section.find_elements("css selector", css)


def test_the_prompt_sent_and_the_full_strip_open_in_place(built: dict[str, Any], capped: Path, browser: Any) -> None:
    """A cell's "prompt sent" shows the kept texts (the system prompt, the probe with its current time); in a
    capped site "all N frames" lists every frame sent, the cell's thumbnails among them."""
    open_page(browser, capped)
    section = shown(browser)[0].find_element("css selector", "section.method")
    key = shown(browser)[0].get_attribute("data-key")
    record = built["records"][section.get_attribute("data-method")][key]
    assert len(section.find_elements("css selector", ".frames figure")) == 3 < len(record["frames"])
    section.find_element("css selector", "details.strip summary").click()
    items = _built_on_toggle(browser, section, "details.strip li")
    assert len(items) == len(record["frames"])
    for item, f in zip(items, record["frames"]):
        assert f"{f['session']} +{f['offset']:g} s" in item.text
    assert len(section.find_elements("css selector", "details.strip li.thumbed img")) == 3
    section.find_element("css selector", "details.sent summary").click()
    texts = [p.text for p in section.find_elements("css selector", "details.sent pre.sent-text")]
    assert texts[0].startswith("You are a first-person streaming video assistant.")
    assert f"[Current time: {record['probe_time']}]" in texts[-1]
    frames = section.find_element("css selector", "details.sent .sent-frames").text
    assert frames == f"[{len(record['frames'])} video frames]"


def test_the_fault_filter_shows_errored_and_unparsed_instances(built: dict[str, Any], browser: Any) -> None:
    """Issue 36.9: the instances a method errored on or whose output did not parse, for any method or for one."""
    from selenium.webdriver.support.ui import Select

    open_page(browser, built["site"])
    faults, oracle_id = built["faults"], next(reversed(built["records"]))
    for choice, wanted in (("errored", {"errored"}), ("parse_failed", {"parse_failed"}),
                           ("either", {"errored", "parse_failed"})):
        Select(browser.find_element("id", "f-fault")).select_by_value(choice)
        rows = shown(browser)
        assert {r.get_attribute("data-key") for r in rows} == {k for k, f in faults.items() if f in wanted}
        for row in rows:
            cell = row.find_element("css selector", f"section.method[data-method='{oracle_id}']")
            fault = faults[row.get_attribute("data-key")]
            assert cell.get_attribute("data-fault") == fault
            assert cell.find_element("css selector", ".verdict").text.endswith(f"wrong · {fault.replace('_', ' ')}")
        assert f"fault={choice}" in browser.current_url
    Select(browser.find_element("id", "f-of")).select_by_value(next(iter(built["records"])))
    assert browser.find_element("id", "count").get_attribute("data-matching") == "0" and not shown(browser)


def test_a_score_cell_shows_the_instances_behind_it(built: dict[str, Any], browser: Any) -> None:
    """Issue 36.9: a click on a method's task score sets the method and the task (its column shown again, the
    other filters cleared) and scrolls to the list: exactly the instances that score counts."""
    from selenium.webdriver.support.ui import Select

    open_page(browser, built["site"])
    data = page_data(built["site"])
    random_id, oracle_id = list(built["records"])
    browser.find_element("css selector", f"#score-table input[data-method='{oracle_id}']").click()
    Select(browser.find_element("id", "f-polarity")).select_by_index(1)
    browser.execute_script("window.scrollTo(0, 0)")
    browser.find_element("css selector", f"td[data-method='{oracle_id}'][data-column='task_score/ER']").click()
    rows = shown(browser)
    score = next(m for m in data["methods"] if m["id"] == oracle_id)["scores"]["task_score/ER"]
    assert browser.find_element("id", "count").get_attribute("data-matching") == str(score["n"])
    assert {r.get_attribute("data-task") for r in rows} == {"ER"}
    assert rows[0].find_elements("css selector", f"section.method[data-method='{oracle_id}']")
    assert "task=ER" in browser.current_url and f"of={oracle_id}" in browser.current_url
    assert "hide=" not in browser.current_url and "polarity=" not in browser.current_url
    assert Select(browser.find_element("id", "f-task")).first_selected_option.get_attribute("value") == "ER"
    assert browser.execute_script("return window.scrollY") > 0
    browser.find_element("css selector", f"td[data-method='{random_id}'][data-column='capability_score/perception']"
                         ).click()
    perception = {k for k, r in built["records"][random_id].items() if r["family"] == "perception"}
    assert browser.find_element("id", "count").get_attribute("data-matching") == str(len(perception))
    assert "family=perception" in browser.current_url and "task=" not in browser.current_url


def test_a_thumbnail_opens_enlarged_and_closes(built: dict[str, Any], browser: Any) -> None:
    """Issue 36.9: a click on a thumbnail shows that frame large with its caption; Escape or a click closes it."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    open_page(browser, built["site"])
    thumb = browser.find_element("css selector", "#rows .frames img")
    caption = thumb.find_element("xpath", "..").find_element("css selector", "figcaption").text
    dialog = browser.find_element("id", "frame-view")
    assert not dialog.is_displayed()
    for close in ("escape", "click"):
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", thumb)
        thumb.click()
        big = browser.find_element("id", "frame-view-image")
        assert dialog.get_attribute("open") is not None and dialog.is_displayed()
        assert big.get_attribute("src") == thumb.get_attribute("src")
        assert browser.find_element("id", "frame-view-caption").text == caption
        assert big.size["width"] >= 3 * thumb.size["width"]
        if close == "escape":
            ActionChains(browser).send_keys(Keys.ESCAPE).perform()
        else:
            dialog.click()
        assert dialog.get_attribute("open") is None and not dialog.is_displayed()
