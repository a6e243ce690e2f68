"""Small SVG plots for the report, generated in Python: no scripts, no fonts to fetch.

Every function returns one ``<svg>`` element as a string; every label is
XML-escaped. Sizes are fixed in pixels and the viewBox lets the browser scale.
"""
from __future__ import annotations

import math
from html import escape

PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac"]
FONT = "font-family=\"sans-serif\""


def _e(s) -> str:
    return escape(str(s), quote=True)


def _finite(*vals) -> bool:
    return all(v is not None and isinstance(v, (int, float)) and math.isfinite(v) for v in vals)


def _svg(width: int, height: int, body: list[str], title: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(title)}">'
            f'<title>{_e(title)}</title>' + "".join(body) + "</svg>")


def _nice_range(lo: float, hi: float) -> tuple[float, float, float]:
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    span = hi - lo
    step = 10 ** math.floor(math.log10(span / 4)) if span > 0 else 1
    for m in (1, 2, 2.5, 5, 10):
        if span / (step * m) <= 6:
            step *= m
            break
    return math.floor(lo / step) * step, math.ceil(hi / step) * step, step


def _fmt(v: float) -> str:
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 1e5 or a < 1e-3:
        return f"{v:.3g}"
    if a >= 100:
        return f"{v:.0f}"
    return f"{v:.4g}"


