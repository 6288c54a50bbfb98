"""Write the viewer: a folder that opens from the file system or any web server, offline.

``index.html``, ``app.js`` and ``style.css`` are the package's assets, copied as they are. The data
are scripts loaded by ``<script>`` tags, so ``file://`` works without fetch or CORS: ``data.js``
(``window.APM_VIEW = {…}``) holds the methods, their scores and what the filters need of every
instance; ``chunks/<task>/<part>-<n>.js`` (``APM_VIEW_CHUNK(name, {rows, texts})``) hold, per task, the
instances' own fields and the prompt texts their methods were sent (part ``i``; a text is in a chunk
once, however many methods and rows sent it) and each method's cells (part ``m<index>``, no texts),
written as the records stream past (:class:`Chunks`, at most :data:`CHUNK` rows and :data:`CHUNK_BYTES`
each) and loaded only for the rows and methods on screen, so a sweep at the paper's scale stays quick
to open and to build.
Thumbnails are files under ``thumbs/``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from apm.live.progress import Unit, counted, stage_progress
from apm.records.atomic import replaced_output
from apm.records.redact import redact_data
from apm.view import DEFAULT_FRAMES_PER_CELL, DEFAULT_THUMB_GRID, PROG
from apm.view.collect import Row, Views, instance_view
from apm.view.thumbs import Thumbnails

ASSETS = resources.files("apm.view").joinpath("assets")
PAGE_FILES = ("index.html", "app.js", "style.css")
CHUNK = 20
"""Rows per chunk file at most: a page of 25 rows of one task loads two or three chunks per method, and
a first page (release order, many tasks) loads a chunk per task and method: smaller chunks open it
sooner (50 rows: 2.5 s, 20 rows: 1.5 s for 1,208 instances x 10 methods on the loaded 2-core VM)."""
CHUNK_BYTES = 2_000_000
"""Bytes per chunk file at most (a single row larger than this is a chunk of its own)."""
FILTER_FIELDS = ("key", "task", "family", "polarity")
INSTANCE_PART = "i"
"""The chunks of a task holding its instances' own fields (method cells are ``m<index>``)."""


@dataclass(frozen=True)
class Site:
    """What :func:`build_site` wrote."""

    index: Path
    instances: int
    methods: int
    thumbnails: int
    thumbnail_bytes: int
    chunks: int
    largest_chunk: int


def script(call: str, value: Any) -> str:
    """``call`` applied to ``value`` as JSON (which is JavaScript); escaped ``<`` keeps any text inert."""
    return f"{call}{_json(value)});\n"


def _json(value: Any) -> str:
    """``value`` as JSON for the site, every registered secret masked (:func:`apm.records.redact.redact_data`)."""
    text = json.dumps(redact_data(value), ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c")


@dataclass
class _Open:
    """A chunk being filled: its rows as JSON text and the prompt texts they name."""

    number: int
    rows: list[str] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    size: int = 0


def _body(name: str, rows: str, texts: str) -> str:
    """A chunk's script: its rows and texts (each already JSON members) handed to ``APM_VIEW_CHUNK``."""
    return f'window.APM_VIEW_CHUNK({_json(name)}, {{"rows":{{{rows}}},"texts":{{{texts}}}}});\n'


def _growth(chunk: _Open, line: str, texts: Mapping[str, str]) -> tuple[dict[str, str], int]:
    """The texts ``chunk`` does not hold yet (as JSON), and the bytes a row adds with them."""
    new = {d: _json(t) for d, t in texts.items() if d not in chunk.texts}
    return new, len(line) + 1 + sum(len(d) + len(t) + 4 for d, t in new.items())


class Chunks:
    """Writes ``chunks/<task>/<part>-<n>.js`` as rows arrive: a chunk is written (and let go) once it
    holds :data:`CHUNK` rows or the next row would take it past :data:`CHUNK_BYTES`; each prompt text
    its rows name is in it once (``texts``: digest → text)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._open: dict[tuple[str, str], _Open] = {}
        self.written = 0
        self.largest = 0

    def add(self, task: str, part: str, key: str, row: Any, texts: Mapping[str, str]) -> int:
        """Place ``row`` (under ``key``) in the open chunk of (task, part); return that chunk's number."""
        line = f"{_json(key)}:{_json(row)}"
        chunk = self._chunk(task, part)
        new, grows = _growth(chunk, line, texts)
        if chunk.rows and (len(chunk.rows) >= CHUNK or chunk.size + grows > CHUNK_BYTES):
            self._write(task, part)
            chunk = self._chunk(task, part, chunk.number + 1)
            new, grows = _growth(chunk, line, texts)
        chunk.rows.append(line)
        chunk.texts.update(new)
        chunk.size += grows
        return chunk.number

    def _chunk(self, task: str, part: str, number: int = 0) -> _Open:
        if (task, part) not in self._open:
            self._open[task, part] = _Open(number, size=len(_body(f"{task}/{part}-{number}", "", "")))
        return self._open[task, part]

    def _write(self, task: str, part: str) -> None:
        chunk = self._open.pop((task, part))
        name = f"{task}/{part}-{chunk.number}"
        body = _body(name, ",".join(chunk.rows), ",".join(f"{_json(d)}:{t}" for d, t in chunk.texts.items()))
        path = self.folder / task / f"{part}-{chunk.number}.js"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="ascii")
        self.written += 1
        self.largest = max(self.largest, len(body))

    def close(self) -> None:
        """Write every chunk still open."""
        for task, part in list(self._open):
            self._write(task, part)


