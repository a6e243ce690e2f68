"""Differential flame graphs (SVG) and folded stacks, from a DiffResult.

SVG: one self-contained file (no fonts or links to fetch), root at the bottom,
drawn over the union of both sides' stacks. A frame's width is the mean of its
inclusive shares of A's and of B's samples (each side's samples count as 100%),
so the two sides weigh the same whatever their sample counts, widths add up
(callees never outgrow their caller), and a path present on one side only is
drawn at half its share there instead of vanishing. Its colour compares the two
shares: red where B's share is larger, blue where it is smaller, white where
equal, the intensity scaled to the largest change among frames present on both
sides; a frame on one side only is hatched (blue: only in A, red: only in B).
The legend says all this, and how much of each side is on paths absent from the
other. Each frame's tooltip (``<title>``) gives both shares and the change.
Every name is XML-escaped. Stacks follow the diff: names normalised, cut to the
``--scope`` frames, the members of each role the ranking matched drawn as one
``[role]`` frame, and (with equivalence on) arm64's exception dispatch frames
skipped (``[dispatch]`` in ``equivalence.toml``), so the two architectures'
paths merge.

Frames are nested ``<g class="f">`` elements (the call tree) carrying their two
shares (``data-a``, ``data-b``); the script of :mod:`.flamescript`, embedded in
a standalone file, uses them for search, click-to-zoom and a details line.
Without JavaScript the graph is the same, static.

Folded (``--folded PREFIX``): ``PREFIX.a.folded`` and ``PREFIX.b.folded``
hold ``stack count`` lines (FlameGraph's and inferno's input), and
``PREFIX.diff.folded`` holds ``stack countA countB`` lines (the format of
FlameGraph's difffolded.pl, read by ``flamegraph.pl`` and
``inferno-flamegraph``, which draw widths from the second count and colours
from the change between the two). Counts are the sides' samples (or, with
``--unit ns``, their weights) summed over their profiles and rounded to
integers; each stack starts with its process name where the profile knows it;
kernel frames end in ``_[k]``. In ``diff.folded`` A's counts are scaled to B's
total (all samples of each side, as the shares are), as ``difffolded.pl -n``
does, so the colours show changes of share, not of raw counts.
"""
from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from kperfdiff.render import flamescript
from kperfdiff.render.table import percent

FRAME_H = 16
WIDTH = 1200
PAD = 10
FONT = 12
CHAR_W = 7.0   # approximate width of one character at FONT px, monospace-ish
MIN_W = 0.3    # frames narrower than this (px) are not drawn
TOP = 84       # title, legend and controls above the frames
BOTTOM = 44    # details and search lines below them
RED, BLUE = "rgb(250,50,50)", "rgb(50,50,250)"
# Hatches of the frames on one side only: (pattern id, background, lines, angle).
HATCH = {"a": ("kpd-only-a", "rgb(205,212,250)", "rgb(60,80,220)", 45),
         "b": ("kpd-only-b", "rgb(250,208,204)", "rgb(220,60,50)", -45)}


class _Node:
    __slots__ = ("name", "a", "b", "kids")

    def __init__(self, name: str):
        self.name = name
        self.a = 0.0
        self.b = 0.0
        self.kids: dict[str, _Node] = {}


def _tree(folded_a: dict, folded_b: dict) -> _Node:
    root = _Node("all")
    for side, folded in (("a", folded_a), ("b", folded_b)):
        for stack, w in folded.items():
            node = root
            setattr(node, side, getattr(node, side) + w)
            for fr in stack.split(";"):
                nxt = node.kids.get(fr)
                if nxt is None:
                    nxt = node.kids[fr] = _Node(fr)
                node = nxt
                setattr(node, side, getattr(node, side) + w)
    return root


def frame_function(frame: str) -> str:
    """The function of a folded-stack frame (its kernel suffix ``_[k]`` dropped)."""
    return frame.removesuffix("_[k]")


def _colour(delta: float, scale: float) -> str:
    if scale <= 0 or delta == 0:
        return "rgb(250,250,250)"
    x = min(1.0, abs(delta) / scale)
    v = int(round(250 - 200 * x))
    return f"rgb(250,{v},{v})" if delta > 0 else f"rgb({v},{v},250)"


class _Geometry:
    """Shares of each side and the width they give a frame."""

    def __init__(self, root: _Node, total_a: float, total_b: float):
        self.ta, self.tb = total_a, total_b
        self.root_mean = self.mean(root)

    def shares(self, n: _Node) -> tuple[float, float]:
        return n.a / self.ta, n.b / self.tb

    def mean(self, n: _Node) -> float:
        sa, sb = self.shares(n)
        return (sa + sb) / 2

    def width(self, n: _Node) -> float:
        """Pixels: the root spans the usable width, every frame its mean share of the root's."""
        return (WIDTH - 2 * PAD) * self.mean(n) / self.root_mean if self.root_mean > 0 else 0.0


