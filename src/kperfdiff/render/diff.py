"""DiffResult -> text, Markdown, CSV or JSON.

The text is aligned columns, each side's share, the signed delta B - A and
the ratio B/A, then the symbol; a role row's members are indented under it::

    Common kernel functions: top 5 of 120, ranked by the size of the delta (% of all samples)
    x86_64  arm64   delta    B/A  symbol
    ------  -----  ------  -----  ------
      0.47   1.25   +0.78   2.7x  [TLB flush]
      0.47   0.00   -0.47  0.00x    flush_tlb_mm_range

With significance tested (2+ profiles per side), a row that is not
significant ends with `` ~``. Where the time is (a note when the ranked
scope holds little of the samples), the columns' legend and the
significance legend close the output once; the method text with ``explain``.
Renderers return strings; they do no I/O.
"""
from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

from kperfdiff.render.table import Table, md_escape, number, to_csv, to_json, to_markdown, to_text

if TYPE_CHECKING:  # types only: the renderer needs nothing of the diff stage at run time
    from kperfdiff.analysis.profile_diff import DiffResult, Row, SideInfo

DIFF_VERSION = 1     # of the JSON document

NOT_SIGNIFICANT = "~"

# the name column's header per --sort: functions, DSOs or process names
ROW_NAME = {"sym": "symbol", "dso": "dso", "comm": "process"}


def legend(result: DiffResult) -> str:
    conf = f"{result.options.confidence:.0%}"
    return f"{NOT_SIGNIFICANT} not significant (Welch {conf} interval contains 0 or BH q >= {result.options.alpha:g})"


def _scope_word(result: DiffResult) -> str:
    """What the rows are, as section titles name them: functions of the scope, or (--sort) DSOs or
    processes."""
    o = result.options
    if o.sort == "comm":
        return "processes"
    what = "DSOs" if o.sort == "dso" else "functions"
    return {"kernel": f"kernel {what}", "user": f"user {what}", "all": what}[o.scope]


def _samples_word(result: DiffResult) -> str:
    """What a share is of: all samples, or the samples perf report's filters kept (--comm...)."""
    return "the kept" if result.side_a.filters or result.side_b.filters else "all"


def _qualifier(result: DiffResult) -> str:
    q = []
    if result.options.children:
        q.append("children")
    if result.options.per_op:
        q.append(f"{result.unit.replace('/op', '')} per operation")
    return f" ({', '.join(q)})" if q else ""


def _base(path: str) -> str:
    return path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] or path


def symbols_words(sym: dict | None) -> str:
    """A profile's kernel symbol source and how it matched the recording, as a side's line ends."""
    if sym is None:
        return "as named in the file"
    if not sym.get("source"):
        return sym.get("how") or "none"
    return f"{_base(sym['source'])} ({sym.get('how') or sym.get('matched')})"


def side_line(letter: str, side: SideInfo) -> str:
    """One side of a diff in a line: its file(s), event, samples, where the time is (kernel and user
    shares) and kernel symbols, e.g. ``A: tiny.perf.data, cpu-clock, 71 samples, 64% kernel, 36% user,
    symbols: kallsyms.gz (build id ... match)``."""
    n = len(side.sources)
    files = _base(side.sources[0]) if n == 1 else f"{n} profiles ({_base(side.sources[0])}, ...)"
    events = ", ".join(dict.fromkeys(side.events)) or "?"
    share = side.kernel_fraction
    syms = "; ".join(dict.fromkeys(symbols_words(s) for s in side.symbols)) or symbols_words(None)
    label = f" ({side.label})" if side.label else ""
    samples = (f"{side.kept_of[0]:,} of {side.kept_of[1]:,} samples kept by {' '.join(side.filters)}"
               if side.filters else f"{sum(side.samples):,} samples")
    return (f"{letter}{label}: {files}, {events}, {samples}, "
            + (f"{share:.0%} kernel, {1 - share:.0%} user, " if share is not None else "") + f"symbols: {syms}")


