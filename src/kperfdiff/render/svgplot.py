"""Small SVG plots for the report, generated in Python: no scripts, no fonts to fetch.

Every function returns one ``<svg>`` element as a string; every label is
XML-escaped. Sizes are fixed in pixels and the viewBox lets the browser scale.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

from kperfdiff.core import stats

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


# -- axis units ---------------------------------------------------------------------
# A value axis shows its numbers in the unit that suits their magnitude: 2500 ns/op as
# "2.5 µs", 0.07 GUP/s as "70 MUP/s", 3e6 instructions as "3 M".
TIME_UNITS = [("ns", 1e-9), ("\u00b5s", 1e-6), ("ms", 1e-3), ("s", 1.0)]
TIME_NAMES = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0}
BYTE_UNITS = [("B", 1), ("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30), ("TiB", 1 << 40)]
BYTE_NAMES = {"B": 1, "bytes": 1, "byte": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
SI_PREFIXES = [("n", 1e-9), ("\u00b5", 1e-6), ("m", 1e-3), ("", 1.0), ("k", 1e3), ("M", 1e6), ("G", 1e9),
               ("T", 1e12)]
SI_NAMES = {p: m for p, m in SI_PREFIXES if p} | {"u": 1e-6}


@dataclass(frozen=True)
class AxisUnit:
    """How a value axis shows its numbers: ``value * factor`` followed by ``suffix`` on each tick
    ("250 \u00b5s"), and ``title`` beside the axis ("\u00b5s/op")."""

    factor: float
    suffix: str
    title: str

    def label(self, v: float, step: float) -> str:
        """A tick's label, with as many decimals as the step needs and never an exponent."""
        return f"{_plain(v * self.factor, step * self.factor)}{' ' + self.suffix if self.suffix else ''}"

    def value(self, v: float) -> str:
        """One value with 4 significant digits in this unit ("2.584 \u00b5s")."""
        x = v * self.factor
        d = max(0, 3 - math.floor(math.log10(abs(x)))) if _finite(x) and x != 0 else 0
        return f"{x:.{d}f}{' ' + self.suffix if self.suffix else ''}"


def _pick(choices: list[tuple[str, float]], magnitude: float) -> tuple[str, float]:
    """The largest unit in which ``magnitude`` (in base units) is still at least 1."""
    best = choices[0]
    for name, size in choices:
        if magnitude >= size * (1 - 1e-9):
            best = (name, size)
    return best


def axis_unit(unit: str | None, values) -> AxisUnit:
    """The unit an axis of ``values`` (in ``unit``) is best read in, from their largest magnitude.

    Times (ns, us, ms, s, with any "/op" after them) become ns, \u00b5s, ms or s; bytes B, KiB,
    MiB, GiB; a rate with an SI prefix (GUP/s, MB/s) and any other unit get an SI prefix
    (n .. T). A unit that is a word (instructions, samples) keeps its name for the axis title and
    puts the prefix alone on the ticks.
    """
    unit = (unit or "").strip()
    mags = [abs(v) for v in values if _finite(v) and v != 0]
    mag = max(mags) if mags else 0.0
    head, sep, tail = unit.partition("/")
    tail = sep + tail
    if head in TIME_NAMES:
        base = TIME_NAMES[head]
        name, size = _pick(TIME_UNITS, mag * base) if mag else (head, base)
        return AxisUnit(base / size, name, name + tail)
    if head in BYTE_NAMES:
        base = BYTE_NAMES[head]
        name, size = _pick(BYTE_UNITS, mag * base) if mag else (head, base)
        return AxisUnit(base / size, name, name + tail)
    base, rest = 1.0, head
    if tail and len(head) > 1 and head[0] in SI_NAMES:       # GUP/s: giga updates per second
        base, rest = SI_NAMES[head[0]], head[1:]
    # below 1 only for a unit that came with a prefix (0.07 GUP/s -> 70 MUP/s, not "70 m samples")
    choices = SI_PREFIXES if base != 1.0 else [(p, m) for p, m in SI_PREFIXES if m >= 1]
    prefix, size = _pick(choices, mag * base) if mag else ("", 1.0)
    if not unit or " " in unit or (rest.isalpha() and len(rest) > 3 and not tail):   # a word or none
        return AxisUnit(base / size, prefix, f"{prefix} {unit}".strip() if unit else "")
    return AxisUnit(base / size, prefix + rest + tail, prefix + rest + tail)


