"""What each request said, kept beside the records: every distinct text part once, as
``RUN_DIR/prompts/<sha256>.txt`` (so a template repeated over a run costs one file), and on each
record a ``prompt`` that names its text parts by digest and its frames by count, in order — the frames
themselves stay references into the frame cache (the record's ``frames``, in the order they were sent).

The canonical prompt (:data:`Canon`, what ``prompt_sha256`` is computed over) is rebuilt from those two
and checked against the digest (:func:`restore`), so what is shown is provably what was sent.
Contract: ``docs/prompts.md``, "What was sent is kept".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from itertools import groupby
from pathlib import Path
from typing import Any

from apm.records.atomic import write_redacted
from apm.records.rundir import RunDir

CanonPart = str | list[str | float]
"""A text part's text, or a frame as ``[session, offset]`` (``[session, offset, "still"]`` for a still)."""
Canon = list[list[Any]]
"""``[[role, [part, …]], …]``: the prompt as its digest sees it (every text, every frame by session and offset)."""
Ref = str | dict[str, int]
"""A text part's SHA-256, or a run of consecutive frame parts: ``{"frames": n}`` / ``{"stills": n}``."""


def canon_digest(canon: Canon) -> str:
    """``prompt_sha256``: the SHA-256 of the canonical prompt's JSON."""
    return hashlib.sha256(json.dumps(canon, ensure_ascii=False).encode()).hexdigest()


def text_digest(text: str) -> str:
    """The name of a text part's file: the SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(text.encode()).hexdigest()


def text_path(run_dir: Path, digest: str) -> Path:
    return RunDir(run_dir).prompts / f"{digest}.txt"


def _frame_run(part: list[str | float]) -> str:
    return "stills" if part[-1] == "still" else "frames"


def refs(canon: Canon) -> list[list[Any]]:
    """The record's ``prompt``: ``[[role, [ref, …]], …]``, each text by digest, consecutive frames of one
    kind (video frames, stills) as one count."""
    out: list[list[Any]] = []
    for role, parts in canon:
        kept: list[Ref] = []
        for part in parts:
            if isinstance(part, str):
                kept.append(text_digest(part))
                continue
            kind = _frame_run(part)
            last = kept[-1] if kept else None
            if isinstance(last, dict) and kind in last:
                last[kind] += 1
            else:
                kept.append({kind: 1})
        out.append([role, kept])
    return out


def keep(run_dir: Path, canon: Canon) -> list[list[Any]]:
    """Write each text part of ``canon`` not yet kept under ``run_dir/prompts/`` (atomically: a reader
    sees a whole file or none; not synced to disk, as record lines are not until their file closes)
    and return the record's ``prompt`` (:func:`refs`)."""
    for _, parts in canon:
        for part in parts:
            if isinstance(part, str):
                path = text_path(run_dir, text_digest(part))
                if not path.exists():
                    write_redacted(path, part, sync=False)  # as the record lines: redone after a crash; secrets masked
    return refs(canon)


class PromptUnavailable(ValueError):
    """A record's kept prompt cannot be rebuilt: a text file is missing, or the rebuilt prompt is not the
    one its ``prompt_sha256`` names."""


def restore(prompt: Sequence[Sequence[Any]], frames: Sequence[Mapping[str, Any]], prompt_sha256: str | None,
            read_text: Callable[[str], str]) -> Canon:
    """The canonical prompt a record's ``prompt`` names, its texts read by digest (``read_text``) and its
    frames taken in order from the record's ``frames``; raises :class:`PromptUnavailable` unless it
    reproduces ``prompt_sha256`` exactly."""
    queue = iter(frames)
    canon: Canon = []
    try:
        for role, parts in prompt:
            restored: list[CanonPart] = []
            for ref in parts:
                if isinstance(ref, str):
                    restored.append(read_text(ref))
                    continue
                (kind, count), = ref.items()
                for _ in range(count):
                    f = next(queue)
                    restored.append([f["session"], f["offset"], "still"] if kind == "stills"
                                    else [f["session"], f["offset"]])
            canon.append([role, restored])
    except (OSError, StopIteration, KeyError, ValueError) as e:
        raise PromptUnavailable(f"the kept prompt cannot be rebuilt ({type(e).__name__}: {e})") from e
    if canon_digest(canon) != prompt_sha256:
        raise PromptUnavailable("the kept prompt does not reproduce the record's prompt_sha256")
    return canon


NOT_KEPT = "not kept: the run predates kept prompts (only prompt_sha256 is on record)"
"""What is shown for a record made before prompts were kept (it has no ``prompt``)."""


def as_text(canon: Canon) -> str:
    """A restored prompt for reading: each message under its role, texts as sent, each run of frames
    (or stills) as one ``[n frames]`` mark where they were sent."""
    messages = []
    for role, parts in canon:
        shown: list[str] = []
        for kind, run in groupby(parts, key=lambda part: "text" if isinstance(part, str) else _frame_run(part)):
            items = list(run)
            shown += [str(t) for t in items] if kind == "text" else [f"[{len(items)} {kind}]"]
        messages.append(f"[{role}]\n" + "\n".join(shown))
    return "\n\n".join(messages)


def sent_text(record: Mapping[str, Any], read_text: Callable[[str], str]) -> str:
    """What a record's backbone was sent, as text (:func:`as_text`), verified against its
    ``prompt_sha256``; else why not: :data:`NOT_KEPT`, or the reason it cannot be rebuilt."""
    prompt = record.get("prompt")
    if not isinstance(prompt, list) or not prompt:
        return NOT_KEPT
    try:
        return as_text(restore(prompt, record.get("frames") or [], record.get("prompt_sha256"), read_text))
    except PromptUnavailable as e:
        return f"not shown: {e}"


def reader(run_dir: Path) -> Callable[[str], str]:
    """Reads a text part of ``run_dir`` by digest (raises ``OSError`` when it is not kept)."""
    return lambda digest: text_path(run_dir, digest).read_text(encoding="utf-8")
