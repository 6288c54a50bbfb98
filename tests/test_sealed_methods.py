"""Sealed by construction (issue 34, item 2): an in-process method is handed nothing that names an
instance's polarity or annotations, is refused for showing another candidate's turns, has its state
counted wherever it files it, and a persistent declaration with nothing exported is marked. Each test
runs an adversary (tests/support/sealing.py) that succeeded before the change."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from support.runner import compose_run, memory_records, records, run
from support.sealing import PROBE_ID, AnnotationReader, KeyReader, ReferenceAnnotationReader, RequestIdReader

from apm.cli.reduce import main as reduce_main
from apm.data.instances import release_instances
from apm.data.release import load_release
from apm.data.tasks import ADAPTIVE
from apm.reduce.scores import read_scores
from apm.runner.causality import REFUSED
from apm.runner.online import session_interactions
from apm.runner.stops import RunStopped

TESTS = Path(__file__).resolve().parent
ADAPTIVE_TASKS = f"dataset.tasks=[{','.join(ADAPTIVE)}]"
ID_READER = ["backbone=random", "backbone._target_=support.sealing.RequestIdReader", "~backbone.seed"]


@pytest.fixture(autouse=True)
def _support_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TESTS))


def _run(release: Path, out: Path, overrides: list[str]) -> tuple[list[dict[str, Any]], RunStopped | None]:
    """A run of ``overrides`` on ``release`` (no EA): its records and how it stopped."""
    cfg = compose_run(release, out / "runs", out / "cache", ["dataset.include_ea=false", *overrides])
    stopped = None
    try:
        run(cfg)
    except RunStopped as e:
        stopped = e
    return [r for d in sorted(p.parent for p in (out / "runs").rglob("records")) for r in records(d)], stopped


def _decision_ba(recs: list[dict[str, Any]]) -> dict[str, float]:
    """Per adaptive task, the balanced accuracy of the parsed decisions (%)."""
    right: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for r in recs:
        if r["task"] in ADAPTIVE:
            wanted = "INTERVENE" if r["polarity"] == "positive" else "SILENT"
            right[r["task"], r["polarity"]].append(r["decision"] == wanted)
    return {t: 50.0 * (sum(right[t, "positive"]) / len(right[t, "positive"])
                       + sum(right[t, "negative"]) / len(right[t, "negative"]))
            for t in ADAPTIVE if right[t, "positive"] and right[t, "negative"]}


def test_a_backbone_deciding_from_the_request_id_learns_nothing(tiny: Path, tmp_path: Path) -> None:
    """Before: the request id was the instance key (``…/pos``, ``…/neg0``), and a backbone that never
    looked at a frame scored decision BA 100 on every adaptive task."""
    recs, stopped = _run(tiny, tmp_path / "a", ["memory=none", *ID_READER, ADAPTIVE_TASKS])
    assert stopped is None and recs and not [r for r in recs if r["error"]]
    seen = list(RequestIdReader.SEEN)
    keys = {i.key for i in release_instances(load_release(tiny))}
    assert len(seen) == len(set(seen)) == len(recs)  # one id per instance: logs and caches still tell them apart
    assert not set(seen) & keys and not [s for s in seen if PROBE_ID.search(s)], seen[:3]
    ba = _decision_ba(recs)
    assert set(ba) == set(ADAPTIVE) and all(v < 100.0 for v in ba.values()), ba
    RequestIdReader.SEEN.clear()
    _run(tiny, tmp_path / "b", ["memory=none", *ID_READER, ADAPTIVE_TASKS])
    assert sorted(RequestIdReader.SEEN) == sorted(seen)  # stable: the same id for an instance in every run


def test_a_streaming_system_deciding_from_its_probes_identity_learns_nothing(tiny: Path, tmp_path: Path) -> None:
    """Before: the probe's instance view kept the key and probe id, and a system answering from them
    scored decision BA 100."""
    recs, stopped = _run(tiny, tmp_path, ["memory=none", "memory._target_=support.sealing.KeyReader",
                                          "~memory.recent_frames", *ID_READER, ADAPTIVE_TASKS])
    assert stopped is None and recs and not [r for r in recs if r["error"]]
    keys = {r["key"] for r in recs}
    read = list(KeyReader.READ)
    assert len(read) == len(recs) and len({x["key"] for x in read}) == len(recs)
    assert not {x["key"] for x in read} & keys
    assert not [x for x in read if PROBE_ID.search(x["key"]) or x["probe_id"] or x["polarity"]], read[:3]
    ba = _decision_ba(recs)
    assert set(ba) == set(ADAPTIVE) and all(v < 100.0 for v in ba.values()), ba


def test_a_general_protocol_is_handed_no_annotation_and_a_reference_still_is(tiny: Path, tmp_path: Path) -> None:
    """Before: every protocol was handed the annotated instance, so one declared ``general`` could read the
    evidence moments, the correct option and the polarity."""
    tasks = "dataset.tasks=[ER,ERA,RCR]"
    recs, _ = _run(tiny, tmp_path / "general",
                   ["memory=oracle", "memory._target_=support.sealing.AnnotationReader", "backbone=random", tasks])
    read = list(AnnotationReader.READ)
    assert read and len(read) == len(recs)
    for seen in read:
        assert seen["evidence_moments"] is None and seen["correct_option_id"] is None, seen
        assert seen["correct_option"] is None and seen["polarity"] is None and seen["evidence_available"] is None
        assert seen["positive_heartbeat"] is None and not seen["probe_id"] and not PROBE_ID.search(seen["key"])
        assert seen["key"] not in {r["key"] for r in recs}
    recs, _ = _run(tiny, tmp_path / "reference",
                   ["memory=oracle", "memory._target_=support.sealing.ReferenceAnnotationReader", "backbone=random",
                    tasks])
    read = list(ReferenceAnnotationReader.READ)
    assert len(read) == len(recs) and {x["key"] for x in read} == {r["key"] for r in recs}
    assert all(x["evidence_moments"] for x in read if x["key"].split("/")[1].startswith("ER-"))
    assert {x["polarity"] for x in read} == {None, "positive", "negative"}


def test_the_oracle_evidence_control_still_shows_the_evidence_and_its_instances_own_turns(
        tiny: Path, tmp_path: Path) -> None:
    recs, stopped = _run(tiny, tmp_path, ["memory=oracle", *ID_READER, "backbone.max_frames=8",
                                          "dataset.tasks=[ER,PRM]"])
    assert stopped is None and not [r for r in recs if r["error"]]  # a PRM registration of an earlier session
    assert any({f["session"] for f in r["frames"]} - {f"{r['day_id']}/{r['session_id']}"} for r in recs)


def _foreign_turns(release_root: Path) -> set[str]:
    """The instances (keys) whose earlier visible sessions hold a turn of another candidate."""
    release = load_release(release_root)
    out = set()
    for inst in release_instances(release):
        traj = release.trajectory(inst.trajectory_id)
        for key in inst.visible_sessions[:-1]:
            said = session_interactions(release, traj, traj.session(key))
            if any(t.candidate_id != inst.candidate_id for t in said):
                out.add(inst.key)
    return out


@pytest.mark.parametrize("target", ["EveryonesTurns", "EveryonesTurnsStream"])
def test_a_method_that_shows_another_candidates_turns_is_refused(tiny: Path, tmp_path: Path, target: str) -> None:
    """Before: the causality check read a shown turn's time, not whose it was, so every candidate's
    questions and registrations reached every instance."""
    tasks = "dataset.tasks=[ER,ERA,RCR,PRM]"
    recs, stopped = _run(tiny, tmp_path, ["memory=none", f"memory._target_=support.sealing.{target}",
                                          "~memory.recent_frames", "backbone=random", tasks])
    foreign = _foreign_turns(tiny) & {r["key"] for r in recs}
    assert foreign, "the release has instances whose earlier sessions hold another candidate's turn"
    refused = {r["key"] for r in recs if (r["error"] or "").startswith(REFUSED)}
    assert refused == foreign
    assert all("not the instance's own" in r["error"] for r in recs if r["key"] in refused), recs[0]["error"]
    assert stopped is not None and "causality" in str(stopped)


def _streamed(release: Path, out: Path, target: str, name: str) -> Path:
    """The run folder of the streaming system ``target`` (tests/support/sealing.py), named ``name``, on ER."""
    _run(release, out, ["memory=none", f"memory._target_=support.sealing.{target}", f"memory.name={name}",
                        "~memory.recent_frames", *ID_READER, "dataset.tasks=[ER]"])
    (run_dir,) = [p.parent for p in (out / "runs").rglob("records")]
    return run_dir


def test_video_filed_as_fast_weights_by_a_system_that_is_not_parametric_counts_as_storage(
        tiny: Path, tmp_path: Path) -> None:
    """Before: a system that was not parametric but kept its video under ``fast_weights/`` had every byte
    measured apart (``fast_weight_bytes``) and reported per-video storage (``bytes``, Storage/hr) 0."""
    run_dir = _streamed(tiny, tmp_path, "VideoAsFastWeights", "Video as fast weights")
    lines = memory_records(run_dir)
    assert lines and all(m["fast_weight_bytes"] == 0 for m in lines)
    assert all(m["bytes"] == sum(e["bytes"] for e in m["state"].values()) > 0 for m in lines)
    assert all(path.startswith("fast_weights/") for m in lines for path in m["state"])
    out = tmp_path / "report"
    assert reduce_main([str(run_dir), "--out", str(out), "--bootstrap", "0", "--no-figures"]) == 0
    scores = read_scores(out / "scores.csv").set_index("metric")["value"]
    assert scores["storage_bytes_per_hour"] > 0 and "peak_fast_weight_bytes_mean" not in scores


def _table3(out: Path) -> dict[str, dict[str, str]]:
    """Table 3's Markdown rows, by the memory's name: each cell under its header."""
    lines = [[c.strip() for c in line.split("|")[1:-1]] for line in (out / "tables" / "table3.md").read_text()
             .splitlines() if line.startswith("|")]
    header = next(cells for cells in lines if "Persistent" in cells)
    return {cells[0].split(" · ")[0]: dict(zip(header, cells)) for cells in lines if " · " in cells[0]}


def test_a_persistent_system_that_exported_nothing_is_marked_in_table3(tiny: Path, tmp_path: Path) -> None:
    """Before: a system declared persistent that exported nothing printed a plain ✓ (Storage/hr 0 beside
    it said no more than a system keeping a few bytes would)."""
    kept = _streamed(tiny, tmp_path / "kept", "VideoAsFastWeights", "Video as fast weights")
    nothing = _streamed(tiny, tmp_path / "nothing", "ExportsNothing", "Exports nothing")
    assert all(m["bytes"] == m["fast_weight_bytes"] == 0 for m in memory_records(nothing))
    out = tmp_path / "report"
    assert reduce_main([str(kept), str(nothing), "--out", str(out), "--bootstrap", "0", "--no-figures"]) == 0
    rows = _table3(out)
    assert rows["Video as fast weights"]["Persistent"] == "✓"  # it exported its state: as declared
    marked = rows["Exports nothing"]["Persistent"]
    assert marked != "✓" and marked.startswith("✓"), marked
    table = (out / "tables" / "table3.md").read_text()
    assert "exported nothing" in table
    assert "exported nothing" in (out / "tables" / "table3.tex").read_text()
