"""Text memories: the Appendix E.5 summary writer, and retrieval over the summaries (MemoryBench).

At each session end the writer backbone sees the complete session (frames sampled to its frame
budget) and the user interactions that happened in it, and returns ``{"memory": …}``. The memory is
stored as ``<index>_<day>_<session>.txt``; a reply that is not that JSON is stored as it came
(``parse_status`` in the session's memory record says so), an error stores an empty memory.
"""

from __future__ import annotations

from pathlib import Path

from apm.backbones.base import FramePart, GenerationSettings, Message, Request, TextPart
from apm.data.instances import Instance
from apm.data.model import Session, Trajectory
from apm.memory.base import History, MemoryProtocol, Note, SessionView, prior_sessions
from apm.prompts import probe_prompt, said_text, summary_prompts, turn_text
from apm.prompts.parse import json_object
from apm.records.atomic import write_redacted
from apm.records.declaration import Declaration


def _note_path(state_dir: Path, s: Session) -> Path:
    return state_dir / f"{s.index:04d}_{s.day_id}_{s.session_id}.txt"


def _load_notes(sessions: list[Session], state_dir: Path) -> list[Note]:
    """The stored summaries of ``sessions``, each formed at its session's end (when the writer ran)."""
    out = []
    for s in sessions:
        path = _note_path(state_dir, s)
        if path.exists():
            out.append(Note(s, path.read_text(encoding="utf-8"), s.end))
    return out


class TextSummary(MemoryProtocol):
    """Text summary as memory: instances see the summaries of all completed sessions."""

    name = "Text Summary as Memory"
    needs_writer = True
    declaration = Declaration("general", streaming=False, persistent=True)

    def __init__(self, session_frames: int = 1024, max_tokens: int = 1024, name: str | None = None):
        super().__init__(name)
        self.session_frames = session_frames
        self.max_tokens = max_tokens

    async def end_session(self, view: SessionView, state_dir: Path, writer) -> dict:
        instruction, request_text = summary_prompts(view.session)
        parts: list = [TextPart(instruction)]
        parts += [*map(FramePart, view.frames), TextPart(said_text(view.interactions, request_text))]
        request = Request(
            messages=(Message("user", tuple(parts)),),
            settings=GenerationSettings(max_tokens=self.max_tokens, json_output=True),
            request_id=f"{view.trajectory.trajectory_id}/{view.session.key}/memory",
        )
        response = await writer.generate(request)
        memory, status = memory_text(response.text) if response.ok else ("", "failed")
        write_redacted(_note_path(state_dir, view.session), memory)
        return {"writer_parse_status": status, "writer_total_s": response.total_s, "error": response.error}

    def history(self, instance: Instance, trajectory: Trajectory, state_dir: Path) -> History:
        return History(notes=tuple(_load_notes(prior_sessions(instance, trajectory), state_dir)))


def memory_text(text: str) -> tuple[str, str]:
    """The ``memory`` field of the writer's JSON reply, or the reply itself when it is not that JSON."""
    obj, repaired = json_object(text)
    if obj is not None and isinstance(obj.get("memory"), str):
        return obj["memory"], "repaired" if repaired else "ok"
    return text, "failed"


def instance_query(instance: Instance) -> str:
    """The text an instance is about, used to retrieve memories: its question, registration or task."""
    fields = instance.candidate.fields
    parts = [turn_text(t, instance) for t in instance.turns if t.kind != "interval_marker"]
    if "question" in fields:
        parts.append(fields["question"])
        parts += [c["text"] for c in fields["choices"]]
    if not parts:
        parts.append(probe_prompt(instance))
    return "\n".join(parts)


class Retrieval(TextSummary):
    """Session summaries indexed for retrieval; only the top-k that match the instance are shown.

    ``method``: ``bm25`` (lexical, bm25s) or ``embedding`` (sentence-transformers cosine similarity).
    A memory is injected only when its score exceeds ``min_score`` (selective injection, Section 4.2).
    """

    name = "Retrieval Memory"

    def __init__(self, method: str = "bm25", top_k: int = 2, min_score: float = 0.0,
                 embedding_model: str = "sentence-transformers/all-MiniLM-L6-v2", **kwargs):
        kwargs.setdefault("name", f"{'BM25' if method == 'bm25' else 'Embedding'} Retrieval Memory")
        super().__init__(**kwargs)
        if method not in ("bm25", "embedding"):
            raise ValueError(f"retrieval method must be bm25 or embedding, got {method!r}")
        self.method, self.top_k, self.min_score, self.embedding_model = method, top_k, min_score, embedding_model

    def history(self, instance: Instance, trajectory: Trajectory, state_dir: Path) -> History:
        notes = [n for n in _load_notes(prior_sessions(instance, trajectory), state_dir) if n.text.strip()]
        if not notes:
            return History()
        scores = self._scores(instance_query(instance), [n.text for n in notes])
        ranked = sorted(range(len(notes)), key=lambda i: (-scores[i], i))
        chosen = sorted(i for i in ranked[: self.top_k] if scores[i] > self.min_score)
        return History(notes=tuple(notes[i] for i in chosen))

    def _scores(self, query: str, docs: list[str]) -> list[float]:
        if self.method == "bm25":
            return bm25_scores(query, docs)
        return _embedding_scores(self.embedding_model, query, docs)


def bm25_scores(query: str, docs: list[str]) -> list[float]:
    """BM25 score (bm25s, English stop words dropped) of each of ``docs`` for ``query``; all 0 when the
    query or the documents have no word to match (bm25s cannot index or score nothing)."""
    import bm25s

    corpus = bm25s.tokenize(docs, show_progress=False)
    query_tokens = bm25s.tokenize(query, show_progress=False, return_ids=False)[0]
    if not corpus.vocab or not query_tokens:
        return [0.0] * len(docs)
    retriever = bm25s.BM25()
    retriever.index(corpus, show_progress=False)
    return [float(x) for x in retriever.get_scores(query_tokens)]


def _embedding_scores(model_name: str, query: str, docs: list[str]) -> list[float]:
    model = _embedder(model_name)
    vectors = model.encode([query, *docs], normalize_embeddings=True)
    return [float(v @ vectors[0]) for v in vectors[1:]]


_EMBEDDERS: dict[str, object] = {}


def _embedder(name: str):
    from sentence_transformers import SentenceTransformer

    if name not in _EMBEDDERS:
        _EMBEDDERS[name] = SentenceTransformer(name)
    return _EMBEDDERS[name]