def side_lines(result: DiffResult) -> list[str]:
    """The lines every diff output starts with, one per side."""
    return [side_line("A", result.side_a), side_line("B", result.side_b)]


def summary(result: DiffResult) -> dict:
    """Where the time is, per side (samples, kernel and user shares, 0-1), and the scope note."""
    def side(s):
        k = s.kernel_fraction
        return {"samples": sum(s.samples), "kernel_share": k, "user_share": None if k is None else 1 - k}
    return {"a": side(result.side_a), "b": side(result.side_b), "note": result.scope_note or None}


def _top(rows: list[Row], n: int) -> list[Row]:
    return rows if n == 0 else rows[:n]


def _names(a: list[str], b: list[str], la: str, lb: str) -> str:
    """The original names of a row per side, once when both sides have the same names
    (``clear_page_erms``; ``memset_erms, memset``)."""
    if a and a == b:
        return ", ".join(a)
    return "; ".join(f"{label}: {', '.join(names)}" for label, names in ((la, a), (lb, b)) if names)


def _symbol_cell(row: Row, result: DiffResult, *, members: bool = False) -> str:
    """The row's name, with the original names on each side when a role or a rule merged
    different ones: ``sys_clone (arm64: __arm64_sys_clone; x86_64: __x64_sys_clone)``, and one name
    when both sides have the same: ``clear_page (clear_page_erms)``. ``members``: a role row's
    members are shown as sub-rows (:func:`member_rows`), so its cell is the role alone."""
    if row.role == "inferred":
        return f"{row.symbol} (inferred twins)"
    if row.role and members and (row.member_values_a or row.member_values_b):
        return row.symbol
    a, b = (row.members_a, row.members_b) if row.role else (row.names_a, row.names_b)
    if not row.role and not (a or b):
        return row.symbol
    return f"{row.symbol} ({_names(a, b, *result.labels)})"


def member_rows(row: Row) -> list[tuple[str, float, float]]:
    """A role row's members as (name, value A, value B), largest first (0 where a side lacks it),
    those with a value on at least one side (a member only on the stacks, without weight, is left out)."""
    va, vb = dict(row.member_values_a), dict(row.member_values_b)
    names = list(dict.fromkeys([n for n, _ in row.member_values_a] + [n for n, _ in row.member_values_b]))
    names.sort(key=lambda n: -max(va.get(n, 0.0), vb.get(n, 0.0)))
    return [(n, va.get(n, 0.0), vb.get(n, 0.0)) for n in names if va.get(n) or vb.get(n)]


def signed(v: float | None) -> str:
    """A change as perf diff prints its Delta: ``+6.15``, ``-0.29``."""
    return "-" if v is None or v != v else f"{v:+.2f}"


def times(r: float | None) -> str:
    """A ratio B/A: ``5.6x``, ``0.09x``, ``-`` where A is 0."""
    if r is None or r != r:
        return "-"
    if r >= 10:
        return f"{r:.0f}x"
    return f"{r:.1f}x" if r >= 1 else f"{r:.2f}x"


def ratio_cell(result: DiffResult, a: float, b: float) -> str:
    """The B/A column of values ``a`` and ``b``: ``new`` or ``gone`` where one side is under the
    sampling's resolution and the other is not (DiffResult.new_or_gone), else the ratio."""
    return result.new_or_gone(a, b) or times(b / a if a else None)


_RANKED_BY = {"absdiff": "the size of the delta", "delta": "the delta", "ratio": "the size of log B/A",
              "wdiff": "wdiff"}


def _count(shown: int, total: int) -> str:
    if not total:
        return "none"
    return f"all {total}" if shown >= total else f"top {shown} of {total}"


