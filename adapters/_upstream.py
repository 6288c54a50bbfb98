"""What the upstream adapters share (adapters/README.md): finding the user's checkout of an official
repository, seeding, decoding frames and writing state files. Runs in the adapter's side environment
(child side of the process boundary), so it imports nothing from ``apm``.
"""

from __future__ import annotations

import io
import os
import random
import subprocess
import sys
from typing import Any, Dict, Optional


def checkout(path: str, commit: str, *, syspath: tuple[str, ...] = ("",)) -> Dict[str, Any]:
    """Put the user's checkout ``path`` (its ``syspath`` sub-folders) on ``sys.path`` and say what it is:
    the commit the config names and, where git can read the checkout, the commit it is at (a mismatch is
    refused: the adapter was verified against ``commit``)."""
    root = os.path.abspath(os.path.expanduser(path))
    if not os.path.isdir(root):
        raise FileNotFoundError("upstream: no checkout at %s (clone the repository named in adapters/README.md)" % root)
    try:
        head: Optional[str] = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True,
                                             timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        head = None
    if head and commit and not head.startswith(commit):
        raise RuntimeError("upstream: %s is at %s, the adapter was verified at %s (check it out, or set commit)"
                           % (root, head, commit))
    for sub in reversed(syspath):
        sys.path.insert(0, os.path.join(root, sub) if sub else root)
    return {"upstream": root, "commit": commit, "checkout_head": head or "unread"}


def seed_all(seed: int) -> None:
    """Seed every generator an upstream loop may draw from (Python, NumPy, torch)."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def pil(jpeg: bytes):
    """A frame's JPEG as an RGB ``PIL.Image``."""
    from PIL import Image

    return Image.open(io.BytesIO(jpeg)).convert("RGB")


def write_atomically(path: str, write) -> int:
    """Write ``path`` through ``write(file)`` into a unique temporary name, then rename; its size."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "wb") as f:
        write(f)
    os.replace(tmp, path)
    return os.path.getsize(path)


def query(fields: Dict[str, Any], turns=()) -> Dict[str, Any]:
    """The probe as an upstream evaluation script reads a question: its text and ``A. …`` options
    (``options`` empty for an open question). A probe without a question (an adaptive window) is asked
    what the user last said (its registration or question turn)."""
    text = str(fields.get("question") or "")
    if not text and turns:
        text = turns[-1].text
    options = ["%s. %s" % (c.get("option_id"), c.get("text")) for c in fields.get("choices") or []]
    return {"question": text, "options": options}


def load_frames(state_dir: str, sessions, index: int) -> list:
    """The frames :func:`save_frames` kept for the sessions before ``index`` (oldest first), as
    ``apm_child.Frame``: the state of a prefix-recompute system, which re-reads them when asked."""
    from apm_child import Frame

    frames = []
    for s in sessions[:index]:
        folder = os.path.join(state_dir, s.file_stem + ".frames")
        for name in sorted(os.listdir(folder) if os.path.isdir(folder) else [], key=lambda n: int(n[:-4])):
            with open(os.path.join(folder, name), "rb") as f:
                frames.append(Frame(s.key, float(int(name[:-4]) - s.start), int(name[:-4]), f.read()))
    return frames


def save_frames(state_dir: str, session, frames) -> int:
    """Keep ``session``'s frames (JPEG, named by wall clock) in ``<stem>.frames/``; their bytes."""
    folder = os.path.join(state_dir, session.file_stem + ".frames")
    os.makedirs(folder, exist_ok=True)
    return sum(write_atomically(os.path.join(folder, "%d.jpg" % f.wall_clock), lambda out, b=f.jpeg: out.write(b))
               for f in frames)


class FirstToken:
    """A ``generate`` streamer noting when the first new token arrives (its first ``put`` is the prompt)."""

    def __init__(self) -> None:
        import time

        self.clock, self.puts, self.at = time.perf_counter, 0, None

    def put(self, value) -> None:
        self.puts += 1
        if self.puts == 2:
            self.at = self.clock()

    def end(self) -> None:
        pass