OUTCOME_MARKS = {"right": "r", "wrong": "w"}
"""An outcome in ``data.js``'s ``outcomes`` string; ``-``: the method has no record of the instance."""
FAULT_MARKS = {"errored": "e", "parse_failed": "p", None: "."}
"""A fault (:func:`apm.view.collect.fault`) in ``data.js``'s ``faults`` string; ``-``: no record."""


def filter_entry(key: str, row: Row, chunk: int, method_ids: Sequence[str]) -> dict[str, Any]:
    """What the filters need of an instance, compactly (one character and one chunk number per method, in
    the methods' order, so ``data.js`` stays small at the paper's scale), and where the rest is: the
    instance's own chunk ``<task>/i-<chunk>``, method ``j``'s cell in ``<task>/m<j>-<cells[j]>``."""
    return {**{k: row.fields[k] for k in FILTER_FIELDS if k in row.fields}, "key": key, "differs": row.differs,
            "outcomes": "".join(OUTCOME_MARKS[row.answers[h][2]] if h in row.answers else "-" for h in method_ids),
            "faults": "".join(FAULT_MARKS[row.faults[h]] if h in row.faults else "-" for h in method_ids),
            "chunk": chunk, "cells": [row.chunks.get(h) for h in method_ids]}


def thumbnail_note(frames_per_cell: int, grid: int) -> str:
    """What the page says of its thumbnails: which frames of a cell have one (:func:`apm.view.collect.thumbed`)."""
    if not frames_per_cell:
        return "Thumbnails: every frame sent."
    spread = (f"the first and the last frame sent and, between them, only frames at a multiple of {grid} s of "
              "their session's video (shared by every probe and method that sent them)") if grid else \
        "evenly spread with the first and the last"
    return (f"Thumbnails: at most {frames_per_cell} per cell, {spread}; \"all N frames\" lists every frame "
            "sent.")


def write_data(stage: Path, views: Views, thumbs: Thumbnails, frames_per_cell: int,
               grid: int = 0) -> tuple[int, Chunks]:
    """The chunks, streamed as the records are read, then ``data.js``: methods, scores and the filter
    entry of every instance; returns the instance count and the chunk writer."""
    chunks = Chunks(stage / "chunks")
    part = {m["id"]: f"m{i}" for i, m in enumerate(views.methods)}
    rows: dict[str, Row] = {}
    shown = stage_progress(len(views.runs.records), PROG, Unit("records"))
    for record, view, texts in counted(views.cells(thumbs, frames_per_cell, grid), shown):
        h, key = str(record["run"]["config_hash"]), record["key"]
        row = rows.setdefault(key, Row.of(record))
        row.add(h, view, chunks.add(str(record.get("task")), part[h], key, view, {}), texts)
    index = []
    for key in views.in_release_order(rows):
        row = rows.pop(key)
        own = chunks.add(str(row.fields["task"]), INSTANCE_PART, key,
                         instance_view(key, row, views.releases.instances.get(key)), row.texts)
        index.append(filter_entry(key, row, own, list(part)))
    shown.close()
    chunks.close()
    head = views.head()
    head["notes"]["thumbnails"] = thumbnail_note(frames_per_cell, grid)
    (stage / "data.js").write_text(script("window.APM_VIEW = (", {**head, "instances": index}), encoding="utf-8")
    return len(index), chunks


def build_site(paths: Iterable[str | Path], out: Path, judge: str | None = None, thumb_side: int = 160,
               frames_per_cell: int = DEFAULT_FRAMES_PER_CELL, thumb_grid: int = DEFAULT_THUMB_GRID) -> Site:
    """Write the viewer of the run dirs at or below ``paths`` into ``out`` (a folder ``apm-view`` may
    own, :func:`apm.records.atomic.claim_output`): replaced whole, or left as it was if anything fails.
    ``frames_per_cell`` caps the thumbnails of a method's cell (0: every frame), ``thumb_grid`` (seconds,
    0: none) is the grid its thumbnails between the first and last frame lie on."""
    with replaced_output(out, PROG) as stage:
        thumbs = Thumbnails(stage, thumb_side)
        views = Views.read(paths, judge)
        instances, chunks = write_data(stage, views, thumbs, frames_per_cell, thumb_grid)
        for name in PAGE_FILES:
            (stage / name).write_bytes(ASSETS.joinpath(name).read_bytes())
    return Site(out / "index.html", instances, len(views.methods), len(thumbs), thumbs.bytes, chunks.written,
                chunks.largest)