def tables(result: DiffResult, *, extra: bool = False, mark: bool = False, members: str | None = None) -> list[Table]:
    """The three sections as tables: each side's value, the signed delta B - A and the ratio B/A, then
    the symbol (last, so long names do not push the numbers apart). ``extra`` adds interval and q
    columns when tested; ``mark`` appends `` ~`` to the symbol of rows that are not significant;
    ``members`` (a prefix, e.g. two spaces) adds a role row's members as sub-rows under it."""
    la, lb = result.labels
    n = result.options.top
    per_op = result.options.per_op
    unit = f" ({result.unit})" if per_op else f" (% of {_samples_word(result)} samples)"
    words = _scope_word(result)
    qual = _qualifier(result)
    sig = result.significance and extra
    wdiff = result.options.compute == "wdiff"
    out = []

    def sym(r: Row) -> str:
        name = _symbol_cell(r, result, members=members is not None)
        return f"{name} {NOT_SIGNIFICANT}" if mark and r.significant is False else name

    def tail(r: Row | None) -> list:
        if not sig:
            return []
        if r is None:
            return [None] * 3
        return [r.ci[0] if r.ci else None, r.ci[1] if r.ci else None, r.q]

    sig_cols = ["ci low (B-A)", "ci high (B-A)", "q"] if sig else []
    shown = _top(result.common, n)
    name_col = ROW_NAME[result.options.sort]
    t = Table(columns=[la, lb, "delta", "B/A"] + (["wdiff"] if wdiff else []) + sig_cols + [name_col],
              title=f"Common {words}{qual}: {_count(len(shown), len(result.common))}, ranked by "
                    f"{_RANKED_BY[result.options.compute]}{unit}" if shown else f"Common {words}{qual}: none",
              align=["r"] * (4 + wdiff + len(sig_cols)) + ["l"])
    for r in shown:
        t.rows.append([r.value_a, r.value_b, signed(r.delta), ratio_cell(result, r.value_a, r.value_b)]
                      + ([r.score] if wdiff else [])
                      + tail(r) + [sym(r)])
        if members is not None and r.role and r.role != "inferred":
            for name, a, b in member_rows(r):
                t.rows.append([a, b, signed(b - a), ratio_cell(result, a, b)] + ([None] if wdiff else [])
                              + tail(None) + [members + name])
    out.append(t)
    for label, rows, which in ((la, result.only_a, "a"), (lb, result.only_b, "b")):
        shown = _top(rows, n)
        t = Table(columns=[label] + sig_cols + [name_col],
                  title=f"{words[:1].upper()}{words[1:]} only in {label}{qual}: {_count(len(shown), len(rows))}"
                        f"{unit if shown else ''}",
                  align=["r"] * (1 + len(sig_cols)) + ["l"])
        for r in shown:
            t.rows.append([r.value_a if which == "a" else r.value_b] + tail(r) + [sym(r)])
        out.append(t)
    return out


def columns_legend(result: DiffResult) -> str:
    """What the columns of the tables are, in one line."""
    la, lb = result.labels
    if result.options.per_op:
        what = result.unit if result.unit.endswith("/op") else f"{result.unit} per operation"
    else:
        what = f"share of {_samples_word(result)} samples (%)"
    words = (f"columns: {la} (A), {lb} (B): {what}{', children (inclusive)' if result.options.children else ''}; "
             f"delta: B - A{' in points' if not result.options.per_op else ''}; B/A: ratio (- where A is 0)")
    if result.options.compute == "wdiff":
        wa, wb = result.options.wdiff_weights
        words += f"; wdiff: {wb:g}*B - {wa:g}*A"
    if any(r.role and r.role != "inferred" for r in _top(result.common, result.options.top)):
        words += "; indented rows: a role's members with their own values"
    if any(result.new_or_gone(r.value_a, r.value_b) for r in _top(result.common, result.options.top)):
        words += f"; new/gone: A/B under {_resolution_words(result)}, which sampling cannot tell from none"
    return words


def _resolution_words(result: DiffResult) -> str:
    """Each side's resolution, as the legend names it: ``3.0 samples' worth (0.85% on A, 0.86% on B)``."""
    unit = f" {result.unit}" if result.options.per_op else "%"
    samples = -math.log(1 - result.options.confidence)
    return (f"{samples:.1f} samples' worth ({number(result.side_a.resolution)}{unit} on A, "
            f"{number(result.side_b.resolution)}{unit} on B)")


