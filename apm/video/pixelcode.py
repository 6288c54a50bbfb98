"""A machine-readable pixel code of a frame's absolute wall-clock second.

The code is a strip of black/white cells along the bottom of the frame: ``ROWS x COLS`` cells
holding ``DATA_BITS`` bits of the absolute second (see :mod:`apm.data.clock`) followed by a CRC-8 of
them. Cell geometry is a fixed fraction of the frame size, so the code survives resizing; cells are
large flat blocks of extreme luma, so it survives H.264. Tests use it to prove which wall-clock
second a decoded frame shows.
"""

from __future__ import annotations

import numpy as np

DATA_BITS = 24
CHECK_BITS = 8
ROWS, COLS = 2, 16
STRIP_FRACTION = 0.1
"""Height of the code strip as a fraction of the frame height."""
_DARK, _LIGHT = 80.0, 175.0
"""A cell reads as 0 below ``_DARK`` and 1 above ``_LIGHT``; anything between fails the read."""
_CRC_POLY = 0x07
_CRC_XOR = 0xA5
"""Applied to the CRC so that all-black or all-white strips never pass the check."""

assert ROWS * COLS == DATA_BITS + CHECK_BITS


def strip_top(height: int) -> int:
    """First pixel row of the code strip in a frame ``height`` pixels tall."""
    return height - max(ROWS, round(height * STRIP_FRACTION))


def _crc8(value: int) -> int:
    """CRC-8 (polynomial 0x07, output XOR 0xA5) of the data bytes of ``value``, most significant first."""
    crc = 0
    for byte in value.to_bytes(DATA_BITS // 8, "big"):
        crc ^= byte
        for _ in range(8):
            crc = ((crc << 1) ^ _CRC_POLY) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc ^ _CRC_XOR


def _bits(abs_second: int) -> list[int]:
    """Data bits then check bits, most significant first."""
    word = (abs_second << CHECK_BITS) | _crc8(abs_second)
    n = DATA_BITS + CHECK_BITS
    return [(word >> (n - 1 - i)) & 1 for i in range(n)]


def _cell_edges(height: int, width: int) -> tuple[list[int], list[int]]:
    """Row and column boundaries (pixel indices) of the cell grid."""
    top = strip_top(height)
    ys = [top + round(r * (height - top) / ROWS) for r in range(ROWS + 1)]
    xs = [round(c * width / COLS) for c in range(COLS + 1)]
    return ys, xs


def draw_code(rgb: np.ndarray, abs_second: int) -> None:
    """Draw the code of ``abs_second`` into the bottom strip of an (H, W, 3) uint8 frame, in place."""
    if not 0 <= abs_second < 1 << DATA_BITS:
        raise ValueError(f"abs_second out of range: {abs_second}")
    ys, xs = _cell_edges(rgb.shape[0], rgb.shape[1])
    for i, bit in enumerate(_bits(abs_second)):
        r, c = divmod(i, COLS)
        rgb[ys[r] : ys[r + 1], xs[c] : xs[c + 1]] = 255 if bit else 0


def read_code(rgb: np.ndarray) -> int | None:
    """The absolute second coded in a frame, or None when a cell is unclear or the check fails."""
    height, width = rgb.shape[:2]
    ys, xs = _cell_edges(height, width)
    luma = rgb.astype(np.float32).mean(axis=2)
    bits = []
    for r in range(ROWS):
        y0, y1 = ys[r], ys[r + 1]
        qy = (y1 - y0) / 4
        for c in range(COLS):
            x0, x1 = xs[c], xs[c + 1]
            qx = (x1 - x0) / 4
            cell = luma[int(y0 + qy) : max(int(y0 + qy) + 1, int(np.ceil(y1 - qy))),
                        int(x0 + qx) : max(int(x0 + qx) + 1, int(np.ceil(x1 - qx)))]
            v = float(cell.mean())
            if _DARK <= v <= _LIGHT:
                return None
            bits.append(1 if v > _LIGHT else 0)
    word = 0
    for b in bits:
        word = (word << 1) | b
    value, check = word >> CHECK_BITS, word & 0xFF
    return value if _crc8(value) == check else None
