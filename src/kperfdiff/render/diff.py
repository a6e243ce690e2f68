"""DiffResult -> text (the study's layout), Markdown, CSV or JSON.

The default text reproduces the original kperfdiff tables::

    >> Top 5 candidates among common kernel functions
    %diff | symbol | ARM | x86
    -----
    12.88 | unmap_vmas | 17.32 | 4.44

With significance tested (2+ profiles per side), a row that is not
significant ends with `` ~`` and a legend line closes the output.
Renderers return strings; they do no I/O.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

from kperfdiff.render.table import Table, md_escape, to_csv, to_json, to_markdown, to_text

if TYPE_CHECKING:  # types only: the renderer needs nothing of the diff stage at run time
    from kperfdiff.analysis.profile_diff import DiffResult, Row, SideInfo

DIFF_VERSION = 1     # of the JSON document

NOT_SIGNIFICANT = "~"


def legend(result: DiffResult) -> str:
    conf = f"{result.options.confidence:.0%}"
    return f"{NOT_SIGNIFICANT} not significant (Welch {conf} interval contains 0 or BH q >= {result.options.alpha:g})"


def _scope_word(result: DiffResult) -> str:
    return {"kernel": "kernel functions", "user": "user functions", "all": "functions"}[result.options.scope]


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
    """One side of a diff in a line: its file(s), event, samples, kernel share and kernel symbols, e.g.
    ``A: tiny.perf.data, cpu-clock, 71 samples, 64% kernel, symbols: kallsyms.gz (build id ... match)``."""
    n = len(side.sources)
    files = _base(side.sources[0]) if n == 1 else f"{n} profiles ({_base(side.sources[0])}, ...)"
    events = ", ".join(dict.fromkeys(side.events)) or "?"
    weight = sum(side.total_weight)
    share = (sum(k * w for k, w in zip(side.kernel_share, side.total_weight)) / weight
             if weight and len(side.kernel_share) == n else None)
    syms = "; ".join(dict.fromkeys(symbols_words(s) for s in side.symbols)) or symbols_words(None)
    label = f" ({side.label})" if side.label else ""
    samples = (f"{side.kept_of[0]:,} of {side.kept_of[1]:,} samples kept by {' '.join(side.filters)}"
               if side.filters else f"{sum(side.samples):,} samples")
    return (f"{letter}{label}: {files}, {events}, {samples}, "
            + (f"{share:.0%} kernel, " if share is not None else "") + f"symbols: {syms}")


def side_lines(result: DiffResult) -> list[str]:
    """The lines every diff output starts with, one per side."""
    return [side_line("A", result.side_a), side_line("B", result.side_b)]


def _top(rows: list[Row], n: int) -> list[Row]:
    return rows if n == 0 else rows[:n]


def _symbol_cell(row: Row, result: DiffResult) -> str:
    """The row's name, with the original names on each side when a role or a rule merged
    different ones: ``sys_clone (arm64: __arm64_sys_clone; x86_64: __x64_sys_clone)``."""
    a, b = (row.members_a, row.members_b) if row.role else (row.names_a, row.names_b)
    if row.role == "inferred":
        return f"{row.symbol} (inferred twins)"
    if not row.role and not (a or b):
        return row.symbol
    la, lb = result.labels
    sides = [f"{label}: {', '.join(names)}" for label, names in ((la, a), (lb, b)) if names]
    return f"{row.symbol} ({'; '.join(sides)})"


def tables(result: DiffResult, *, extra: bool = False, mark: bool = False) -> list[Table]:
    """The three sections as tables. ``extra`` adds interval and q columns when tested;
    ``mark`` appends `` ~`` to the symbol of rows that are not significant."""
    la, lb = result.labels
    n = result.options.top
    per_op = result.options.per_op
    head_diff = {"absdiff": f"{result.unit} diff" if per_op else "%diff", "delta": "delta", "ratio": "ratio",
                 "wdiff": "wdiff"}[result.options.compute]
    head_val = result.unit if per_op else "%time"
    words = _scope_word(result)
    qual = _qualifier(result)
    sig = result.significance and extra
    out = []

    def sym(r: Row) -> str:
        name = _symbol_cell(r, result)
        return f"{name} {NOT_SIGNIFICANT}" if mark and r.significant is False else name

    def tail(r: Row) -> list:
        if not sig:
            return []
        return [r.ci[0] if r.ci else None, r.ci[1] if r.ci else None, r.q]

    sig_cols = ["ci low (B-A)", "ci high (B-A)", "q"] if sig else []
    t = Table(columns=[head_diff, "symbol", la, lb] + sig_cols,
              title=f"Top {n or 'all'} candidates among common {words}{qual}",
              align=["r", "l", "r", "r"] + ["r"] * len(sig_cols))
    for r in _top(result.common, n):
        t.rows.append([r.score, sym(r), r.value_a, r.value_b] + tail(r))
    out.append(t)
    for label, rows, which in ((la, result.only_a, "a"), (lb, result.only_b, "b")):
        t = Table(columns=[head_val, "symbol"] + sig_cols,
                  title=f"Top {n or 'all'} candidates among {label} specific {words}{qual}",
                  align=["r", "l"] + ["r"] * len(sig_cols))
        for r in _top(rows, n):
            t.rows.append([r.value_a if which == "a" else r.value_b, sym(r)] + tail(r))
        out.append(t)
    return out


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


def _marks(result: DiffResult) -> list[list[bool]]:
    n = result.options.top
    return [[r.significant is False for r in _top(rows, n)]
            for rows in (result.common, result.only_a, result.only_b)]


def to_study_text(result: DiffResult) -> str:
    parts = side_lines(result)
    marks = _marks(result)
    for t, m in zip(tables(result), marks):
        text = to_text(t, style="study").splitlines()
        head = 3  # title, columns, rule
        for i, flag in enumerate(m):
            if flag:
                text[head + i] += f" {NOT_SIGNIFICANT}"
        parts.extend(text)
    tw = twins_table(result)
    if tw is not None:
        if tw.rows:
            parts.extend(to_text(tw, style="study").splitlines())
        else:
            parts.append(f">> {tw.title.split(':')[0]}: none accepted")
        if foot := twins_footnote(result):
            parts.append(foot)
    inl = inlined_table(result)
    if inl is not None:
        parts.extend(to_text(inl, style="study").splitlines())
    if line := counted_line(result):
        parts.append(line)
    if result.significance:
        parts.append(legend(result))
    return "\n".join(parts) + "\n"


def to_markdown_text(result: DiffResult) -> str:
    out = ["".join(f"- {md_escape(line)}\n" for line in side_lines(result))]
    out += [to_markdown(t) for t in tables(result, extra=True, mark=True)]
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
                "line": side_line(letter, s), "kernel_share": s.kernel_share, "symbols": s.symbols}
    doc = {
        "version": DIFF_VERSION,
        "tool": "kperfdiff diff",
        "header": side_lines(result),
        "unit": result.unit,
        "method": result.method,
        "options": {"top": o.top, "scope": o.scope, "children": o.children, "per_op": o.per_op,
                    "compute": o.compute, "wdiff_weights": list(o.wdiff_weights),
                    "equivalence": o.equivalence, "normalise": o.normalise, "confidence": o.confidence,
                    "alpha": o.alpha},
        "labels": {"a": result.labels[0], "b": result.labels[1]},
        "sides": {"a": side(result.side_a, "A"), "b": side(result.side_b, "B")},
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
    cols = ["section", "symbol", "members_a", "members_b", "value_a", "value_b", "diff", "delta", "unit"]
    if result.significance:
        cols += ["ci_low", "ci_high", "p", "q", "significant"]
    t = Table(columns=cols)
    for section, rows in (("common", result.common), ("only_a", result.only_a), ("only_b", result.only_b)):
        for r in _top(rows, n):
            row = [section, r.symbol, " ".join(r.members_a or r.names_a), " ".join(r.members_b or r.names_b),
                   r.value_a, r.value_b,
                   r.diff, r.delta, result.unit]
            if result.significance:
                row += [r.ci[0] if r.ci else None, r.ci[1] if r.ci else None, r.p, r.q, r.significant]
            t.rows.append(row)
    return to_csv(t)


def render(result: DiffResult, fmt: str = "text") -> str:
    if fmt == "text":
        return to_study_text(result)
    if fmt == "markdown":
        return to_markdown_text(result)
    if fmt == "csv":
        return to_csv_text(result)
    if fmt == "json":
        return to_json_text(result)
    raise ValueError(f"unknown format {fmt!r}")