def _evidence_text(t) -> str:
    parts = [f"{e.relation} {e.context} {e.fraction_a:.0%}/{e.fraction_b:.0%}" for e in t.evidence]
    if not t.accepted and t.runner_up:
        parts.append(f"ambiguous: also {t.runner_up[1]} ({t.runner_up[2]:.2f})")
    return "; ".join(parts)


def twins_table(result: DiffResult) -> Table | None:
    """The inferred twins section, or None when inference did not run."""
    if not result.inferred:
        return None
    la, lb = result.labels
    n = result.options.top
    verdict = ("merged into the common list (--accept-inferred)" if result.options.accept_inferred
               else "not merged; --accept-inferred merges the accepted ones")
    t = Table(columns=["score", la, f"{la} %", lb, f"{lb} %", "match", "evidence (context: share of each side's samples)"],
              title=f"Inferred twins among the side-specific functions: matching callers/callees, score 0-1; "
                    f"{verdict}",
              align=["r", "l", "r", "l", "r", "l", "l"])
    for tw in _top([tw for tw in result.twins if tw.accepted], n):
        t.rows.append([tw.score, tw.a, tw.share_a, tw.b, tw.share_b, "accepted", _evidence_text(tw)])
    return t


def inlined_table(result: DiffResult) -> Table | None:
    """Side-specific functions the other side most likely inlined into a shared caller."""
    if not result.inferred or not result.inlined:
        return None
    la, lb = result.labels
    n = result.options.top
    t = Table(columns=["%", "function", "specific to", "called from", "why inlined on the other side"],
              title="Side-specific functions the other side most likely compiled into their caller",
              align=["r", "l", "l", "l", "l"])
    for i in _top(result.inlined, n):
        here, there = (la, lb) if i.side == "a" else (lb, la)
        if i.callee is not None:
            why = f"{there} calls {i.callee} from {i.caller} directly"
        else:
            why = f"{i.caller}'s own time: {i.caller_self[1]:.2f}% on {there}, {i.caller_self[0]:.2f}% on {here}"
        t.rows.append([i.share, i.function, here, f"{i.caller} ({i.caller_fraction:.0%})", why])
    return t


def counted_line(result: DiffResult) -> str:
    """The exact instructions per operation the workers counted, per side, or ""."""
    sides = []
    for s in (result.side_a, result.side_b):
        if s.instructions_per_op:
            k = sum(c[0] for c in s.instructions_per_op) / len(s.instructions_per_op)
            u = sum(c[1] for c in s.instructions_per_op) / len(s.instructions_per_op)
            sides.append(f"{s.label}: kernel {k:,.0f}, user {u:,.0f}")
    if not sides:
        return ""
    return "exact instructions per operation (counted by the worker): " + "; ".join(sides)


def twins_footnote(result: DiffResult) -> str:
    """One line on the candidate pairs the twins section leaves out, or ""."""
    n = sum(1 for tw in result.twins if not tw.accepted)
    if not n:
        return ""
    return (f"{n} more candidate pair(s) scored 0.5 or more but are ambiguous or thinly sampled "
            f"(several functions share those callers, or fewer than 10 samples); --format json lists them")


def twins_map(result: DiffResult) -> str:
    """The accepted inferred twins as an equivalence map (TOML [[role]] tables) to review, edit and
    pass back with --map."""
    la, lb = result.labels
    keys = [result.side_a.arch or "a", result.side_b.arch or "b"]
    if keys[0] == keys[1]:
        keys = ["a", "b"]
    lines = [f"# Inferred twins of `kperfdiff diff` ({la} vs {lb}): accepted pairs, as [[role]] tables.",
             "# Review them, delete what is wrong, and pass the file back with --map.", "version = 1", ""]
    for tw in result.twins:
        if not tw.accepted:
            continue
        lines += ["[[role]]", f"name = {json.dumps(f'{tw.a} / {tw.b}')}",
                  f"note = {json.dumps(f'inferred, score {tw.score:.2f}: ' + _evidence_text(tw))}",
                  f"{keys[0]} = [{json.dumps(_bare(tw.a))}]", f"{keys[1]} = [{json.dumps(_bare(tw.b))}]", ""]
    return "\n".join(lines)


