"""A small PNG reader for the screenshots the browser tests take: 8-bit RGB or RGBA, not interlaced (what Chromium
writes), into rows of pixels. Pure Python, so the suite needs no imaging library."""

from __future__ import annotations

import struct
import zlib
from collections import Counter
from pathlib import Path

__all__ = ["Image", "read_png"]

_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class Image:
    """Decoded pixels: ``rows[y]`` is the bytes of row ``y``, ``channels`` bytes per pixel."""

    def __init__(self, width: int, height: int, channels: int, rows: list[bytes]) -> None:
        self.width = width
        self.height = height
        self.channels = channels
        self.rows = rows

    def pixel(self, x: int, y: int) -> tuple[int, int, int]:
        start = x * self.channels
        red, green, blue = self.rows[y][start : start + 3]
        return red, green, blue

    def histogram(self) -> Counter[tuple[int, int, int]]:
        """How many pixels have each colour (alpha left out)."""
        counts: Counter[tuple[int, int, int]] = Counter()
        step = self.channels
        for row in self.rows:
            counts.update(zip(row[0::step], row[1::step], row[2::step], strict=True))
        return counts


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def _unfilter(kind: int, line: bytearray, previous: bytes, step: int) -> bytes:
    if kind == 0:
        return bytes(line)
    if kind == 2:
        return bytes((x + y) & 0xFF for x, y in zip(line, previous, strict=True))
    for i in range(len(line)):
        left = line[i - step] if i >= step else 0
        if kind == 1:
            line[i] = (line[i] + left) & 0xFF
        elif kind == 3:
            line[i] = (line[i] + ((left + previous[i]) >> 1)) & 0xFF
        elif kind == 4:
            up_left = previous[i - step] if i >= step else 0
            line[i] = (line[i] + _paeth(left, previous[i], up_left)) & 0xFF
        else:
            raise ValueError(f"unknown PNG filter {kind}")
    return bytes(line)


def read_png(path: Path) -> Image:
    data = path.read_bytes()
    if not data.startswith(_SIGNATURE):
        raise ValueError(f"{path} is not a PNG file")
    position = len(_SIGNATURE)
    compressed = bytearray()
    width = height = channels = 0
    while position < len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind = data[position + 4 : position + 8]
        body = data[position + 8 : position + 8 + length]
        position += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or colour not in (2, 6) or interlace:
                raise ValueError(f"{path}: only 8-bit RGB/RGBA, non-interlaced PNGs are read")
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            compressed += body
        elif kind == b"IEND":
            break
    raw = zlib.decompress(bytes(compressed))
    stride = width * channels
    rows: list[bytes] = []
    previous = bytes(stride)
    for y in range(height):
        start = y * (stride + 1)
        previous = _unfilter(raw[start], bytearray(raw[start + 1 : start + 1 + stride]), previous, channels)
        rows.append(previous)
    return Image(width, height, channels, rows)
