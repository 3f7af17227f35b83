"""Pillow-drawn tray icons, one per state, and their SVG twins for packaging.

Every icon is a filled disc in the state's colour with a white glyph, so that the state reads at 16 px and
the disc colour dominates the tray slot (the X tests classify states by it). ``offline`` (no daemon) is a
hollow ring with a slash.

``python -m tray.icons DIR`` writes ``DIR/hicolor/<size>x<size>/apps/hasr*.png`` and
``DIR/hicolor/scalable/apps/hasr*.svg``: the files under ``packaging/icons`` come from here.
"""

from __future__ import annotations

import sys
from pathlib import Path

from PIL import Image, ImageDraw

STATES = ("idle", "loading", "ok", "busy", "error", "offline", "listening")

COLORS: dict[str, tuple[int, int, int]] = {
    "idle": (138, 143, 152),     # grey: no model in memory (not a fault)
    "loading": (240, 160, 32),   # amber: the worker is loading models
    "ok": (47, 179, 68),         # green: models loaded, ready
    "busy": (47, 125, 225),      # blue: transcribing
    "error": (217, 58, 58),      # red: loading failed
    "offline": (100, 106, 116),  # slate ring: daemon not running
    "listening": (142, 68, 199),  # violet: dictating, the microphone is open
}
WHITE = (255, 255, 255, 255)
PANEL = (48, 48, 48)  # background for backends without transparency: a dark panel
PNG_SIZES = (16, 22, 24, 32, 48, 64, 128, 256)
_SS = 4  # supersampling factor for smooth edges

# Glyphs on a 64-unit grid: waveform bars (x, half-height) and the error mark.
_BARS = {"idle": [(20, 6), (28, 12), (36, 9), (44, 5)],
         "ok": [(20, 8), (28, 16), (36, 12), (44, 6)],
         "busy": [(18, 10), (25, 18), (32, 13), (39, 19), (46, 8)]}


def _hex(rgb: tuple[int, int, int]) -> str:
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def draw(state: str, size: int = 64) -> Image.Image:
    """The RGBA icon of ``state`` at ``size`` x ``size`` pixels."""
    if state not in COLORS:
        raise ValueError(f"unknown icon state {state!r}: use one of {', '.join(STATES)}")
    big = size * _SS
    u = big / 64.0  # one grid unit in pixels
    img = Image.new("RGBA", (big, big), (0, 0, 0, 0))
    d = ImageDraw.Draw(img)
    rgb = COLORS[state]
    if state == "offline":
        w = max(1, round(6 * u))
        d.ellipse((4 * u, 4 * u, 60 * u, 60 * u), outline=rgb + (255,), width=w)
        d.line((16 * u, 48 * u, 48 * u, 16 * u), fill=rgb + (255,), width=w)
        return img.resize((size, size), Image.Resampling.LANCZOS)
    d.ellipse((2 * u, 2 * u, 62 * u, 62 * u), fill=rgb + (255,))
    if state == "loading":
        # three quarters of a ring: work in progress
        d.arc((16 * u, 16 * u, 48 * u, 48 * u), start=-90, end=180, fill=WHITE, width=max(1, round(6 * u)))
    elif state == "error":
        d.rounded_rectangle((28 * u, 14 * u, 36 * u, 40 * u), radius=4 * u, fill=WHITE)
        d.ellipse((28 * u, 44 * u, 36 * u, 52 * u), fill=WHITE)
    elif state == "listening":
        # a microphone: capsule, cradle and stand
        d.rounded_rectangle((25 * u, 12 * u, 39 * u, 36 * u), radius=7 * u, fill=WHITE)
        d.arc((19 * u, 20 * u, 45 * u, 44 * u), start=0, end=180, fill=WHITE, width=max(1, round(3 * u)))
        d.rectangle((30.5 * u, 44 * u, 33.5 * u, 51 * u), fill=WHITE)
        d.rectangle((24 * u, 50 * u, 40 * u, 53 * u), fill=WHITE)
    else:
        half_w = 2.5 * u
        for x, h in _BARS[state]:
            d.rounded_rectangle(((x * u) - half_w, (32 - h) * u, (x * u) + half_w, (32 + h) * u),
                                radius=half_w, fill=WHITE)
    return img.resize((size, size), Image.Resampling.LANCZOS)


def flatten(img: Image.Image, background: tuple[int, int, int] = PANEL) -> Image.Image:
    """``img`` composited onto an opaque background (pystray's xorg backend drops transparency)."""
    out = Image.new("RGB", img.size, background)
    out.paste(img, mask=img.getchannel("A"))
    return out


def svg(state: str) -> str:
    """The same icon as a 64 x 64 SVG document."""
    if state not in COLORS:
        raise ValueError(f"unknown icon state {state!r}")
    c = _hex(COLORS[state])
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64" viewBox="0 0 64 64">']
    if state == "offline":
        parts.append(f'<circle cx="32" cy="32" r="25" fill="none" stroke="{c}" stroke-width="6"/>')
        parts.append(f'<line x1="16" y1="48" x2="48" y2="16" stroke="{c}" stroke-width="6"/>')
    else:
        parts.append(f'<circle cx="32" cy="32" r="30" fill="{c}"/>')
        if state == "loading":
            # arc from 12 o'clock clockwise to 9 o'clock (270 degrees), radius 13
            parts.append('<path d="M32 19 A13 13 0 1 1 19 32" fill="none" stroke="#fff" stroke-width="6"/>')
        elif state == "error":
            parts.append('<rect x="28" y="14" width="8" height="26" rx="4" fill="#fff"/>')
            parts.append('<circle cx="32" cy="48" r="4" fill="#fff"/>')
        elif state == "listening":
            parts.append('<rect x="25" y="12" width="14" height="24" rx="7" fill="#fff"/>')
            parts.append('<path d="M20.5 32 A11.5 11.5 0 0 0 43.5 32" fill="none" stroke="#fff" stroke-width="3"/>')
            parts.append('<rect x="30.5" y="44" width="3" height="7" fill="#fff"/>')
            parts.append('<rect x="24" y="50" width="16" height="3" fill="#fff"/>')
        else:
            for x, h in _BARS[state]:
                parts.append(f'<rect x="{x - 2.5}" y="{32 - h}" width="5" height="{2 * h}" rx="2.5" fill="#fff"/>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def icon_name(state: str) -> str:
    """Freedesktop icon name: ``hasr`` for the application (the ok icon), ``hasr-<state>`` per state."""
    return f"hasr-{state}"


def write_theme(root: Path) -> list[Path]:
    """Write every icon as PNG (all sizes) and SVG under ``root/hicolor``; return the files written."""
    written: list[Path] = []
    names = [(icon_name(s), s) for s in STATES] + [("hasr", "ok")]
    for size in PNG_SIZES:
        folder = root / "hicolor" / f"{size}x{size}" / "apps"
        folder.mkdir(parents=True, exist_ok=True)
        for name, state in names:
            path = folder / f"{name}.png"
            draw(state, size).save(path, optimize=True)
            written.append(path)
    folder = root / "hicolor" / "scalable" / "apps"
    folder.mkdir(parents=True, exist_ok=True)
    for name, state in names:
        path = folder / f"{name}.svg"
        path.write_text(svg(state), encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0] if args else "packaging/icons")
    files = write_theme(root)
    print(f"wrote {len(files)} icon files under {root}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
