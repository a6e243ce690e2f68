"""One table model and its text, Markdown, CSV and JSON forms.

Two text styles: ``aligned`` (columns padded, as perf and hyperfine print)
and ``study`` (``a | b | c`` rows under a ``>>`` title and a ``-----`` rule,
the layout of the original kperfdiff tables).
"""
from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass, field


@dataclass
class Table:
    columns: list[str]
    rows: list[list] = field(default_factory=list)
    title: str = ""
    # Per column: "l" or "r" alignment in aligned text and Markdown.
    align: list[str] | None = None
    notes: list[str] = field(default_factory=list)

    def aligns(self) -> list[str]:
        return self.align or ["l"] + ["r"] * (len(self.columns) - 1)


def cell(v, digits: int = 2) -> str:
    """Format one value: floats with fixed digits, None/nan as '-'."""
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        return f"{v:.{digits}f}"
    return str(v)


def to_text(table: Table, style: str = "aligned") -> str:
    cells = [[cell(v) for v in row] for row in table.rows]
    out: list[str] = []
    if style == "study":
        if table.title:
            out.append(f">> {table.title}")
        out.append(" | ".join(table.columns))
        out.append("-----")
        out.extend(" | ".join(r) for r in cells)
    else:
        widths = [len(c) for c in table.columns]
        for r in cells:
            widths = [max(w, len(c)) for w, c in zip(widths, r)]
        al = table.aligns()

        def fmt(r):
            return "  ".join(c.rjust(w) if a == "r" else c.ljust(w)
                             for c, w, a in zip(r, widths, al)).rstrip()
        if table.title:
            out.append(table.title)
        out.append(fmt(table.columns))
        out.append("  ".join("-" * w for w in widths))
        out.extend(fmt(r) for r in cells)
    out.extend(table.notes)
    return "\n".join(out) + "\n"


def number(v: float | None) -> str:
    """A measured value with 4 significant digits, as lmbench prints them."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    a = abs(v)
    if a >= 1e5:
        return f"{v:.0f}"
    if a >= 1:
        return f"{v:#.4g}" if a < 1000 else f"{v:.1f}"
    return f"{v:#.4g}"


def percent(v: float | None, digits: int = 1, *, signed: bool = False, fraction: bool = False,
            mark: bool = False) -> str:
    """A percentage with ``digits`` after the point, None and NaN as '-'.

    ``v`` is in percent, or a fraction of one (multiplied by 100) with ``fraction``; ``signed`` puts a
    '+' before positive values (a change); ``mark`` puts a '%' after the number (never after '-').
    """
    if v is None or math.isnan(v):
        return "-"
    if fraction:
        v = v * 100
    return f"{v:{'+' if signed else ''}.{digits}f}{'%' if mark else ''}"


_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")


def md_escape(s: str) -> str:
    """Text safe inside a Markdown table cell and readable as plain text (a mail): pipes and
    backslashes escaped, and a ``<`` escaped with a backslash only where CommonMark would start an HTML
    tag with it (before a letter, ``/``, ``!`` or ``?``), so ``q <= 0.05`` and ``> 1`` stay as written
    and no HTML entity is ever written."""
    return _TAG_START.sub(r"\\<", s.replace("\\", "\\\\").replace("|", "\\|"))


def to_markdown(table: Table) -> str:
    out = []
    if table.title:
        out.append(f"### {md_escape(table.title)}\n")
    out.append("| " + " | ".join(md_escape(c) for c in table.columns) + " |")
    out.append("|" + "|".join("---:" if a == "r" else ":---" for a in table.aligns()) + "|")
    for r in table.rows:
        out.append("| " + " | ".join(md_escape(cell(v)) for v in r) + " |")
    for n in table.notes:
        out.append("")
        out.append(md_escape(n))
    return "\n".join(out) + "\n"


def to_csv(table: Table) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(table.columns)
    for r in table.rows:
        w.writerow(["" if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in r])
    return buf.getvalue()


def json_clean(obj):
    """Make a structure JSON-safe: NaN and infinities become null."""
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if isinstance(obj, dict):
        return {str(k): json_clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_clean(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalar
        return json_clean(obj.item())
    return obj


def to_json(obj) -> str:
    """JSON text, objects and lists indented two spaces a level, except that a list of numbers or
    strings, and each flat record in a list (an object or list of numbers, strings, booleans and
    nulls: a raw interval, a table row), take one line; NaN and infinities become null.

    The records go through json's C encoder: a `show --format json` of a run with 40,000 raw
    intervals takes a tenth of a second instead of most of one (indent=2 is pure Python)."""
    return _dump(obj, 0) + "\n"


_compact = json.JSONEncoder(allow_nan=False).encode


def _scalar(v) -> bool:
    return v is None or isinstance(v, (str, int, float))


def _flat(v) -> bool:
    return isinstance(v, (list, tuple)) and all(map(_scalar, v)) or \
        isinstance(v, dict) and all(map(_scalar, v.values()))


def _one_line(v) -> str:
    try:
        return _compact(v)
    except (ValueError, TypeError):       # NaN or infinity, or a numpy scalar, inside
        return _compact(json_clean(v))


def _dump(obj, level: int) -> str:
    pad, end = "  " * (level + 1), "\n" + "  " * level
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        return "{\n" + ",\n".join(f"{pad}{_compact(str(k))}: {_dump(v, level + 1)}" for k, v in obj.items()) + \
            end + "}"
    if isinstance(obj, (list, tuple)):
        if not obj or all(map(_scalar, obj)):
            return _one_line(list(obj))
        return "[\n" + ",\n".join(pad + (_one_line(v) if _flat(v) else _dump(v, level + 1)) for v in obj) + \
            end + "]"
    return _one_line(obj)
