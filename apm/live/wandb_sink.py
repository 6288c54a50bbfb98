"""The live mirror of a job on Weights & Biases: progress while ``apm-run`` works, never the only copy
of anything (``apm-publish`` builds the W&B runs worth keeping from the records; docs/publish.md).

One W&B run per job *attempt* (``job_type=live``): a requeued or resumed shard opens a run of its own
(``<config hash>-<shard>-<attempt>``), never an earlier attempt's id, so no attempt overwrites
another on ``wandb sync``. The rows an attempt wrote are logged as ``wandb.Table`` chunks — one history
step each — whenever ``chunk_rows`` rows are buffered or ``flush_s`` seconds have passed since the last
step (checked as each row arrives), so a slow job shows progress while it runs (``instances/chunk_0000``,
… within that attempt; one table is silently cut at 10,000 rows); rows buffered when a job is killed are
on record but not mirrored. Offline by default
(``wandb sync`` later). Only the resolved config and record fields are sent; nothing from the environment.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any, Literal

from apm.records.redact import redact_data
from apm.records.wandb_identity import quiet

ROW_COLUMNS = (
    "key", "task", "family", "polarity", "probe_time", "decision", "answer", "correct_option", "correct",
    "gate_pass", "parse_status", "parse_error", "ttft_s", "total_s", "memory_bytes", "n_frames", "error", "output",
)


def record_row(rec: dict[str, Any]) -> list[Any]:
    """One table row of a record (the columns of ``ROW_COLUMNS``)."""
    lat = rec["latency"]
    flat = {**rec, "ttft_s": lat["ttft_s"], "total_s": lat["total_s"], "n_frames": len(rec["frames"])}
    return [flat.get(c) for c in ROW_COLUMNS]


def attempt_id(run_id: str) -> str:
    """A W&B run id of its own for this attempt of the job ``run_id``."""
    return f"{run_id}-{secrets.token_hex(4)}"


WandbMode = Literal["online", "offline", "disabled", "shared"]
"""The modes ``wandb.init`` accepts."""


class WandbSink:
    """Buffers rows and logs them in chunks; ``close`` logs the rest and the closing summary."""

    def __init__(self, mode: WandbMode, project: str, name: str, group: str | None, config: dict[str, Any],
                 run_dir: Path, entity: str | None = None, chunk_rows: int = 5000, run_id: str | None = None,
                 flush_s: float = 30.0, verbose: bool = False):
        import wandb

        self._wandb = wandb
        self.chunk_rows = chunk_rows
        self.flush_s = flush_s
        self._last_flush = time.monotonic()
        self._rows: list[list[Any]] = []
        self._chunks = 0
        self._counts = {"instances": 0, "errors": 0, "correct": 0, "mcqa": 0, "gate_pass": 0, "adaptive": 0}
        self.run = wandb.init(
            mode=mode, project=project, entity=entity, name=name, group=group, config=config, job_type="live",
            tags=["live"], dir=str(run_dir), id=attempt_id(run_id) if run_id else None, reinit="finish_previous",
            settings=quiet(wandb, verbose, x_disable_meta=True),  # W&B's metadata holds the raw command line
        )

    def __call__(self, rec: dict[str, Any]) -> None:
        self._rows.append(redact_data(record_row(rec)))
        c = self._counts
        c["instances"] += 1
        c["errors"] += rec["error"] is not None
        if rec["correct"] is not None:
            c["mcqa"] += 1
            c["correct"] += bool(rec["correct"])
        if rec["gate_pass"] is not None:
            c["adaptive"] += 1
            c["gate_pass"] += bool(rec["gate_pass"])
        if len(self._rows) >= self.chunk_rows or time.monotonic() - self._last_flush >= self.flush_s:
            self._flush()

    def _flush(self) -> None:
        self._last_flush = time.monotonic()
        if not self._rows:
            return
        table = self._wandb.Table(columns=list(ROW_COLUMNS), data=self._rows)
        c = self._counts
        self.run.log({
            f"instances/chunk_{self._chunks:04d}": table,
            "progress/instances": c["instances"],
            "progress/errors": c["errors"],
            "progress/mcqa_accuracy": c["correct"] / c["mcqa"] if c["mcqa"] else None,
            "progress/gate_pass_rate": c["gate_pass"] / c["adaptive"] if c["adaptive"] else None,
        })
        self._chunks += 1
        self._rows = []

    def close(self, summary: dict[str, Any]) -> None:
        self._flush()
        self.run.summary.update({**summary, "table_chunks": self._chunks})
        self.run.finish()
