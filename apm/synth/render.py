"""Draw a world state into a frame, and read the state back from (decoded, possibly resized) pixels.

Layout, as fractions of the frame (so it survives resizing), top to bottom: the wall-clock strip
(:mod:`apm.video.overlay`); three zones (left counter, front table, right shelf) each holding at most
one coloured object; a lane with a moving dot (so consecutive frames differ like real video); the
action patch, the tray of ``TRAY_SLOTS`` item slots and the sign; the pixel code of the absolute
second (:mod:`apm.video.pixelcode`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw

from apm.data import clock
from apm.synth.world import ACTIONS, OBJECT_COLOURS, TRAY_SLOTS, ZONES, State
from apm.video import overlay, pixelcode

BACKGROUND = (45, 45, 50)
TRAY, SLOT_EMPTY, SLOT_FULL = (95, 72, 50), (55, 45, 38), (235, 235, 235)
SIGN_PANEL, SIGN_INK = (245, 240, 220), (10, 10, 10)
TRAY_COLS = 4

Box = tuple[int, int, int, int]
"""``(x0, y0, x1, y1)``, end-exclusive pixel coordinates."""


@dataclass(frozen=True)
class Layout:
    """Pixel boxes of every scene element for a ``width`` x ``height`` frame."""

    width: int
    height: int

    def _box(self, fx0: float, fy0: float, fx1: float, fy1: float) -> Box:
        """A box given as fractions of the frame."""
        return (round(fx0 * self.width), round(fy0 * self.height), round(fx1 * self.width), round(fy1 * self.height))

    def zone(self, i: int) -> Box:
        """Where the object in zone ``i`` is drawn."""
        return self._box(i / 3 + 0.05, 0.15, (i + 1) / 3 - 0.05, 0.42)

    def zone_label(self, i: int) -> Box:
        """Where the name of the object in zone ``i`` is written."""
        return self._box(i / 3 + 0.02, 0.43, (i + 1) / 3 - 0.02, 0.53)

    @property
    def lane(self) -> Box:
        """The strip the moving dot runs along."""
        return self._box(0.0, 0.55, 1.0, 0.59)

    @property
    def action(self) -> Box:
        """The action patch: its colour codes the action, its label names it."""
        return self._box(0.02, 0.62, 0.31, 0.87)

    @property
    def tray(self) -> Box:
        """The tray holding ``TRAY_SLOTS`` item slots."""
        return self._box(0.34, 0.62, 0.66, 0.87)

    def slot(self, i: int) -> Box:
        """Tray slot ``i``: white when it holds an item."""
        x0, y0, x1, y1 = self.tray
        r, c = divmod(i, TRAY_COLS)
        w, h = (x1 - x0) / TRAY_COLS, (y1 - y0) / (TRAY_SLOTS // TRAY_COLS)
        return (
            round(x0 + (c + 0.15) * w),
            round(y0 + (r + 0.15) * h),
            round(x0 + (c + 0.85) * w),
            round(y0 + (r + 0.85) * h),
        )

    @property
    def sign(self) -> Box:
        """The sign panel, showing one word when a sign is up."""
        return self._box(0.69, 0.62, 0.98, 0.87)


def _inner(box: Box, frac: float = 0.5, top: float | None = None) -> tuple[slice, slice]:
    """Central part of a box (``frac`` of each side), or its top part from ``top`` when given."""
    x0, y0, x1, y1 = box
    mx, my = (x1 - x0) * (1 - frac) / 2, (y1 - y0) * (1 - frac) / 2
    ys = (y0 + my, y1 - my) if top is None else (y0 + (y1 - y0) * 0.1, y0 + (y1 - y0) * top)
    ya, yb = int(ys[0]), max(int(ys[0]) + 1, int(np.ceil(ys[1])))
    xa, xb = int(x0 + mx), max(int(x0 + mx) + 1, int(np.ceil(x1 - mx)))
    return slice(ya, yb), slice(xa, xb)


def _fit_font(draw: ImageDraw.ImageDraw, text: str, box: Box, size: float):
    """The largest font no bigger than ``size`` px whose ``text`` fits the box's width."""
    width = (box[2] - box[0]) * 0.92
    s = max(6, round(size))
    while s > 6 and draw.textlength(text, font=overlay.font(s)) > width:
        s -= 1
    return overlay.font(s)


def _draw_sign(draw: ImageDraw.ImageDraw, box: Box, word: str) -> None:
    """A light panel with ``word`` in black, as large as fits."""
    draw.rectangle((box[0], box[1], box[2] - 1, box[3] - 1), fill=SIGN_PANEL)
    centre = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2 + (box[3] - box[1]) * 0.08)
    draw.text(centre, word, fill=SIGN_INK, font=_fit_font(draw, word, box, (box[3] - box[1]) * 0.5), anchor="mm")


