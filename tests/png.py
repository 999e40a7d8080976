"""A minimal PNG reader for tests (screenshots of the HTML report): 8-bit greyscale, RGB, grey +
alpha and RGBA, not interlaced — what headless Chromium writes. No dependency beyond zlib."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}  # colour type -> samples per pixel


@dataclass(frozen=True)
class Image:
    width: int
    height: int
    channels: int
    rows: tuple[bytes, ...]  # unfiltered scanlines

    def pixels(self) -> list[tuple[int, ...]]:
        """Every pixel as (r, g, b) (grey repeated; alpha dropped)."""
        c = self.channels
        out: list[tuple[int, ...]] = []
        for row in self.rows:
            for x in range(0, self.width * c, c):
                px = row[x:x + c]
                out.append((px[0], px[0], px[0]) if c <= 2 else (px[0], px[1], px[2]))
        return out


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def read_png(path: Path) -> Image:
    data = path.read_bytes()
    if not data.startswith(SIGNATURE):
        raise ValueError(f"{path}: not a PNG file")
    pos, idat, header = len(SIGNATURE), bytearray(), None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    if header is None:
        raise ValueError(f"{path}: no IHDR chunk")
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in CHANNELS or interlace:
        raise ValueError(f"{path}: unsupported PNG (bit depth {depth}, colour type {colour}, interlace {interlace})")
    c = CHANNELS[colour]
    raw = zlib.decompress(bytes(idat))
    stride = width * c
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            a = line[i - c] if i >= c else 0
            b = prev[i]
            d = prev[i - c] if i >= c else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                line[i] = (line[i] + _paeth(a, b, d)) & 0xFF
            elif kind != 0:
                raise ValueError(f"{path}: scanline {y} has unknown filter type {kind}")
        rows.append(bytes(line))
        prev = line
    return Image(width, height, c, tuple(rows))
