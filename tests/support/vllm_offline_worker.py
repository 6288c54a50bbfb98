"""Runs pickled requests through VLLMOfflineBackbone; executed by the vLLM venv's python.

Usage: ``python tests/support/vllm_offline_worker.py KWARGS_JSON REQUESTS.pkl RESPONSES.pkl [--prompt-token-ids]``,
where KWARGS_JSON holds the backbone's constructor arguments (a resolved backbone YAML, less
``_target_``). With ``--prompt-token-ids`` it writes, per request, the prompt token ids the engine
built (multi-modal placeholders expanded) instead of the responses.
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


def prompt_token_ids(kwargs: dict, requests: list) -> list[list[int]]:
    """The prompt the engine builds for each request (one token generated)."""
    from vllm import SamplingParams

    backbone = VLLMOfflineBackbone(**kwargs)
    backbone._load()
    try:
        outs = [backbone._llm.generate(backbone.engine_input(r), SamplingParams(max_tokens=1), use_tqdm=False)[0]
                for r in requests]
        return [list(out.prompt_token_ids) for out in outs]
    finally:
        backbone._unload()


if __name__ == "__main__":
    kwargs, src, dst = json.loads(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    requests = pickle.loads(src.read_bytes())
    if sys.argv[4:] == ["--prompt-token-ids"]:
        dst.write_bytes(pickle.dumps(prompt_token_ids(kwargs, requests)))
    else:
        dst.write_bytes(pickle.dumps(asyncio.run(run(kwargs, requests))))
