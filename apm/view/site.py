"""Write the viewer: a folder that opens from the file system or any web server, offline.

``index.html``, ``app.js`` and ``style.css`` are the package's assets, copied as they are. The data
are scripts loaded by ``<script>`` tags, so ``file://`` works without fetch or CORS: ``data.js``
(``window.APM_VIEW = {…}``) holds the methods, their scores and what the filters need of every
instance; ``chunks/<n>.js`` (``APM_VIEW_CHUNK(n, {…})``) hold the instances whole, :data:`CHUNK` at a
time, loaded only for the page on screen, so a sweep of many methods stays quick to open.
Thumbnails are files under ``thumbs/``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from apm.records.atomic import replaced_output
from apm.view.collect import collect
from apm.view.thumbs import Thumbnails

ASSETS = resources.files("apm.view").joinpath("assets")
PAGE_FILES = ("index.html", "app.js", "style.css")
PROG = "apm-view"
CHUNK = 50
"""Instances per chunk file: a page of up to 100 rows loads at most three."""
FILTER_FIELDS = ("key", "task", "family", "polarity", "differs")


@dataclass(frozen=True)
class Site:
    """What :func:`build_site` wrote."""

    index: Path
    instances: int
    methods: int
    thumbnails: int
    thumbnail_bytes: int


def script(call: str, value: Any) -> str:
    """``call`` applied to ``value`` as JSON (which is JavaScript); escaped ``<`` keeps any text inert."""
    blob = json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":")).replace("<", "\\u003c")
    return f"{call}{blob});\n"


def filter_entry(row: dict[str, Any], chunk: int) -> dict[str, Any]:
    """What the filters need of an instance, and the chunk holding the rest."""
    outcomes = {method: view["outcome"] for method, view in row["by"].items()}
    return {**{k: row[k] for k in FILTER_FIELDS}, "outcomes": outcomes, "chunk": chunk}


def write_data(stage: Path, data: dict[str, Any]) -> None:
    """``data.js`` with the filter entries of every instance, and the instances in ``chunks/``."""
    rows: Sequence[dict[str, Any]] = data["instances"]
    (stage / "chunks").mkdir()
    for n, start in enumerate(range(0, len(rows), CHUNK)):
        part = {row["key"]: row for row in rows[start:start + CHUNK]}
        (stage / "chunks" / f"{n}.js").write_text(script(f"window.APM_VIEW_CHUNK({n}, ", part), encoding="utf-8")
    index = [filter_entry(row, i // CHUNK) for i, row in enumerate(rows)]
    (stage / "data.js").write_text(script("window.APM_VIEW = (", {**data, "instances": index}), encoding="utf-8")


def build_site(paths: Iterable[str | Path], out: Path, judge: str | None = None, thumb_side: int = 160) -> Site:
    """Write the viewer of the run dirs at or below ``paths`` into ``out`` (a folder ``apm-view`` may
    own, :func:`apm.records.atomic.claim_output`): replaced whole, or left as it was if anything fails."""
    with replaced_output(out, PROG) as stage:
        thumbs = Thumbnails(stage, thumb_side)
        data = collect(paths, thumbs, judge)
        write_data(stage, data)
        for name in PAGE_FILES:
            (stage / name).write_bytes(ASSETS.joinpath(name).read_bytes())
    return Site(out / "index.html", len(data["instances"]), len(data["methods"]), len(thumbs), thumbs.bytes)
