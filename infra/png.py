"""Line charts as a PNG file with nothing but numpy and zlib (no plotting package is a dependency): panels side by
side, each with a title, a y axis with round ticks, points joined by lines, one colour per series. Text is a 3x5
pixel font of capitals, digits and a few signs, drawn at twice its size; the legend goes under the panels.

    write_png(path, chart_pixels([("ACCURACY", [0, 0.1], {"code": ([40, 45], "#e69f00")})]))
"""

import struct
import zlib

import numpy as np

from infra.report import ticks

# 3x5 glyphs, rows top to bottom, "1" = ink
GLYPHS = (
    "010101111101101 110101110101110 011100100100011 110101101101110 111100110100111 111100110100100 "
    "011100101101011 101101111101101 111010010010111 001001001101010 101101110101101 100100100100111 "
    "101111111101101 110101101101101 010101101101010 110101110100100 010101101110011 110101110101101 "
    "011100010001110 111010010010010 101101101101111 101101101101010 101101111111101 101101010101101 "
    "101101010010010 111001010100111 010101101101010 010110010010111 110001010100111 110001010001110 "
    "101101111001001 111100110001110 011100110101010 111001010010010 010101010101010 010101011001110 "
    "000000000000010 000000111000000 000010111010000 000111000111000 101001010100101 001010010010001 "
    "100010010010100 001001010100100 000000000010100 000010000010000"
)
FONT = dict(
    zip("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-+=%()/,: ", GLYPHS.split() + ["0" * 15])
)
BG, INK, GRID = (255, 255, 255), (40, 40, 40), (228, 228, 228)


def rgb(colour):
    """'#rrggbb' -> (r, g, b)."""
    return tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))


def text(img, x, y, s, colour=INK, scale=2):
    """Draw s (upper-cased; unknown characters as spaces) with its top-left corner at (x, y)."""
    for k, c in enumerate(s.upper()):
        glyph = FONT.get(c, FONT[" "])
        for i, bit in enumerate(glyph):
            if bit == "1":
                r, col = divmod(i, 3)
                x0, y0 = x + (4 * k + col) * scale, y + r * scale
                img[y0 : y0 + scale, x0 : x0 + scale] = colour


def text_width(s, scale=2):
    return 4 * len(s) * scale


def line(img, p, q, colour, width=2):
    """A straight line from p to q, (x, y) pixels, drawn as dense dots."""
    n = int(max(abs(q[0] - p[0]), abs(q[1] - p[1]))) + 1
    for x, y in zip(np.linspace(p[0], q[0], n), np.linspace(p[1], q[1], n)):
        x, y = int(round(x)), int(round(y))
        img[
            max(0, y - width // 2) : y + (width + 1) // 2,
            max(0, x - width // 2) : x + (width + 1) // 2,
        ] = colour


def panel(img, box, title, xs, series):
    """One chart in box (left, top, width, height): series {name: (ys, colour)} over the points xs; a None y is no
    point. The x values are spaced evenly, in their order, each labelled (a sweep's settings, not a scale)."""
    left, top, w, h = box
    text(img, left, top, title)
    ys = [y for values, _ in series.values() for y in values if y is not None]
    lo, hi = (min(ys), max(ys)) if ys else (0.0, 1.0)
    if hi - lo < 1e-9:
        lo, hi = lo - 1, hi + 1
    yt = ticks(lo, hi)
    x0, x1, y0, y1 = left + 56, left + w - 12, top + 24, top + h - 24
    px = lambda i: x0 + (x1 - x0) * (i + 0.5) / len(xs)
    py = lambda y: y1 - (y - yt[0]) / (yt[-1] - yt[0]) * (y1 - y0)
    for y in yt:
        line(img, (x0, py(y)), (x1, py(y)), GRID, 1)
        label = f"{y:.3g}"
        text(img, x0 - 6 - text_width(label), int(py(y)) - 5, label)
    for i, x in enumerate(xs):
        label = f"{x:g}"
        text(img, int(px(i)) - text_width(label) // 2, y1 + 8, label)
    for values, colour in series.values():
        points = [(px(i), py(y)) for i, y in enumerate(values) if y is not None]
        for p, q in zip(points, points[1:]):
            line(img, p, q, rgb(colour))
        for p in points:
            line(img, (p[0] - 3, p[1]), (p[0] + 3, p[1]), rgb(colour), 7)


def chart_pixels(panels, panel_width=360, height=260):
    """panels: [(title, xs, {name: (ys, colour)})] -> (H, W, 3) uint8 image, panels left to right, the legend of
    every series name below them."""
    names = {n: c for _, _, series in panels for n, (_, c) in series.items()}
    img = np.full((height + 30, panel_width * len(panels), 3), BG, dtype=np.uint8)
    for k, (title, xs, series) in enumerate(panels):
        panel(
            img,
            (k * panel_width + 8, 8, panel_width - 16, height - 8),
            title,
            xs,
            series,
        )
    x = 16
    for name, colour in names.items():
        line(img, (x, height + 14), (x + 20, height + 14), rgb(colour), 4)
        text(img, x + 28, height + 9, name)
        x += 48 + text_width(name)
    return img


def write_png(path, img):
    """An (H, W, 3) uint8 image as an 8-bit RGB PNG file."""
    h, w, _ = img.shape
    # filter type 0 on every row
    raw = b"".join(b"\x00" + img[y].tobytes() for y in range(h))
    chunk = lambda kind, data: (
        struct.pack(">I", len(data))
        + kind
        + data
        + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    )
    with open(path, "wb") as f:
        f.write(
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b"")
        )
