"""Runs pickled requests through VLLMOfflineBackbone; executed by the vLLM venv's python.

Usage: ``python tests/vllm_offline_worker.py KWARGS_JSON REQUESTS.pkl RESPONSES.pkl``, where
KWARGS_JSON holds the backbone's constructor arguments (a resolved backbone YAML, less ``_target_``).
"""

from __future__ import annotations

import asyncio
import json
import pickle
import sys
from pathlib import Path

from apm.backbones.vllm_offline import VLLMOfflineBackbone


async def run(kwargs: dict, requests: list) -> list:
    """Every request, one after the other, on one engine."""
    async with VLLMOfflineBackbone(**kwargs) as backbone:
        return [await backbone.generate(r) for r in requests]


if __name__ == "__main__":
    kwargs, src, dst = json.loads(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    dst.write_bytes(pickle.dumps(asyncio.run(run(kwargs, pickle.loads(src.read_bytes())))))