def _per(unit: str, op: str, counted: bool) -> str:
    """What follows a unit's quantity: " per 4 KB page" for ".../op" with an ``op``, else as written."""
    _head, sep, tail = unit.partition("/")
    return f" per {op}" if op and tail == "op" else (" per op" if counted and tail == "op" else sep + tail)


def unit_title(unit: str | None, op: str = "", counted: bool = False) -> str:
    """A stored unit as tables print it, unscaled: "ns per 4 KB page" for ns/op of a 4 KB page;
    ``counted`` (a deterministic guest's virtual ns, one per instruction): "instructions per fork"."""
    unit = (unit or "").strip()
    head = unit.partition("/")[0]
    return ("instructions" if counted and head == "ns" else head) + _per(unit, op, counted)


def quantity_unit(unit: str | None, values, *, op: str = "", counted: bool = False) -> AxisUnit:
    """The one unit a quantity is shown in, in its table and in its plot alike: scaled so that the
    smallest of ``values`` is at least 1 (0.115 GUP/s as 115.4 MUP/s; 67 and 1278 ns/op stay ns),
    its title saying what one operation is when ``op`` is known ("ns per 4 KB page" for "ns/op").
    ``counted``: the values are a deterministic guest's virtual ns, one per instruction, so a time
    per operation is shown as instructions ("instructions per fork")."""
    unit = (unit or "").strip()
    head, sep, tail = unit.partition("/")
    per = _per(unit, op, counted)
    if counted and head in TIME_NAMES:
        return AxisUnit(TIME_NAMES[head] / 1e-9, "", "instructions" + per)
    mags = [abs(v) for v in values if _finite(v) and v != 0]
    ax = axis_unit(unit, [min(mags)]) if mags else AxisUnit(1.0, head, unit)
    if sep and ax.title.endswith(sep + tail):
        return AxisUnit(ax.factor, ax.suffix, ax.title[:-len(sep + tail)] + per)
    return ax


def _plain(v: float, step: float) -> str:
    """``v`` in positional notation with the decimals a tick ``step`` needs (0.25 -> 2)."""
    d = 0
    while d < 9 and step > 0 and abs(step * 10 ** d - round(step * 10 ** d)) > 1e-6 * step * 10 ** d:
        d += 1
    out = f"{v:.{d}f}"
    return "0" if float(out) == 0 else out


CHAR_W = 5.4     # px: the width of an average character at font-size 10 (sans-serif)


def _caption_lines(text: str, width: float) -> list[str]:
    """A caption as lines that fit ``width`` pixels: whole clauses ("; ") per line when too long."""
    if len(text) * CHAR_W <= width:
        return [text]
    parts = text.split("; ")
    return [p + (";" if i < len(parts) - 1 else "") for i, p in enumerate(parts)]


def _caption(lines: list[str], x: float, y_last: float) -> str:
    """What a plot's marks mean (its whiskers above all), under the plot, the last line at ``y_last``."""
    y0 = y_last - 12 * (len(lines) - 1)
    return "".join(f'<text x="{x}" y="{y0 + 12 * i}" font-size="10" fill="#444" {FONT} class="caption">{_e(t)}</text>'
                   for i, t in enumerate(lines))


