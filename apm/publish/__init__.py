"""``apm-publish``: W&B runs built from a run's JSONL records (the source of truth), idempotently —
one run per method and stage, the paper's metrics in the ``reduce`` run's summary, per-instance
tables with thumbnails (docs/publish.md). Reads records, the release and the frame cache; never the
runner."""

from apm.publish.wandb_runs import Published, PublishOptions, publish

__all__ = ["PublishOptions", "Published", "publish"]