def change_bars(title: str, groups: list[str], series: list[str],
                values: dict[tuple[str, str], tuple[float, float, float, bool]]) -> str:
    """Bars of % change (positive = better) with confidence-interval whiskers.

    ``values[(group, series)] = (change, low, high, significant)``.
    """
    W, H, L, R, T, B = 560, 260, 56, 12, 30, 46
    pts = [v for v in values.values() if _finite(v[0])]
    lo = min([0.0] + [min(v[0], v[1]) if _finite(v[1]) else v[0] for v in pts])
    hi = max([0.0] + [max(v[0], v[2]) if _finite(v[2]) else v[0] for v in pts])
    lo, hi, step = _nice_range(lo, hi)
    ph = H - T - B
    pw = W - L - R

    def y(v):
        return T + (hi - v) / (hi - lo) * ph
    body = [f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="13" {FONT}>{_e(title)}</text>']
    t = lo
    while t <= hi + step / 2:
        body.append(f'<line x1="{L}" x2="{W - R}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="#ddd"/>'
                    f'<text x="{L - 4}" y="{y(t) + 4:.1f}" text-anchor="end" font-size="10" {FONT}>{_fmt(t)}%</text>')
        t += step
    body.append(f'<line x1="{L}" x2="{W - R}" y1="{y(0):.1f}" y2="{y(0):.1f}" stroke="#333"/>')
    ng = max(len(groups), 1)
    gw = pw / ng
    bw = min(40.0, gw * 0.8 / max(len(series), 1))
    for gi, g in enumerate(groups):
        gx = L + gi * gw + (gw - bw * len(series)) / 2
        body.append(f'<text x="{L + gi * gw + gw / 2:.1f}" y="{H - B + 16}" text-anchor="middle" font-size="11" '
                    f'{FONT}>{_e(g)}</text>')
        for si, s in enumerate(series):
            v = values.get((g, s))
            if not v or not _finite(v[0]):
                continue
            ch, low, high, sig = v
            x = gx + si * bw
            y0, y1 = sorted((y(0), y(ch)))
            col = PALETTE[si % len(PALETTE)]
            body.append(f'<rect x="{x + 2:.1f}" y="{y0:.1f}" width="{bw - 4:.1f}" height="{max(y1 - y0, 0.5):.1f}" '
                        f'fill="{col}" fill-opacity="{1 if sig else 0.45}"><title>{_e(s)} {_e(g)}: '
                        f'{ch:+.1f}%{" [%+.1f, %+.1f]" % (low, high) if _finite(low, high) else ""}'
                        f'{" significant" if sig else " not significant"}</title></rect>')
            if _finite(low, high):
                cx = x + bw / 2
                body.append(f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{y(high):.1f}" y2="{y(low):.1f}" '
                            f'stroke="#222"/><line x1="{cx - 4:.1f}" x2="{cx + 4:.1f}" y1="{y(high):.1f}" '
                            f'y2="{y(high):.1f}" stroke="#222"/><line x1="{cx - 4:.1f}" x2="{cx + 4:.1f}" '
                            f'y1="{y(low):.1f}" y2="{y(low):.1f}" stroke="#222"/>')
    body += _legend(series, L, H - 14)
    return _svg(W, H, body, title)


def _legend(series: list[str], x0: float, y0: float) -> list[str]:
    out = []
    x = x0
    for i, s in enumerate(series):
        out.append(f'<rect x="{x:.1f}" y="{y0 - 9}" width="10" height="10" fill="{PALETTE[i % len(PALETTE)]}"/>'
                   f'<text x="{x + 14:.1f}" y="{y0}" font-size="11" {FONT}>{_e(s)}</text>')
        x += 24 + 7 * len(str(s))
    return out


def scaling(title: str, unit: str, xs: list[int], series: dict[str, list[tuple[int, float, float, float]]]) -> str:
    """Centre (geometric mean of the per-repetition medians) over core counts per series, with min..max of the per-repetition medians as whiskers.

    ``series[name] = [(cores, centre, low, high), ...]``.
    """
    W, H, L, R, T, B = 560, 260, 70, 12, 30, 46
    vals = [v for pts in series.values() for p in pts for v in p[1:] if _finite(v)]
    if not vals:
        vals = [0.0, 1.0]
    lo, hi, step = _nice_range(min(0.0, min(vals)), max(vals))
    ph, pw = H - T - B, W - L - R
    xs = sorted(xs) or [1]

    def xp(c):
        return L + (xs.index(c) + 0.5) / len(xs) * pw

    def y(v):
        return T + (hi - v) / (hi - lo) * ph
    body = [f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="13" {FONT}>{_e(title)}</text>']
    t = lo
    while t <= hi + step / 2:
        body.append(f'<line x1="{L}" x2="{W - R}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="#eee"/>'
                    f'<text x="{L - 4}" y="{y(t) + 4:.1f}" text-anchor="end" font-size="10" {FONT}>{_fmt(t)}</text>')
        t += step
    body.append(f'<text x="12" y="{T + ph / 2:.1f}" font-size="11" {FONT} transform="rotate(-90 12 {T + ph / 2:.1f})" '
                f'text-anchor="middle">{_e(unit)}</text>')
    for c in xs:
        body.append(f'<text x="{xp(c):.1f}" y="{H - B + 16}" text-anchor="middle" font-size="11" {FONT}>'
                    f'{_e(c)} {"core" if c == 1 else "cores"}</text>')
    for i, (name, pts) in enumerate(series.items()):
        col = PALETTE[i % len(PALETTE)]
        ok = [p for p in sorted(pts) if _finite(p[1]) and p[0] in xs]
        if len(ok) > 1:
            body.append(f'<polyline fill="none" stroke="{col}" stroke-width="2" points="'
                        + " ".join(f"{xp(c):.1f},{y(m):.1f}" for c, m, _, _ in ok) + '"/>')
        for c, m, low, high in ok:
            if _finite(low, high):
                body.append(f'<line x1="{xp(c):.1f}" x2="{xp(c):.1f}" y1="{y(high):.1f}" y2="{y(low):.1f}" '
                            f'stroke="{col}"/>')
            body.append(f'<circle cx="{xp(c):.1f}" cy="{y(m):.1f}" r="3.5" fill="{col}"><title>{_e(name)}, '
                        f'{_e(c)} cores: {_e(_fmt(m))} {_e(unit)}</title></circle>')
    body += _legend(list(series), L, H - 14)
    return _svg(W, H, body, title)


def _heat(v: float, scale: float) -> str:
    if not _finite(v):
        return "#eeeeee"
    f = max(-1.0, min(1.0, v / scale))
    if f >= 0:   # better: green
        r, g, b = 255 - 155 * f, 255 - 55 * f, 255 - 155 * f
    else:        # worse: red
        r, g, b = 255 + 25 * f, 255 + 155 * f, 255 + 155 * f
    return f"rgb({int(r)},{int(g)},{int(b)})"


def heatmap(title: str, rows: list, cols: list[str], values: dict[tuple, tuple[float, bool]]) -> str:
    """The improvement table as a heat map: green = better, red = worse, * = significant."""
    cw, rh, L, T = 130, 28, 70, 60
    W = L + cw * max(len(cols), 1) + 10
    H = T + rh * max(len(rows), 1) + 24
    finite = [abs(v[0]) for v in values.values() if _finite(v[0])]
    scale = max(finite + [5.0])
    body = [f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="13" {FONT}>{_e(title)}</text>']
    for j, c in enumerate(cols):
        label = str(c) if len(str(c)) <= 20 else str(c)[:19] + "\u2026"
        body.append(f'<text x="{L + j * cw + cw / 2}" y="{T - 8}" text-anchor="middle" font-size="11" {FONT}>'
                    f'{_e(label)}<title>{_e(c)}</title></text>')
    for i, r in enumerate(rows):
        body.append(f'<text x="{L - 8}" y="{T + i * rh + rh / 2 + 4}" text-anchor="end" font-size="11" {FONT}>'
                    f'P={_e(r)}</text>')
        for j, c in enumerate(cols):
            v = values.get((r, c), (math.nan, False))
            text = f"{v[0]:+.1f}%{' *' if v[1] else ''}" if _finite(v[0]) else "-"
            body.append(f'<rect x="{L + j * cw}" y="{T + i * rh}" width="{cw - 2}" height="{rh - 2}" '
                        f'fill="{_heat(v[0], scale)}"><title>{_e(c)} P={_e(r)}: {_e(text)}</title></rect>'
                        f'<text x="{L + j * cw + cw / 2}" y="{T + i * rh + rh / 2 + 4}" text-anchor="middle" '
                        f'font-size="12" {FONT}>{_e(text)}</text>')
    body.append(f'<text x="{L}" y="{H - 6}" font-size="10" {FONT}>green = better, red = worse (scale '
                f'\u00b1{scale:.0f}%), * = significant</text>')
    return _svg(W, H, body, title)
