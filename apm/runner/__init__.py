"""``apm-run``: the online protocol over one shard of trajectories, with crash-safe records."""
