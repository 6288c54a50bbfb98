"""``OUT/README.md``: which file of an ``apm-reduce`` output is which table or figure of the paper."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from apm.reduce.figures import FIGURES
from apm.reduce.tables import TABLES

_OTHER_FILES = {
    "scores.csv": "Every metric of every method, long format, with bootstrap intervals (docs/scores.md).",
    "manifest.json": "What the reduction read: run dirs and config hashes, job manifests, judges, bootstrap.",
    "compare.csv": "Paired bootstrap comparison of run B − run A (`--compare`).",
}


def _entries(out: Path, files: Sequence[Path], specs: Sequence[tuple[str, str, str]]) -> list[str]:
    """One table row per (name, paper number, caption) with files written, in spec order; then any
    other file, by name."""
    by_stem: dict[str, list[Path]] = {}
    for path in files:
        by_stem.setdefault(path.stem, []).append(path)
    known = {name for name, _, _ in specs}
    rows = [(paper, caption, by_stem[name]) for name, paper, caption in specs if name in by_stem]
    rows += [(stem, "", paths) for stem, paths in by_stem.items() if stem not in known]
    return [
        f"| {paper} | {caption} | "
        + ", ".join(f"[{p.suffix[1:]}]({p.relative_to(out).as_posix()})" for p in paths) + " |"
        for paper, caption, paths in rows
    ]


def skipped(tables: list[Path], figures: list[Path] | None) -> list[str]:
    """One line per table, and figure (``figures`` None: none were drawn, so none is named), of the paper's
    that the reduction did not write: which it is and what it needs."""
    specs = [(t.name, t.paper, t.needs) for t in TABLES] + [(f.name, f.paper, f.needs) for f in FIGURES]
    written = {p.stem for p in tables} | {p.stem for p in figures or ()}
    drawn = {t.name for t in TABLES} | ({f.name for f in FIGURES} if figures is not None else set())
    return [f"skipped {paper} ({name}): it needs {needs}" for name, paper, needs in specs
            if name in drawn and name not in written]


def write_report_index(out: Path, tables: list[Path], figures: list[Path]) -> Path:
    """Write ``out/README.md`` indexing ``tables`` and ``figures`` (paths below ``out``, as
    :func:`~apm.reduce.tables.write_tables` and :func:`~apm.reduce.figures.write_figures` return
    them) with the paper's number and caption, and the other outputs (:data:`_OTHER_FILES`) present."""
    head = ["| Paper | Caption | Files |", "| --- | --- | --- |"]
    lines = ["# apm-reduce output", ""]
    lines += [f"- [`{name}`]({name}): {what}" for name, what in _OTHER_FILES.items() if (out / name).exists()]
    for title, files, specs in (
        ("Tables", tables, [(t.name, t.paper, t.caption) for t in TABLES]),
        ("Figures", figures, [(f.name, f.paper, f.caption) for f in FIGURES]),
    ):
        if files:
            lines += ["", f"## {title}", "", *head, *_entries(out, files, specs)]
    path = out / "README.md"
    path.write_text("\n".join(lines) + "\n")
    return path