def render_state(state: State, abs_second: int, objects: dict[str, str], width: int, height: int) -> np.ndarray:
    """The frame for one second of the world: scene, wall-clock label and pixel code."""
    layout = Layout(width, height)
    image = Image.new("RGB", (width, height), BACKGROUND)
    draw = ImageDraw.Draw(image)
    label_size = (layout.zone_label(0)[3] - layout.zone_label(0)[1]) * 0.9
    for i, name in enumerate(state.zones):
        if name is None:
            continue
        x0, y0, x1, y1 = layout.zone(i)
        draw.rounded_rectangle(
            (x0, y0, x1 - 1, y1 - 1), radius=max(1, (x1 - x0) // 8), fill=OBJECT_COLOURS[objects[name]]
        )
        lb = layout.zone_label(i)
        draw.text(
            ((lb[0] + lb[2]) / 2, (lb[1] + lb[3]) / 2),
            name,
            fill=(230, 230, 230),
            font=_fit_font(draw, name, lb, label_size),
            anchor="mm",
        )
    x0, y0, x1, y1 = layout.action
    draw.rectangle((x0, y0, x1 - 1, y1 - 1), fill=ACTIONS[state.action])
    verb = state.action.split(" ")[0]
    text_box = (x0, round(y0 + (y1 - y0) * 0.6), x1, y1)
    draw.rectangle((x0, text_box[1], x1 - 1, y1 - 1), fill=(20, 20, 20))
    draw.text(
        ((x0 + x1) / 2, (text_box[1] + y1) / 2),
        verb,
        fill=(240, 240, 240),
        font=_fit_font(draw, verb, text_box, (y1 - text_box[1]) * 0.9),
        anchor="mm",
    )
    tx0, ty0, tx1, ty1 = layout.tray
    draw.rectangle((tx0, ty0, tx1 - 1, ty1 - 1), fill=TRAY)
    for i in range(TRAY_SLOTS):
        sx0, sy0, sx1, sy1 = layout.slot(i)
        draw.rectangle((sx0, sy0, sx1 - 1, sy1 - 1), fill=SLOT_FULL if i < state.count else SLOT_EMPTY)
    if state.sign is not None:
        _draw_sign(draw, layout.sign, state.sign)
    rgb = np.array(image)
    overlay.draw_label(rgb, clock.label(abs_second))
    pixelcode.draw_code(rgb, abs_second)
    return rgb


def add_motion(rgb: np.ndarray, frame_index: int) -> np.ndarray:
    """A copy of ``rgb`` with the lane's dot at the position of ``frame_index`` (sub-second motion)."""
    out = rgb.copy()
    x0, y0, x1, y1 = Layout(rgb.shape[1], rgb.shape[0]).lane
    size = max(2, y1 - y0)
    x = (frame_index * max(1, size // 2)) % max(1, x1 - x0 - size)
    out[y0:y1, x0 + x : x0 + x + size] = 200
    return out


def _nearest(colour: np.ndarray, palette: dict[str, tuple[int, int, int]]) -> str:
    """The palette entry closest to ``colour`` (RGB distance)."""
    return min(palette, key=lambda k: float(np.sum((colour - np.array(palette[k], dtype=np.float32)) ** 2)))


def _mean(rgb: np.ndarray, where: tuple[slice, slice]) -> np.ndarray:
    """Mean RGB of a region."""
    return rgb[where].reshape(-1, 3).astype(np.float32).mean(axis=0)


def _sign_present(rgb: np.ndarray, layout: Layout) -> bool:
    """Whether the sign panel is lit (the band above its word is light)."""
    x0, y0, x1, y1 = layout.sign
    band = rgb[y0 + (y1 - y0) // 10 : y0 + (y1 - y0) // 4, x0 + (x1 - x0) // 10 : x1 - (x1 - x0) // 10]
    return float(band.astype(np.float32).mean()) > 170


def read_scene(rgb: np.ndarray) -> dict:
    """The state a frame shows, read from its pixels.

    Returns ``{"code": abs second or None, "action": name, "count": filled tray slots,
    "zones": {zone: object colour or None}, "sign": whether a sign is up}``.
    """
    layout = Layout(rgb.shape[1], rgb.shape[0])
    palette = {**OBJECT_COLOURS, "": BACKGROUND}
    zones = {}
    for i, zone in enumerate(ZONES):
        colour = _nearest(_mean(rgb, _inner(layout.zone(i))), palette)
        zones[zone] = colour or None
    count = sum(float(_mean(rgb, _inner(layout.slot(i))).mean()) > 150 for i in range(TRAY_SLOTS))
    return {
        "code": pixelcode.read_code(rgb),
        "action": _nearest(_mean(rgb, _inner(layout.action, 0.6, top=0.45)), ACTIONS),
        "count": int(count),
        "zones": zones,
        "sign": _sign_present(rgb, layout),
    }


SUPERSAMPLES = (1, 2, 4)
"""Sign templates are drawn at these multiples of the frame size and scaled down, so a frame that was
itself drawn larger and resized (as a frame cache does) still matches its word."""
MAX_TEMPLATE_WIDTH = 1280
"""Supersampled templates wider than this are skipped (no release is drawn wider than 640)."""


@lru_cache(maxsize=4096)
def _sign_template(word: str, width: int, height: int, supersample: int) -> np.ndarray:
    """Grey pixels of the sign panel showing ``word`` in a ``width`` x ``height`` frame."""
    big = Image.new("RGB", (width * supersample, height * supersample), BACKGROUND)
    _draw_sign(ImageDraw.Draw(big), Layout(*big.size).sign, word)
    image = big if supersample == 1 else big.resize((width, height), Image.Resampling.BILINEAR)
    x0, y0, x1, y1 = Layout(width, height).sign
    return np.asarray(image.convert("L"), dtype=np.float32)[y0:y1, x0:x1]


def read_sign(rgb: np.ndarray, words: list[str]) -> str | None:
    """Which of ``words`` the sign shows (closest rendered template), or None when no sign is up."""
    height, width = rgb.shape[:2]
    layout = Layout(width, height)
    if not _sign_present(rgb, layout):
        return None
    x0, y0, x1, y1 = layout.sign
    grey = np.asarray(Image.fromarray(np.ascontiguousarray(rgb[y0:y1, x0:x1])).convert("L"), dtype=np.float32)

    def distance(word: str) -> float:
        return min(
            float(np.mean((grey - _sign_template(word, width, height, k)) ** 2))
            for k in SUPERSAMPLES
            if k == 1 or width * k <= MAX_TEMPLATE_WIDTH
        )

    return min(words, key=distance)
