"""The sentinel's document (:func:`kperfdiff.watch.report.document`) as text and JSON. Pure: a dict in,
a string out.

A look that measured and bisected nothing is one line per watch. Otherwise: what was measured now, the
bisections that ended now, every change point (regression or improvement, the commits either side, the
change, the culprit or where its bisection stands), and the queue.
"""
from __future__ import annotations

from kperfdiff.render.table import Table, number, percent, to_json, to_text


def to_json_doc(doc: dict) -> str:
    return to_json(doc)


def to_text_doc(doc: dict) -> str:
    return "".join(_watch(w, doc["status"]) for w in doc["watches"]) or "no watch in the store yet\n"


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _short(commit: str | None) -> str:
    return (commit or "-")[:12]


def _queue(q: dict) -> str:
    parts = []
    for kind in ("measure", "bisect"):
        counts = ", ".join(f"{n} {state}" for state, n in q[kind].items() if n)
        parts.append(f"{kind} {counts or 'none'}")
    return "; ".join(parts)


def _one_line(w: dict) -> str:
    cps = [c for c in w["changes"] if c["state"] == "current"]
    culprits = sum(1 for c in cps if c["culprit"])
    tips = ", ".join(f"{b['branch']} at {_short(b['tip'])} ({_n(b['commits'], 'commit')})" for b in w["branches"])
    return (f"watch {w['name']}: nothing new to measure on {tips}; {_n(len(cps), 'change point')}, "
            f"{_n(culprits, 'culprit')}; queue: {_queue(w['queue'])}\n")


def _watch(w: dict, status: bool) -> str:
    if not status and not w["measured"] and not w["bisected"]:
        return _one_line(w)
    out = [f"watch {w['name']}" + ("" if status else ": " + ", ".join(
        f"{b['branch']} at {_short(b['tip'])}, {_n(b['commits'], 'commit')} from {_short(b['base'])} "
        f"({b['selected']} measured by the suite)" for b in w["branches"]))]
    if w["measured"]:
        t = Table(["commit", "subject", "target", "benchmark", "centre", "unit", "run"], align=list("lllllrr"),
                  title=f"measured now: {len(w['measured'])}")
        for m in w["measured"]:
            t.rows.append([_short(m["commit"]), (m["subject"] or "")[:40], m["target"], m["benchmark"],
                           number(m["centre"]) if m["state"] == "done" else f"failed: {m['reason']}",
                           m["unit"] or "-", m["run"] or "-"])
        out.append(_indent(to_text(t)))
    for b in w["bisected"]:
        what = (f"culprit {_short(b['culprit']['hash'])}" + (", verified" if b["verified"] else ", NOT verified")
                if b["culprit"] else b["outcome"] or b["state"])
        out.append(f"  bisected {b['benchmark']} on {b['target']} between {_short(b['good'])} and "
                   f"{_short(b['bad'])}: {what}" + (f" ({b['reason']})" if b["reason"] else ""))
    cps = w["changes"]
    out.append(f"  change points: {len(cps)}" + ("" if cps else " (none yet)"))
    for c in cps:
        out.extend(_change(c))
    out.append(f"  queue: {_queue(w['queue'])}" + (f"; working: {', '.join(w['workers'])}" if w["workers"] else ""))
    return "\n".join(out) + "\n"


def _change(c: dict) -> list[str]:
    head = (f"  {c['direction']} {percent(c['percent'], signed=True, mark=True)} in {c['benchmark']} on {c['target']}"
            f", {c['branch']}: between {_short(c['before']['commit'])} ({(c['before']['subject'] or '')[:40]}) and "
            f"{_short(c['after']['commit'])} ({(c['after']['subject'] or '')[:40]})")
    if c["state"] == "moved":
        return [head + f" [moved: now between {_short(c['moved_to'][0])} and {_short(c['moved_to'][1])}]"
                if c["moved_to"] else head + " [moved]"]
    if c["state"] == "unconfirmed":
        b = c["bisection"] or {}
        return [head + " [unconfirmed: measured afresh, the two commits do not differ]",
                *([f"    ({b['reason']})"] if b.get("reason") else [])]
    lines = [head]
    k, b = c["culprit"], c["bisection"]
    if k:
        verified = (f"verified (it measures {percent(k['percent'], signed=True, mark=True)} against its parent)"
                    if k["verified"] else "NOT verified against its parent")
        lines.append(f"    culprit {_short(k['hash'])} \"{k['subject']}\" by {k['author']}, {verified}")
        if c["explain"]:
            lines.append(f"    explained by: {c['explain']}")
        if c.get("explanation"):
            lines += ["    " + ln for ln in explanation_lines(c["explanation"], SHOWN)]
    elif b is None:
        lines.append("    not bisected (an improvement; the suite bisects regressions only)")
    else:
        lines.append(f"    bisection: {b['outcome'] or b['state']}" + (f" ({b['reason']})" if b["reason"] else ""))
    return lines


