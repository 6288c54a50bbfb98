"""What the paper presets' engines count for the two frame layouts, from the real processors' token counts.

Prints, per paper preset, a still's and a video frame's vision tokens (``apm.backbones.token_counts``: the
transformers processors, CPU, offline) and the prefill tokens of ``uniform`` and ``session_stable`` over
paper-shaped trajectories of raw-video memory. The layout decides what each probe sends; the token counts
say what it costs; an ideal prefix cache (every earlier request of the trajectory kept, vLLM's 16-token
blocks) says what the engine need not compute again. No GPU, no engine: the counts and the layouts' own
sampling rules (``apm.video.select``).

    .venv/bin/python bench/token_counts.py
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from apm.backbones import instantiate_backbone
from apm.backbones.guard import ContextGuard
from apm.backbones.token_counts import PRESETS, VisualTokens
from apm.configs import CONF_DIR
from apm.prompts import system_prompt
from apm.video.select import earlier_budget, prefix_stride, still_count, strided, uniform_indices

BLOCK = 16
"""vLLM's KV block on a GPU: a prefix is reused in whole blocks."""
SYSTEM_TOKENS = math.ceil(len(system_prompt()) / 4)
"""The system prompt (E.1), shared by every request, at 4 characters per token."""
OPENING_TOKENS = 40
"""A session's opening text part (its headers): shared by the probes of a session."""
PROBE_TOKENS = 300
"""A probe's own text (turns, current time, the question): never shared."""

Sample = tuple[int, int]
"""(session index, second since the session's start): the cache holds one frame per second."""
Item = tuple[object, int]
"""One unit an engine caches by identity, with its tokens: a text part, a video, a still."""


@dataclass(frozen=True)
class Shape:
    """A trajectory of raw-video memory: its sessions' lengths (s) and probes per session, spread evenly."""

    name: str
    durations: tuple[int, ...]
    probes_per_session: int

    def probes(self) -> Iterable[tuple[int, int]]:
        """(session index, probe second), in the runner's order (time order)."""
        for index, length in enumerate(self.durations):
            for j in range(self.probes_per_session):
                yield index, round((j + 1) * length / (self.probes_per_session + 1))


PAPER = Shape("paper-shaped", (660, 720, 780, 840, 900), 10)
"""The paper's averages (Section 3): 549 sessions over 104 trajectories (5.3 each) of 11–15 min, 5,371 probes
(9.8 per session)."""
SHAPES = (PAPER, *(Shape(f"{n} sessions, {p} probes each", tuple(660 + 40 * (i % 7) for i in range(n)), p)
                   for n in (4, 8) for p in (1, 2, 3, 6, 20)))
"""The paper's shape and its range: 4–8 sessions, from one probe per session to twenty."""


def _samples(durations: Sequence[int], session: int, upto: int | None = None) -> list[Sample]:
    """The cached samples of a session (to second ``upto``, inclusive; all of it without)."""
    last = durations[session] if upto is None else upto
    return [(session, s) for s in range(last + 1)]


def uniform_items(tokens: VisualTokens, durations: Sequence[int], session: int, second: int,
                  max_frames: int, frames_per_still: float) -> list[Item]:
    """A ``uniform`` probe: every earlier session and the prefix, uniformly to ``max_frames``, as one video."""
    shown = [x for s in range(session) for x in _samples(durations, s)] + _samples(durations, session, second)
    video = tuple(shown[i] for i in uniform_indices(len(shown), max_frames))
    return [("system", SYSTEM_TOKENS), (("opening", session), OPENING_TOKENS), (video, tokens.video(len(video)))]


