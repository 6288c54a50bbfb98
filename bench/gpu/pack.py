"""Build the bundle that travels with bench/gpu/bench_gpu_hf.py to a lent GPU machine (≤ 64 MiB with the
working tree): the wheels that machine lacks (:data:`WHEELS`, CPython 3.12, manylinux x86-64, from the
registry here) and the benchmark's release slice. Refuses, writing nothing more, above the limit.

    .venv/bin/python bench/gpu/pack.py            # -> .gpu-bundle/ (ignored by git; carry it)

The frame cache is built there from the carried videos (seconds): videos and cache together do not fit
beside PyAV's 36 MB wheel (docs/performance.md, "GPU (transformers path)").
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu_hf import GPU, prepare  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
LIMIT = 64 * 2**20
"""What travels with one command: the working tree plus carried paths."""
WHEELS = ("av==18.1.0", "hydra-core==1.3.8", "omegaconf==2.3.1", "orjson==3.13.0", "pybase64==1.5.1",
          "tenacity==9.2.1")
"""apm's run path needs these and the lent machine's image lacks them (its list: PyTorch, transformers,
torchvision, Pillow, numpy, httpx, filelock, tqdm, PyYAML …); apm itself is the working tree."""
SOURCE_ONLY = ("antlr4-python3-runtime==4.9.3",)
"""Published as a source archive only: built into a wheel here (pure Python)."""
PLATFORM = ["--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:",
            *[f"--platform={p}" for p in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")]]


def size(path: Path) -> int:
    """Bytes of every file under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def tree_size() -> int:
    """Bytes of the working tree that travels (tracked and untracked-not-ignored files)."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, check=True).stdout.split(b"\0")
    return sum((REPO / n.decode()).stat().st_size for n in names if n and (REPO / n.decode()).is_file())


def check_fits(bundle: Path, tree: int, limit: int = LIMIT) -> int:
    """The bundle's size; SystemExit with one line if it and the tree exceed ``limit``."""
    total = size(bundle) + tree
    if total > limit:
        raise SystemExit(f"pack: bundle {size(bundle) / 2**20:.1f} MiB + working tree {tree / 2**20:.1f} MiB "
                         f"= {total / 2**20:.1f} MiB > {limit / 2**20:.0f} MiB: it cannot travel")
    return total


def pack(bundle: Path) -> int:
    """Fill ``bundle`` (wheels/, data/release/); returns the bytes that travel."""
    wheels = bundle / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "-q"]
    subprocess.run([*pip, "download", "--no-deps", *PLATFORM, "-d", str(wheels), *WHEELS], check=True)
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(wheels), *SOURCE_ONLY], check=True)
    prepare(bundle / "data", GPU)
    shutil.rmtree(bundle / "data" / "cache")  # rebuilt there from the videos: both do not fit
    return check_fits(bundle, tree_size())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bundle", type=Path, default=REPO / ".gpu-bundle")
    args = p.parse_args()
    print(f"bundle {args.bundle}: {pack(args.bundle) / 2**20:.1f} MiB travel (limit {LIMIT / 2**20:.0f} MiB)")


if __name__ == "__main__":
    main()