def change_bars(title: str, groups: list[str], series: list[str],
                values: dict[tuple[str, str], tuple[float, float, float, bool]], *,
                caption: str = "bar: change; whiskers: confidence interval of the change") -> str:
    """Bars of % change (positive = better) with confidence-interval whiskers.

    ``values[(group, series)] = (change, low, high, significant)``; ``caption`` says what the
    bars and whiskers are (the caller knows the interval's confidence and method).
    """
    W, L, R, T = 560, 60, 12, 30
    cap = _caption_lines(caption, W - 16)
    H, B = 262 + 12 * len(cap), 48 + 12 * len(cap)
    pts = [v for v in values.values() if _finite(v[0])]
    lo = min([0.0] + [min(v[0], v[1]) if _finite(v[1]) else v[0] for v in pts])
    hi = max([0.0] + [max(v[0], v[2]) if _finite(v[2]) else v[0] for v in pts])
    lo, hi, step = _nice_range(lo, hi)
    ph = H - T - B
    pw = W - L - R
    pct = AxisUnit(1.0, "%", "%")

    def y(v):
        return T + (hi - v) / (hi - lo) * ph
    body = [f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="13" {FONT}>{_e(title)}</text>']
    for t in _ticks(lo, hi, step):
        body.append(f'<line x1="{L}" x2="{W - R}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="#ddd"/>'
                    f'<text x="{L - 4}" y="{y(t) + 4:.1f}" text-anchor="end" font-size="10" {FONT} class="tick">'
                    f'{_e(pct.label(t, step).replace(" ", ""))}</text>')
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
    body += _legend(series, L, H - 12 - 12 * len(cap))
    body.append(_caption(cap, 8, H - 6))
    return _svg(W, H, body, title)


def _ticks(lo: float, hi: float, step: float) -> list[float]:
    """lo, lo + step, ... hi, each rounded to the step (no 0.30000000000000004)."""
    n = int(round((hi - lo) / step))
    return [round(lo + i * step, 12) for i in range(n + 1)]


def _title_and_value_axis(title: str, ax, lo: float, hi: float, step: float, y, *, W, L, R, T, ph) -> list[str]:
    """A plot's title, its horizontal grid lines with their tick labels, and the value axis's title."""
    body = [f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="13" {FONT}>{_e(title)}</text>']
    for t in _ticks(lo * ax.factor, hi * ax.factor, step * ax.factor):
        v = t / ax.factor
        body.append(f'<line x1="{L}" x2="{W - R}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eee"/>'
                    f'<text x="{L - 4}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="10" {FONT} class="tick">'
                    f'{_e(ax.label(v, step))}</text>')
    body.append(f'<text x="12" y="{T + ph / 2:.1f}" font-size="11" {FONT} transform="rotate(-90 12 {T + ph / 2:.1f})" '
                f'text-anchor="middle" class="axis">{_e(ax.title)}</text>')
    return body


def _legend(series: list[str], x0: float, y0: float) -> list[str]:
    out = []
    x = x0
    for i, s in enumerate(series):
        out.append(f'<rect x="{x:.1f}" y="{y0 - 9}" width="10" height="10" fill="{PALETTE[i % len(PALETTE)]}"/>'
                   f'<text x="{x + 14:.1f}" y="{y0}" font-size="11" {FONT}>{_e(s)}</text>')
        x += 24 + 7 * len(str(s))
    return out


def scaling(title: str, unit: str, xs: list[int], series: dict[str, list[tuple[int, float, float, float]]], *,
            caption: str = "point: centre; whiskers: low-high", ax: AxisUnit | None = None) -> str:
    """A centre per core count and series, with whiskers from low to high, on an axis in the unit
    that suits the values' magnitude (:func:`axis_unit`), or in ``ax`` (the unit its table shows,
    :func:`quantity_unit`); ``caption`` says what the points and the whiskers are.

    ``series[name] = [(cores, centre, low, high), ...]``, values in ``unit``.
    """
    W, L, R, T = 560, 78, 12, 30
    cap = _caption_lines(caption, W - 16)
    H, B = 262 + 12 * len(cap), 48 + 12 * len(cap)
    vals = [v for pts in series.values() for p in pts for v in p[1:] if _finite(v)]
    ax = ax or axis_unit(unit, vals)
    if not vals:
        vals = [0.0, 1.0 / ax.factor]
    # ticks fall on round numbers of the unit shown
    lo, hi, step = _nice_range(min(0.0, min(vals)) * ax.factor, max(vals) * ax.factor)
    lo, hi, step = lo / ax.factor, hi / ax.factor, step / ax.factor
    ph, pw = H - T - B, W - L - R
    xs = sorted(xs) or [1]

    def xp(c):
        return L + (xs.index(c) + 0.5) / len(xs) * pw

    def y(v):
        return T + (hi - v) / (hi - lo) * ph
    body = _title_and_value_axis(title, ax, lo, hi, step, y, W=W, L=L, R=R, T=T, ph=ph)
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
                        f'{_e(c)} {"core" if c == 1 else "cores"}: {_e(ax.value(m))}</title></circle>')
    body += _legend(list(series), L, H - 12 - 12 * len(cap))
    body.append(_caption(cap, 8, H - 6))
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


HEAT_FLOOR = 5.0      # % : the colour scale never spans less than +-5%


def heat_bound(changes) -> tuple[float, bool]:
    """The colour scale's bound (in %) for cells of these changes, and whether it clips some.

    A cell whose |change| lies beyond Tukey's upper fence of all |change| (Q3 + 1.5 IQR, the usual
    outlier cut; with 4 cells or more) is an outlier; the bound is the largest |change| that is
    not, at least ``HEAT_FLOOR``. One cell far beyond the others (a +900% beside a handful of
    +-5..30%) is then shown at full colour and marked instead of fading all the others.
    """
    a = sorted(abs(v) for v in changes if _finite(v))
    if not a:
        return HEAT_FLOOR, False
    if len(a) >= 4:
        s = stats.summarize(a)       # quartiles interpolated between order statistics (numpy's default)
        q1, q3 = s.q1, s.q3
        inside = [v for v in a if v <= q3 + 1.5 * (q3 - q1)]
        bound = max(inside[-1], HEAT_FLOOR)
        if bound < a[-1]:
            return bound, True
    return max(a[-1], HEAT_FLOOR), False


def heatmap(title: str, rows: list, cols: list[str], values: dict[tuple, tuple[float, bool]]) -> str:
    """The improvement table as a heat map: green = better, red = worse, * = significant; the colour
    scale is clipped at :func:`heat_bound`, cells beyond it at full colour with a black outline."""
    cw, rh, L, T = 130, 28, 70, 60
    W = max(L + cw * max(len(cols), 1) + 10, 520)
    H = T + rh * max(len(rows), 1) + 38
    scale, clipped = heat_bound(v[0] for v in values.values())
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
            beyond = _finite(v[0]) and abs(v[0]) > scale
            text = f"{v[0]:+.1f}%{' *' if v[1] else ''}" if _finite(v[0]) else "-"
            outline = ' stroke="#000" stroke-width="2" class="beyond"' if beyond else ""
            body.append(f'<rect x="{L + j * cw + 1}" y="{T + i * rh + 1}" width="{cw - 4}" height="{rh - 4}" '
                        f'fill="{_heat(v[0], scale)}"{outline}><title>{_e(c)} P={_e(r)}: {_e(text)}'
                        f'{" (beyond the colour scale)" if beyond else ""}</title></rect>'
                        f'<text x="{L + j * cw + cw / 2}" y="{T + i * rh + rh / 2 + 4}" text-anchor="middle" '
                        f'font-size="12" {FONT}>{_e(text)}</text>')
    scale_text = (f"colour scale clipped at \u00b1{scale:.0f}%, the largest |change| within Tukey's fence "
                  f"(Q3 + 1.5 IQR); outlined cells lie beyond it, at full colour" if clipped else
                  f"colour scale \u00b1{scale:.0f}% (the largest |change|, at least {HEAT_FLOOR:.0f}%)")
    body.append(f'<text x="8" y="{H - 20}" font-size="10" {FONT} class="legend">green = better, red = worse, '
                f'* = significant</text>')
    body.append(f'<text x="8" y="{H - 6}" font-size="10" {FONT} class="legend">{_e(scale_text)}</text>')
    return _svg(W, H, body, title)


def history(title: str, unit: str, points: list[tuple[str, float, float, float]], changes: list[int],
            levels: list[tuple[int, int, float]], *, outliers: tuple[int, ...] = (),
            caption: str = "point: centre; whiskers: low-high; dashed line: change point",
            ax: AxisUnit | None = None) -> str:
    """A series in time order: one point per entry, ``points[i] = (label, centre, low, high)``; a
    dashed vertical line before each index of ``changes``; a horizontal line over each ``levels``
    entry (first index, end index, value): the level of a segment between change points; the points
    of ``outliers`` hollow (set aside, in no level); the value axis in ``ax`` when given (the unit the
    table beside it prints), else in the unit that suits the values. The x axis
    is the order of the points (runs are not evenly spaced in time); every label is in its point's
    tooltip, a few under the axis."""
    W, L, R, T = 760, 78, 16, 30
    cap = _caption_lines(caption, W - 16)
    H, B = 282 + 12 * len(cap), 52 + 12 * len(cap)
    vals = [v for p in points for v in p[1:] if _finite(v)] + [v for *_, v in levels if _finite(v)]
    ax = ax or axis_unit(unit, vals)
    if not vals:
        vals = [0.0, 1.0 / ax.factor]
    lo, hi, step = _nice_range(min(vals) * ax.factor, max(vals) * ax.factor)
    lo, hi, step = lo / ax.factor, hi / ax.factor, step / ax.factor
    ph, pw = H - T - B, W - L - R
    n = max(len(points), 1)

    def x(i: float) -> float:
        return L + (i + 0.5) / n * pw

    def y(v: float) -> float:
        return T + (hi - v) / (hi - lo) * ph
    body = _title_and_value_axis(title, ax, lo, hi, step, y, W=W, L=L, R=R, T=T, ph=ph)
    every = max(1, math.ceil(len(points) / 8))
    for i, p in enumerate(points):
        if i % every == 0 or (i == len(points) - 1 and i % every >= every / 2):
            body.append(f'<text x="{x(i):.1f}" y="{H - B + 16}" text-anchor="middle" font-size="10" {FONT}>'
                        f'{_e(p[0].split(" (")[0])}</text>')
    for i in changes:
        body.append(f'<line x1="{x(i - 0.5):.1f}" x2="{x(i - 0.5):.1f}" y1="{T}" y2="{T + ph}" stroke="{PALETTE[3]}" '
                    f'stroke-dasharray="5,3" class="change"/>')
    for first, end, v in levels:
        if _finite(v):
            body.append(f'<line x1="{x(first - 0.4):.1f}" x2="{x(end - 0.6):.1f}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                        f'stroke="{PALETTE[1]}" stroke-width="2" class="level"/>')
    col = PALETTE[0]
    ok = [(i, p) for i, p in enumerate(points) if _finite(p[1])]
    if len(ok) > 1:
        body.append(f'<polyline fill="none" stroke="{col}" stroke-opacity="0.5" points="'
                    + " ".join(f"{x(i):.1f},{y(p[1]):.1f}" for i, p in ok) + '"/>')
    for i, (label, m, low, high) in ok:
        if _finite(low, high):
            body.append(f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{y(high):.1f}" y2="{y(low):.1f}" stroke="{col}"/>')
        fill = f'fill="white" stroke="{PALETTE[3]}" stroke-width="1.5"' if i in outliers else f'fill="{col}"'
        body.append(f'<circle cx="{x(i):.1f}" cy="{y(m):.1f}" r="3" {fill}><title>{_e(label)}: '
                    f'{_e(ax.value(m))}{" (outlier, set aside)" if i in outliers else ""}</title></circle>')
    body.append(_caption(cap, 8, H - 6))
    return _svg(W, H, body, title)