def _bare(name: str) -> str:
    """A function name without the "[k] " / "[.] " prefix of --scope all."""
    return name[4:] if name[:1] == "[" and name[2:4] == "] " else name


def to_study_text(result: DiffResult, explain: bool = False) -> str:
    """The text tables: aligned columns, numbers right-aligned, a role's members indented under it;
    where the time is and the legend once at the end; the method with ``explain``."""
    parts = side_lines(result)
    for t in tables(result, mark=True, members="  "):
        parts.append("")
        parts.extend(to_text(t).splitlines() if t.rows else [t.title])
    tw = twins_table(result)
    if tw is not None:
        parts.append("")
        if tw.rows:
            parts.extend(to_text(tw).splitlines())
        else:
            parts.append(f"{tw.title.split(':')[0]}: none accepted")
        if foot := twins_footnote(result):
            parts.append(foot)
    inl = inlined_table(result)
    if inl is not None:
        parts.append("")
        parts.extend(to_text(inl).splitlines())
    parts.append("")
    if result.scope_note:
        parts.append(f"Note: {result.scope_note}.")
    if line := counted_line(result):
        parts.append(line)
    parts.append(columns_legend(result))
    if result.significance:
        parts.append(legend(result))
    if explain:
        parts.append(f"method: {result.method}")
    return "\n".join(parts) + "\n"


def to_markdown_text(result: DiffResult) -> str:
    out = ["".join(f"- {md_escape(line)}\n" for line in side_lines(result))]
    if result.scope_note:
        out.append(f"**Note:** {md_escape(result.scope_note)}.\n")
    out += [to_markdown(t) if t.rows else f"### {md_escape(t.title)}\n"
            for t in tables(result, extra=True, mark=True, members="\u21b3 ")]
    tw = twins_table(result)
    if tw is not None:
        out.append(to_markdown(tw))
        if foot := twins_footnote(result):
            out.append(f"_{foot}._\n")
    inl = inlined_table(result)
    if inl is not None:
        out.append(to_markdown(inl))
    if line := counted_line(result):
        out.append(line + "\n")
    out.append(md_escape(columns_legend(result)).replace("indented rows", "rows marked \u21b3") + "\n")
    if result.significance:
        out.append(legend(result).replace(NOT_SIGNIFICANT, "`~`", 1) + "\n")
    out.append(f"_{result.method}._\n")
    return "\n".join(out)


def _row_dict(r: Row, result: DiffResult, section: str) -> dict:
    d = {
        "section": section,
        "symbol": r.symbol,
        "kernel": r.kernel,
        "value_a": r.value_a,
        "value_b": r.value_b,
        "diff": r.diff,
        "delta": r.delta,
        "ratio": None if result.new_or_gone(r.value_a, r.value_b) else r.ratio,
        "new_or_gone": result.new_or_gone(r.value_a, r.value_b),
        "score": r.score,
        "values_a": r.values_a,
        "values_b": r.values_b,
        "shares_a": r.shares_a,
        "shares_b": r.shares_b,
    }
    if r.role:
        d["role"] = r.role
        d["members_a"] = r.members_a
        d["members_b"] = r.members_b
        d["member_values_a"] = [{"name": n, "value": v} for n, v in r.member_values_a]
        d["member_values_b"] = [{"name": n, "value": v} for n, v in r.member_values_b]
    if r.names_a or r.names_b:
        d["names_a"] = r.names_a
        d["names_b"] = r.names_b
        d["rules"] = r.rules
    if result.significance:
        d["ci"] = list(r.ci) if r.ci else None
        d["p"] = r.p
        d["q"] = r.q
        d["significant"] = r.significant
    return d