def _scale_depth(root: _Node, geo: _Geometry) -> tuple[float, int]:
    """The largest change of share among frames on both sides (the colour scale), and the
    depth of the deepest frame drawn."""
    scale = 0.0
    depth = 0
    stack = [(root, 0)]
    while stack:
        n, d = stack.pop()
        if geo.width(n) < MIN_W:
            continue
        depth = max(depth, d)
        if n is not root and n.a > 0 and n.b > 0:
            sa, sb = geo.shares(n)
            scale = max(scale, abs(sb - sa))
        stack.extend((k, d + 1) for k in n.kids.values())
    return scale, depth


def _defs(id_prefix: str) -> str:
    pats = []
    for pid, bg, fg, angle in HATCH.values():
        pats.append(f'<pattern id="{id_prefix}{pid}" width="6" height="6" patternUnits="userSpaceOnUse" '
                    f'patternTransform="rotate({angle})"><rect width="6" height="6" fill="{bg}"/>'
                    f'<line x1="0" y1="0" x2="0" y2="6" stroke="{fg}" stroke-width="2"/></pattern>')
    return "<defs>" + "".join(pats) + "</defs>"


def _legend(result, root: _Node, geo: _Geometry, id_prefix: str) -> list[str]:
    """Three lines under the title: what the width means, the colours, what is on one side only."""
    la, lb = result.labels
    font = 'font-family="Verdana,sans-serif" font-size="11" fill="rgb(70,70,70)"'
    out = [f'<text x="{PAD}" y="40" {font}>'
           + escape(f"width: the mean of a frame's shares of {la}'s and of {lb}'s samples (each side's "
                    f"samples count as 100%), so a path on one side only is drawn at half its share there")
           + "</text>"]
    keys = [(RED, f"larger share in {lb} than in {la}"), (BLUE, f"smaller share in {lb}"),
            (f"url(#{id_prefix}{HATCH['a'][0]})", f"only in {la}"),
            (f"url(#{id_prefix}{HATCH['b'][0]})", f"only in {lb}")]
    x = float(PAD)
    for fill, text in keys:
        out.append(f'<rect x="{x:.1f}" y="48" width="14" height="11" fill={quoteattr(fill)} '
                   f'stroke="rgb(150,150,150)" stroke-width="0.5"/>')
        out.append(f'<text x="{x + 18:.1f}" y="58" {font}>{escape(text)}</text>')
        x += 18 + 6.2 * len(text) + 16
    out.append(f'<text x="{x:.1f}" y="58" {font}>{escape(f"scope: {result.options.scope}")}</text>')
    absent = []
    a_only = sum(k.a for k in _one_side_tops(root, "a"))
    b_only = sum(k.b for k in _one_side_tops(root, "b"))
    if a_only:
        absent.append(f"{percent(a_only / geo.ta, 2, fraction=True, mark=True)} of {la} is on paths absent "
                      f"from {lb}")
    if b_only:
        absent.append(f"{percent(b_only / geo.tb, 2, fraction=True, mark=True)} of {lb} is on paths absent "
                      f"from {la}")
    if absent:
        out.append(f'<text x="{PAD}" y="76" {font}>{escape("; ".join(absent))}</text>')
    return out


def _controls(height: int) -> list[str]:
    """The script's controls and lines, hidden or empty until it runs."""
    return [
        f'<text x="{PAD}" y="20" font-family="Verdana,sans-serif" font-size="12" class="kb k-zoom" '
        'display="none">Reset zoom</text>',
        f'<text x="{WIDTH - PAD}" y="20" text-anchor="end" font-family="Verdana,sans-serif" font-size="12" '
        'class="kb k-search" display="none">Search</text>',
        f'<text x="{PAD}" y="{height - 24}" font-family="Menlo,Consolas,monospace" font-size="12" '
        'class="k-details"></text>',
        f'<text x="{PAD}" y="{height - 8}" font-family="Menlo,Consolas,monospace" font-size="12" '
        'fill="rgb(150,0,150)" class="k-matched"></text>',
    ]


