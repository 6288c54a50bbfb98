"""Running sweeps at scale: a per-shard job ledger, non-blocking SLURM submission, sweep status."""
