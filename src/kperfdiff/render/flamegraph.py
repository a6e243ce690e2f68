"""Differential flame graphs (SVG) and folded stacks, from a DiffResult.

SVG: one self-contained file (no scripts, fonts or links to fetch), root at
the bottom. A frame's width is its inclusive weight in profile B; its colour
compares its inclusive share of all samples in B with that in A: red where
B's share is larger, blue where it is smaller, white where equal, the
intensity scaled to the largest change in the graph. Frames that exist only
in A have no width in B and are not drawn (the subtitle says how much of A
that is). Each frame's tooltip (``<title>``) gives both shares and the
change. Every name is XML-escaped. Stacks follow the diff: names
normalised, cut to the ``--scope`` frames, the members of each role the
ranking matched drawn as one ``[role]`` frame, and (with equivalence on)
arm64's exception dispatch frames skipped (``[dispatch]`` in
``equivalence.toml``), so the two architectures' paths merge.

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

FRAME_H = 16
WIDTH = 1200
PAD = 10
FONT = 12
CHAR_W = 7.0   # approximate width of one character at FONT px, monospace-ish
MIN_W = 0.3    # frames narrower than this (px) are not drawn


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


def _pct(x: float) -> str:
    return f"{x * 100:.2f}%"


def differential_svg(result, title: str | None = None) -> str:
    """A differential flame graph of ``result`` (after :func:`kperfdiff.diff.add_folded`)."""
    la, lb = result.labels
    ta = result.total_a or 1.0
    tb = result.total_b or 1.0
    root = _tree(result.folded_a, result.folded_b)
    # Largest change of share, for the colour scale.
    scale = 0.0
    depth = 0
    stack = [(root, 0)]
    while stack:
        n, d = stack.pop()
        if n.b > 0:
            depth = max(depth, d)
        if n is not root:
            scale = max(scale, abs(n.b / tb - n.a / ta))
        stack.extend((k, d + 1) for k in n.kids.values())
    usable = WIDTH - 2 * PAD
    height = (depth + 1) * FRAME_H + 90
    title = title or f"Differential flame graph: {la} -> {lb}"
    a_only = sum(k.a for k in _a_only_tops(root))
    sub = (f"width: {lb}; red: larger share in {lb}, blue: smaller (vs {la}); "
           f"scope: {result.options.scope}" + ("" if not a_only else
                                               f"; {_pct(a_only / ta)} of {la} is on paths absent from {lb}"))
    out = [
        '<?xml version="1.0" encoding="UTF-8" standalone="no"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}">',
        f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="rgb(255,255,255)"/>',
        f'<text x="{WIDTH / 2:.1f}" y="22" text-anchor="middle" font-family="Verdana,sans-serif" '
        f'font-size="16">{escape(title)}</text>',
        f'<text x="{WIDTH / 2:.1f}" y="40" text-anchor="middle" font-family="Verdana,sans-serif" '
        f'font-size="11" fill="rgb(90,90,90)">{escape(sub)}</text>',
        '<g font-family="Menlo,Consolas,monospace" font-size="12">',
    ]
    if root.b <= 0:
        out.append(f'<text x="{PAD}" y="70">{escape(f"no stacks in {lb} for this scope")}</text>')
    else:
        px_per = usable / root.b
        base_y = height - 30
        # Iterative depth-first layout, children sorted by name (FlameGraph's order).
        todo = [(root, PAD, 0)]
        while todo:
            node, x, d = todo.pop()
            w = node.b * px_per
            if w < MIN_W:
                continue
            y = base_y - (d + 1) * FRAME_H
            sa, sb = node.a / ta, node.b / tb
            delta = sb - sa
            name = "all" if node is root else frame_function(node.name)
            tip = (f"{name}\n{la}: {_pct(sa)}\n{lb}: {_pct(sb)}\nchange: {delta * 100:+.2f} percentage points")
            out.append("<g>")
            out.append(f"<title>{escape(tip)}</title>")
            out.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{FRAME_H - 1}" '
                       f'fill={quoteattr(_colour(delta, scale))} stroke="rgb(200,200,200)" stroke-width="0.3"/>')
            chars = int((w - 6) / CHAR_W)
            if chars >= 3:
                label = name if len(name) <= chars else name[:chars - 2] + ".."
                out.append(f'<text x="{x + 3:.2f}" y="{y + FRAME_H - 4}">{escape(label)}</text>')
            out.append("</g>")
            cx = x
            kids = sorted(node.kids.values(), key=lambda k: k.name)
            placed = []
            for k in kids:
                placed.append((k, cx, d + 1))
                cx += k.b * px_per
            todo.extend(reversed(placed))
    out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _a_only_tops(root: _Node) -> list:
    """The topmost frames that have weight in A and none in B (their A weight is not drawn)."""
    tops = []
    stack = [root]
    while stack:
        n = stack.pop()
        for k in n.kids.values():
            if k.b == 0 and k.a > 0:
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
    total) (:func:`kperfdiff.diff.folded_sides`): ``diff.folded`` has A's counts scaled to B's total."""
    (fa, ta), (fb, tb) = side_a, side_b
    return {
        "a.folded": folded_text(fa),
        "b.folded": folded_text(fb),
        "diff.folded": differential_folded_text(fa, fb, tb / ta if ta > 0 and tb > 0 else 1.0),
    }