def to_json_text(result: DiffResult) -> str:
    n = result.options.top
    o = result.options

    def side(s, letter):
        return {"label": s.label, "arch": s.arch, "sources": s.sources, "events": s.events, "samples": s.samples,
                "total_weight": s.total_weight, "weight_unit": s.weight_unit,
                "instructions_per_op": [{"kernel": k, "user": u} for k, u in s.instructions_per_op],
                "line": side_line(letter, s), "kernel_share": s.kernel_share, "symbols": s.symbols,
                "filters": s.filters, "resolution": s.resolution,
                "kept": {"kept": s.kept_of[0], "of": s.kept_of[1]} if s.filters else None}
    doc = {
        "version": DIFF_VERSION,
        "tool": "kperfdiff diff",
        "header": side_lines(result),
        "unit": result.unit,
        "method": result.method,
        "options": {"top": o.top, "sort": o.sort, "scope": o.scope, "children": o.children, "per_op": o.per_op,
                    "compute": o.compute, "wdiff_weights": list(o.wdiff_weights),
                    "equivalence": o.equivalence, "normalise": o.normalise, "confidence": o.confidence,
                    "alpha": o.alpha},
        "labels": {"a": result.labels[0], "b": result.labels[1]},
        "sides": {"a": side(result.side_a, "A"), "b": side(result.side_b, "B")},
        "summary": summary(result),
        "significance_tested": result.significance,
        "counts": {"common": len(result.common), "only_a": len(result.only_a), "only_b": len(result.only_b)},
        "common": [_row_dict(r, result, "common") for r in _top(result.common, n)],
        "only_a": [_row_dict(r, result, "only_a") for r in _top(result.only_a, n)],
        "only_b": [_row_dict(r, result, "only_b") for r in _top(result.only_b, n)],
        "warnings": result.warnings,
    }
    if result.inferred:
        doc["twins"] = [{"a": t.a, "b": t.b, "share_a": t.share_a, "share_b": t.share_b, "score": t.score,
                         "caller_score": t.caller_score, "callee_score": t.callee_score, "accepted": t.accepted,
                         "runner_up": ({"side": t.runner_up[0], "symbol": t.runner_up[1], "score": t.runner_up[2]}
                                       if t.runner_up else None),
                         "evidence": [{"relation": e.relation, "context": e.context, "fraction_a": e.fraction_a,
                                       "fraction_b": e.fraction_b} for e in t.evidence]}
                        for t in _top(result.twins, n)]
        doc["inlined"] = [{"function": i.function, "side": i.side, "share": i.share, "caller": i.caller,
                           "caller_fraction": i.caller_fraction, "callee": i.callee,
                           "caller_self": {"here": i.caller_self[0], "other": i.caller_self[1]}}
                          for i in _top(result.inlined, n)]
    return to_json(doc)


def to_csv_text(result: DiffResult) -> str:
    n = result.options.top
    cols = ["section", "symbol", "members_a", "members_b", "value_a", "value_b", "diff", "delta", "unit", "ratio"]
    if result.significance:
        cols += ["ci_low", "ci_high", "p", "q", "significant"]
    t = Table(columns=cols)
    for section, rows in (("common", result.common), ("only_a", result.only_a), ("only_b", result.only_b)):
        for r in _top(rows, n):
            row = [section, r.symbol, " ".join(r.members_a or r.names_a), " ".join(r.members_b or r.names_b),
                   r.value_a, r.value_b,
                   r.diff, r.delta, result.unit, result.new_or_gone(r.value_a, r.value_b) or r.ratio]
            if result.significance:
                row += [r.ci[0] if r.ci else None, r.ci[1] if r.ci else None, r.p, r.q, r.significant]
            t.rows.append(row)
    return to_csv(t)


def render(result: DiffResult, fmt: str = "text", *, explain: bool = False) -> str:
    """``explain``: the text ends with the method (Markdown and JSON always carry it)."""
    if fmt == "text":
        return to_study_text(result, explain)
    if fmt == "markdown":
        return to_markdown_text(result)
    if fmt == "csv":
        return to_csv_text(result)
    if fmt == "json":
        return to_json_text(result)
    raise ValueError(f"unknown format {fmt!r}")