SHOWN = 5       # functions of a culprit's ranking in the text report (the notice and the page show every one kept)


def functions_table(e: dict, n: int | None = None) -> Table:
    """The head of a culprit's ranking against its parent: each function's cost per operation in both."""
    unit = e["unit"] or ""
    t = Table(["function", f"parent {unit}".strip(), f"culprit {unit}".strip(), "change", "where"],
              align=list("lrrrl"))
    for r in e["functions"][:n]:
        t.rows.append([r["symbol"], number(r["parent"]), number(r["culprit"]),
                       "-" if r["change"] is None else f"{r['change']:+.4g}",
                       "" if r["section"] == "common" else r["section"]])
    return t


def explanation_lines(e: dict, n: int | None = None) -> list[str]:
    """A culprit's explanation: its top functions against its parent (``n`` of them; all kept: None), or why
    there is no ranking, then the counters that moved."""
    if e["error"]:
        return [f"top functions: {e['error']}"]
    out = ["top functions (culprit against its parent, per operation):"]
    out += ["  " + ln for ln in to_text(functions_table(e, n)).splitlines() if ln]
    if e["counters"]:
        out.append("counters that moved (per operation): " + ", ".join(
            f"{k['name']} {number(k['parent'])} -> {number(k['culprit'])}" for k in e["counters"][:n]))
    return out


def _indent(text: str) -> str:
    return "".join(f"  {ln}\n" if ln else "\n" for ln in text.splitlines()).rstrip("\n")


def _pct(v) -> str:
    return "-" if v is None else percent(v, signed=True, mark=True)


def notice(change: dict, watch: str) -> str:
    """A culprit as a plain-text report, in the spirit of 0-day's regression mails: the commit, the
    series, the change with its interval, the verification, what explains it, how to reproduce it."""
    c, k, r = change, change["culprit"], change["reproduce"]
    iv = c["interval"]
    verified = (f"verified: it measures {_pct(k['percent'])} against its parent" if k["verified"]
                else "NOT verified against its parent")
    out = [f"kperfdiff watch {watch}: {_pct(c['percent'])} {c['direction']} of {c['benchmark']} on {c['target']}",
           "", f"commit: {k['hash']}", f"subject: {k['subject']}", f"author: {k['author']}",
           f"branch: {c['branch']}", f"benchmark: {c['benchmark']}", f"target: {c['target']}",
           f"change: {_pct(c['percent'])} (95% interval [{_pct(iv['low'])}, {_pct(iv['high'])}], "
           f"p={c['pvalue']:.2g}; positive = better)" if c["pvalue"] is not None else f"change: {_pct(c['percent'])}",
           f"between: {_short(c['before']['commit'])} ({c['before']['subject'] or ''}) and "
           f"{_short(c['after']['commit'])} ({c['after']['subject'] or ''})",
           f"verification: {verified}", ""]
    if c.get("explanation"):
        out += [*explanation_lines(c["explanation"]), f"  ({r['explain']})", ""]
    elif r["explain"]:
        out += ["the functions that explain it (culprit against its parent, profiled):", f"  {r['explain']}", ""]
    else:
        out += ["functions: not profiled (the suite's profile = false), so there is no ranking of functions", ""]
    out.append("to reproduce:")
    out += [f"  {r['bisect']}", f"  {r['verify']}   (the culprit against its parent alone)"] if r["bisect"] else \
        ["  (the bisection's command line was not recorded)"]
    return "\n".join(out) + "\n"