def session_stable_items(tokens: VisualTokens, durations: Sequence[int], session: int, second: int,
                         max_frames: int, frames_per_still: float) -> list[Item]:
    """A ``session_stable`` probe: the earlier sessions' video (fixed per session), then the prefix as stills,
    each worth ``frames_per_still`` frames of the budget (the preset's guard says)."""
    earlier = [x for s in range(session) for x in _samples(durations, s)]
    video = tuple(earlier[i] for i in uniform_indices(len(earlier), earlier_budget(max_frames)))
    stills = still_count(max_frames - len(video), frames_per_still)
    prefix = _samples(durations, session, second)
    chosen = prefix[-stills:] if stills <= 1 else strided(prefix, prefix_stride(durations[session] + 1, stills))
    items: list[Item] = [("system", SYSTEM_TOKENS), (("opening", session), OPENING_TOKENS)]
    if video:
        items.append((video, tokens.video(len(video))))
    return items + [(("still", x), tokens.still) for x in chosen]


LAYOUTS = {"uniform": uniform_items, "session_stable": session_stable_items}


@dataclass(frozen=True)
class Cost:
    """A layout's prefill over a trajectory: tokens sent, and tokens computed past an ideal prefix cache."""

    prompt: int
    computed: int


def prefill(requests: Iterable[list[Item]]) -> Cost:
    """Sum over ``requests`` (in order) of their tokens and of those past the longest prefix (whole
    items, whole blocks) any earlier request shares with them: a trie of every prefix seen."""
    trie: dict[tuple[int, object], int] = {}
    prompt = computed = 0
    for items in requests:
        node, cached, matched, total = 0, 0, True, 0
        for key, n in [*items, (object(), PROBE_TOKENS)]:  # the probe's own text is never shared
            total += n
            child = trie.get((node, key))
            if child is None:
                child = trie[(node, key)] = len(trie) + 1
                matched = False
            elif matched:
                cached = total
            node = child
        prompt += total
        computed += total - cached // BLOCK * BLOCK
    return Cost(prompt, computed)


def layout_cost(preset: str, layout: str, shape: Shape) -> Cost:
    """``layout``'s prefill on ``preset``'s counts over ``shape``."""
    tokens, guard = PRESETS[preset](), preset_guard(preset)
    assert guard.max_frames is not None  # every paper preset caps its frames
    build = LAYOUTS[layout]
    return prefill(build(tokens, shape.durations, s, t, guard.max_frames, guard.frames_per_still)
                   for s, t in shape.probes())


def preset_guard(preset: str) -> ContextGuard:
    """The context guard of the backbone ``conf/backbone/<preset>.yaml`` builds (what the runner lays frames
    out by; nothing is started)."""
    guard = instantiate_backbone(OmegaConf.load(Path(CONF_DIR) / "backbone" / f"{preset}.yaml")).guard
    if not isinstance(guard, ContextGuard):
        raise TypeError(f"{preset}: its backbone has no context guard")
    return guard


def counts_table() -> str:
    """Per preset: a still's tokens, a video frame's in a 2-frame video and in a ``max_frames`` one."""
    rows = ["| preset | processors | still | per frame, 2-frame video | per frame, `max_frames` video | "
            "`max_frames` video | `max_frames` |", "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for preset, build in PRESETS.items():
        tokens, n = build(), preset_guard(preset).max_frames or 0
        rows.append(f"| `{preset}` | {tokens.name} | {tokens.still} | {tokens.per_video_frame(2):g} | "
                    f"{tokens.per_video_frame(n):g} | {tokens.video(n)} | {n} |")
    return "\n".join(rows)


def layouts_table(shapes: Sequence[Shape] = SHAPES) -> str:
    """Per preset and trajectory shape: both layouts' tokens sent and computed, and their ratios."""
    rows = ["| preset | trajectory | `uniform` sent / computed | `session_stable` sent / computed | "
            "computed ratio | sent ratio |", "| --- | --- | ---: | ---: | ---: | ---: |"]
    for preset in PRESETS:
        for shape in shapes:
            u, s = (layout_cost(preset, layout, shape) for layout in LAYOUTS)
            rows.append(f"| `{preset}` | {shape.name} | {u.prompt:,} / {u.computed:,} | "
                        f"{s.prompt:,} / {s.computed:,} | {s.computed / u.computed:.2f} | {s.prompt / u.prompt:.2f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(counts_table(), layouts_table(), sep="\n\n")
