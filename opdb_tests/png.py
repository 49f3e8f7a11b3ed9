"""A tiny PNG writer (RGB, 8 bits) and a heatmap with a 3x5 pixel font: no plotting library.

>>> write_png("x.png", [[(255, 0, 0)]])   # doctest: +SKIP
"""

from __future__ import annotations

import struct
import zlib
from typing import Sequence

RGB = tuple[int, int, int]


def write_png(path: str, pixels: Sequence[Sequence[RGB]]) -> None:
    h, w = len(pixels), len(pixels[0])
    raw = b"".join(b"\x00" + bytes(c for px in row for c in px) for row in pixels)

    def chunk(tag: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + tag + data
                + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


# 3x5 glyphs, row-major bits; drawn at scale 2
_FONT = {
    'A': '010101111101101', 'B': '110101110101110', 'C': '011100100100011', 'D': '110101101101110',
    'E': '111100110100111', 'F': '111100110100100', 'G': '011100101101011', 'H': '101101111101101',
    'I': '111010010010111', 'J': '001001001101010', 'K': '101101110101101', 'L': '100100100100111',
    'M': '101111111101101', 'N': '110101101101101', 'O': '010101101101010', 'P': '110101110100100',
    'Q': '010101101110011', 'R': '110101110101101', 'S': '011100010001110', 'T': '111010010010010',
    'U': '101101101101111', 'V': '101101101101010', 'W': '101101111111101', 'X': '101101010101101',
    'Y': '101101010010010', 'Z': '111001010100111', '0': '111101101101111', '1': '010110010010111',
    '2': '110001010100111', '3': '110001010001110', '4': '101101111001001', '5': '111100110001110',
    '6': '011100111101111', '7': '111001010010010', '8': '111101111101111', '9': '111101111001110',
    '-': '000000111000000', '~': '000011110000000', '(': '010100100100010', ')': '010001001001010',
    '.': '000000000000010', '%': '101001010100101', '/': '001001010100100', ':': '000010000010000',
    ' ': '000000000000000', '+': '000010111010000', '_': '000000000000111',
}
_SCALE = 2


def _text(img: list[list[RGB]], x: int, y: int, text: str, color: RGB = (0, 0, 0)) -> None:
    for n, ch in enumerate(text):
        bits = _FONT.get(ch.upper(), _FONT[" "])
        for k, b in enumerate(bits):
            if b != "1":
                continue
            for dy in range(_SCALE):
                for dx in range(_SCALE):
                    yy = y + (k // 3) * _SCALE + dy
                    xx = x + n * 4 * _SCALE + (k % 3) * _SCALE + dx
                    if 0 <= yy < len(img) and 0 <= xx < len(img[0]):
                        img[yy][xx] = color


def _color(v: float | None) -> RGB:
    if v is None:
        return (225, 225, 225)  # nothing tried
    # red (0) -> yellow (0.5) -> green (1)
    if v < 0.5:
        return (220, int(60 + 340 * v), 60)
    return (int(220 - 340 * (v - 0.5)), 200, 60)


def heatmap(path: str, rows: Sequence[str], cols: Sequence[str],
            values: Sequence[Sequence[float | None]], title: str = "") -> None:
    """Cells coloured by pass fraction (red 0, green 1, grey none), labelled with percent."""
    cell_w, cell_h, left, top = 44, 16, 8 * max(len(r) for r in rows) + 12, 40
    w, h = left + cell_w * len(cols) + 6, top + cell_h * len(rows) + 6
    img = [[(255, 255, 255)] * w for _ in range(h)]
    _text(img, 4, 4, title)
    for j, c in enumerate(cols):
        _text(img, left + j * cell_w + 2, 24, c[:5])
    for i, r in enumerate(rows):
        _text(img, 4, top + i * cell_h + 3, r)
        for j, v in enumerate(values[i]):
            col = _color(v)
            for yy in range(top + i * cell_h, top + (i + 1) * cell_h - 1):
                for xx in range(left + j * cell_w, left + (j + 1) * cell_w - 1):
                    img[yy][xx] = col
            if v is not None:
                _text(img, left + j * cell_w + 4, top + i * cell_h + 3, f"{round(100 * v)}")
    write_png(path, img)
