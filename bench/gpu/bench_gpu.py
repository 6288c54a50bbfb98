"""Raw-video memory at the paper's 1,024 frames on one GPU: probes per GPU-hour and time to first token,
``frames.layout=uniform`` vs ``session_stable``, beside SimpleStream, on one paper-shaped trajectory.

Nothing is downloaded: the model is Qwen3-VL-8B's architecture (its dimensions written into the tiny
Qwen3-VL's config, ``qwen3vl_8b.EIGHT_B``) with vLLM's dummy weights (``--load-format dummy``: random, never
read), the tokenizer :mod:`apm.testing.tiny_models` builds, and Qwen3-VL's processor pixel budgets
(``qwen3vl_8b.PIXELS``). The engine settings are the ``qwen3_vl_8b`` preset's. One server (dev mode) serves
the three methods in turn, its prefix, processor and encoder caches reset before each; each method is
``apm-run`` over the same probes (``dataset.limit``: task by task in turn), one at a time, and its
records are read back. ``--dry`` runs the same steps on a CPU: the tiny Qwen3-VL (tiny config, dummy
weights), the tiny synthetic release, 16 frames, 6 probes, the ``tiny_qwen2vl_vllm`` preset's CPU
settings (``tests/test_bench_gpu_dry.py``). Writes ``OUT/bench_gpu.json`` and ``OUT/bench_gpu.md``.

    APM_VLLM_PYTHON=<python with vllm> .venv/bin/python bench/gpu/bench_gpu.py --out OUT           # ≤ 10 min
    APM_VLLM_PYTHON=.venv-vllm/bin/python .venv/bin/python bench/gpu/bench_gpu.py --dry --out OUT  # CPU, < 1 min
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
from omegaconf import OmegaConf

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]
from bench_prefix_cache import SHAPE, machine, run_config, run_records, summarise  # noqa: E402
from qwen3vl_8b import write_model  # noqa: E402

from apm.backbones import instantiate_backbone  # noqa: E402
from apm.backbones.vllm_server import VLLMServerBackbone  # noqa: E402
from apm.configs import CONF_DIR  # noqa: E402
from apm.data.release import load_release  # noqa: E402
from apm.synth import SCALES, generate  # noqa: E402
from apm.video.cache import build_release_cache  # noqa: E402

METHODS = {
    "raw video · uniform": ["memory=raw_video", "frames.layout=uniform"],
    "raw video · session_stable": ["memory=raw_video", "frames.layout=session_stable"],
    "SimpleStream": ["memory=none"],
}


@dataclass(frozen=True)
class Profile:
    """One way to run the benchmark: the engine preset, the trajectory, the budget, the model's size."""

    preset: str
    scale: str
    max_frames: int
    probes: int
    eight_b: bool
    engine: dict[str, Any]
    """Preset settings replaced (the dry run's context and media limits)."""
    extra_args: tuple[str, ...] = ()
    """Server flags added to the preset's."""


GPU = Profile("qwen3_vl_8b", SHAPE.name, 1024, 24, True, {}, ("--enforce-eager",))  # no compile: a short start
DRY = Profile("tiny_qwen2vl_vllm", "tiny", 16, 6, False,
              {"max_model_len": 4096, "limit_mm_per_prompt": {"image": 16, "video": 1}})


def start_server(profile: Profile, model: Path, log_dir: Path) -> VLLMServerBackbone:
    """The preset's server on ``model`` with dummy weights and the dev endpoints (cache resets), started."""
    cfg = OmegaConf.load(Path(CONF_DIR) / "backbone" / f"{profile.preset}.yaml")
    server = instantiate_backbone(
        cfg, model=str(model), log_dir=str(log_dir), python=os.environ.get("APM_VLLM_PYTHON", cfg.get("python")),
        extra_args=[*cfg.extra_args, *profile.extra_args, "--load-format", "dummy"],
        env={**cfg.env, "VLLM_SERVER_DEV_MODE": "1"},
        **profile.engine,
    )
    asyncio.run(server.start())
    return server


def reset_caches(server: VLLMServerBackbone) -> None:
    """Empty the server's prefix, processor and encoder caches, so a method starts cold."""
    root = server.base_url.removesuffix("/v1")
    for cache in ("prefix", "mm", "encoder"):
        httpx.post(f"{root}/reset_{cache}_cache", timeout=60).raise_for_status()


def run_method(profile: Profile, server: VLLMServerBackbone, overrides: list[str], root: Path,
               work: Path) -> list[dict[str, Any]]:
    """``apm-run`` of one method against the running server; its records in run order."""
    return run_records(run_config(root, work, [
        *overrides, f"backbone={profile.preset}", "backbone.launch=false", f"backbone.base_url={server.base_url}",
        f"backbone.max_frames={profile.max_frames}", f"dataset.limit={profile.probes}",
    ]))


def figures(summary: dict[str, Any]) -> dict[str, Any]:
    """A method's row: its summary plus probes per GPU-hour (one probe in flight, engine time only)."""
    per_hour = 3600 / summary["engine_s_mean"]
    return {k: v for k, v in summary.items() if k != "probes"} | {"probes_per_gpu_hour": per_hour}


def markdown(results: dict[str, dict], profile: Profile, where: str, wall_s: float) -> str:
    """The table for docs/performance.md."""
    rows = [f"Measured {time.strftime('%Y-%m-%d')} on {where}; profile {json.dumps(asdict(profile))}; "
            f"whole run {wall_s:.0f} s.", "",
            "| method | probes | frames / probe | prompt tokens / probe | cached share after a session's first "
            "| engine TTFT median (s) | TTFT p90 (s) | engine s / probe | probes per GPU-hour |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, r in results.items():
        f = figures(r)
        rows.append(f"| {name} | {len(r['probes'])} | {f['frames_mean']:.0f} | {f['prompt_tokens_mean']:.0f} | "
                    f"{f['cached_share_after_first']:.3f} | {f['engine_ttft_s_median']:.3f} | "
                    f"{f['engine_ttft_s_p90']:.3f} | {f['engine_s_mean']:.3f} | {f['probes_per_gpu_hour']:.0f} |")
    return "\n".join(rows) + "\n"


def bench(profile: Profile, out: Path) -> dict[str, Any]:
    """Every step; writes ``out/bench_gpu.json`` and ``out/bench_gpu.md`` and returns the results."""
    began = time.perf_counter()
    SCALES[SHAPE.name] = SHAPE
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        root = generate(work / "release", seed=0, scale=profile.scale, limit_trajectories=1)
        build_release_cache(load_release(root), work / "cache", progress=False)
        server = start_server(profile, write_model(work / "model", profile.eight_b), out)
        try:
            results = {}
            for name, overrides in METHODS.items():
                reset_caches(server)
                results[name] = summarise(run_method(profile, server, overrides, root, work))
        finally:
            server.process.stop()
    where = machine()
    (out / "bench_gpu.json").write_text(json.dumps({"machine": where, "profile": asdict(profile),
                                                    "methods": results}, indent=1))
    (out / "bench_gpu.md").write_text(markdown(results, profile, where, time.perf_counter() - began))
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--dry", action="store_true", help="the CPU dry run: tiny config, tiny release")
    args = p.parse_args()
    bench(DRY if args.dry else GPU, args.out)
    print((args.out / "bench_gpu.md").read_text())


if __name__ == "__main__":
    main()