def _frame_open(node: _Node, root: _Node, geo: _Geometry, scale: float, labels, x: float, y: int,
                w: float, id_prefix: str) -> str:
    """A frame's opening ``<g>`` with its tooltip, box and label (its callees follow, then ``</g>``)."""
    la, lb = labels
    sa, sb = geo.shares(node)
    delta = sb - sa
    name = "all" if node is root else frame_function(node.name)
    tip = (f"{name}\n{la}: {percent(sa, 2, fraction=True, mark=True)}\n{lb}: {percent(sb, 2, fraction=True, mark=True)}"
           f"\nchange: {percent(delta, 2, signed=True, fraction=True)} percentage points")
    if node.b == 0 or node.a == 0:
        side = "a" if node.b == 0 else "b"
        tip += f"\nonly in {la if side == 'a' else lb}"
        fill = f"url(#{id_prefix}{HATCH[side][0]})"
    else:
        fill = _colour(delta, scale)
    parts = [f'<g class="f" data-a="{sa:.4g}" data-b="{sb:.4g}"><title>{escape(tip)}</title>'
             f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{FRAME_H - 1}" fill={quoteattr(fill)}/>']
    chars = int((w - 6) / CHAR_W)
    if chars >= 3:
        label = name if len(name) <= chars else name[:chars - 2] + ".."
        parts.append(f'<text x="{x + 3:.2f}" y="{y + FRAME_H - 4}">{escape(label)}</text>')
    return "".join(parts)


def _frames(root: _Node, geo: _Geometry, scale: float, base_y: int, labels, id_prefix: str) -> list[str]:
    """Every frame at least MIN_W wide, callees nested in their caller's ``<g>``, in name order."""
    out = []
    todo: list = [(root, float(PAD), 0)]
    while todo:
        item = todo.pop()
        if item is None:
            out.append("</g>")
            continue
        node, x, d = item
        w = geo.width(node)
        if w < MIN_W:
            continue
        out.append(_frame_open(node, root, geo, scale, labels, x, base_y - (d + 1) * FRAME_H, w, id_prefix))
        todo.append(None)
        placed = []
        cx = x
        for k in sorted(node.kids.values(), key=lambda k: k.name):
            placed.append((k, cx, d + 1))
            cx += geo.width(k)
        todo.extend(reversed(placed))
    return out


def differential_svg(result, title: str | None = None, *, script: bool = True, id_prefix: str = "") -> str:
    """A differential flame graph of ``result`` (after :func:`kperfdiff.analysis.profile_diff.add_folded`).

    ``script``: embed the interactive script (a standalone file); the HTML report
    leaves it out and carries it once per page. ``id_prefix`` keeps the ids of
    the hatch patterns unique when several graphs share a page.
    """
    la, lb = result.labels
    root = _tree(result.folded_a, result.folded_b)
    geo = _Geometry(root, result.total_a or 1.0, result.total_b or 1.0)
    scale, depth = _scale_depth(root, geo)
    height = TOP + (depth + 1) * FRAME_H + BOTTOM
    title = title or f"Differential flame graph: {la} -> {lb}"
    out = [
        '<?xml version="1.0" encoding="UTF-8" standalone="no"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" class="kpd-flame" data-pad="{PAD}" data-span="{WIDTH - 2 * PAD}" '
        f'data-charw="{CHAR_W}" data-la={quoteattr(la)} data-lb={quoteattr(lb)}>',
        f"<style>{flamescript.STYLE}</style>",
        _defs(id_prefix),
        f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="rgb(255,255,255)"/>',
        f'<text x="{WIDTH / 2:.1f}" y="20" text-anchor="middle" font-family="Verdana,sans-serif" '
        f'font-size="16">{escape(title)}</text>',
        *_legend(result, root, geo, id_prefix),
        *_controls(height),
        '<g font-family="Menlo,Consolas,monospace" font-size="12">',
    ]
    if geo.root_mean <= 0:
        out.append(f'<text x="{PAD}" y="{TOP + 20}">{escape(f"no stacks in {la} or {lb} for this scope")}</text>')
    else:
        out += _frames(root, geo, scale, height - BOTTOM, (la, lb), id_prefix)
    out.append("</g>")
    if script:
        out.append(f"<script><![CDATA[{flamescript.SCRIPT}]]></script>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _one_side_tops(root: _Node, side: str) -> list:
    """The topmost frames that have weight on ``side`` ("a" or "b") and none on the other."""
    other = "b" if side == "a" else "a"
    tops = []
    stack = [root]
    while stack:
        n = stack.pop()
        for k in n.kids.values():
            if getattr(k, other) == 0 and getattr(k, side) > 0:
                tops.append(k)
            else:
                stack.append(k)
    return tops


def _count(w: float) -> int:
    return int(round(w))


def folded_text(folded: dict) -> str:
    """``stack count`` lines, sorted, zero counts left out."""
    lines = [f"{s} {_count(w)}" for s, w in sorted(folded.items()) if _count(w) > 0]
    return "\n".join(lines) + ("\n" if lines else "")


def differential_folded_text(folded_a: dict, folded_b: dict, scale_a: float = 1.0) -> str:
    """``stack countA countB`` lines over the union of both sides' stacks, A's counts multiplied
    by ``scale_a`` (B's total over A's: difffolded.pl -n), so that the colours flamegraph.pl and
    inferno draw from the two counts compare shares, not raw counts."""
    lines = []
    for s in sorted(set(folded_a) | set(folded_b)):
        ca, cb = _count(folded_a.get(s, 0.0) * scale_a), _count(folded_b.get(s, 0.0))
        if ca or cb:
            lines.append(f"{s} {ca} {cb}")
    return "\n".join(lines) + ("\n" if lines else "")


def folded_files(side_a: tuple[dict, float], side_b: tuple[dict, float]) -> dict[str, str]:
    """Suffix -> content of the files ``--folded PREFIX`` writes, from each side's (folded stacks,
    total) (:func:`kperfdiff.analysis.profile_diff.folded_sides`): ``diff.folded`` has A's counts scaled to B's total."""
    (fa, ta), (fb, tb) = side_a, side_b
    return {
        "a.folded": folded_text(fa),
        "b.folded": folded_text(fb),
        "diff.folded": differential_folded_text(fa, fb, tb / ta if ta > 0 and tb > 0 else 1.0),
    }
