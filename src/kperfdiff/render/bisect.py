"""A bisection's outcome as text, JSON and a self-contained HTML page: GOOD and BAD, every probe
with its verdict and interval, the culprit and its verification, then the explanation (the
kperfdiff ranking of culprit against parent, the differential flame graph, the kernel counters).

Pure: it takes the outcome of :func:`kperfdiff.bisect.run.bisect` and the explanation already computed
(:class:`kperfdiff.analysis.culprit.Explanation`), both read by their attributes, and returns strings.
"""
from __future__ import annotations

import json
import math
from html import escape

from kperfdiff.core import modes
from kperfdiff.render import diff as rdiff
from kperfdiff.render import flamegraph, flamescript
from kperfdiff.render.report import html_page, table_html
from kperfdiff.render.table import Table, json_clean, number, to_text

LISTED = 8      # counters a note names before "and N more" (the JSON names every one)


def _pct(ratio: float) -> str:
    return "-" if ratio is None or math.isnan(ratio) else f"{(ratio - 1) * 100:+.2f}%"


def _metric_words(outcome) -> str:
    if outcome.plan.metric == "instructions":
        return "kernel instructions per operation, exact (deterministic guest)"
    each = ("the median of each repetition's intervals" if getattr(outcome, "value", "p10") == "median"
            else "the 10th percentile of each repetition's intervals")
    return (f"time per operation ({outcome.unit or 'the benchmark unit'}), {each}"
            + (", each probe against GOOD and BAD measured around it" if getattr(outcome, "bracketed", False) else ""))


def modes_line(outcome) -> str:
    """``modes of GOOD and BAD: 2 modes: ...``, or empty when their intervals have one."""
    m = getattr(outcome, "modes", None)
    if m is None or not m.several:
        return ""
    unit = outcome.unit or ""
    return (f"modes of GOOD and BAD: {modes.describe(m, lambda v: f'{v:.4g}' + (' ' + unit if unit else ''))}" +
            ("; each repetition's 10th percentile follows the fastest mode while that mode holds a tenth of the "
             "repetition's intervals" if getattr(outcome, "value", "p10") == "p10" else
             "; repetition medians follow the mix of modes: --value p10 compares within the fastest mode"))


def steps_table(outcome) -> Table:
    t = Table(["step", "commit", "verdict", "vs GOOD", "95% interval", "reps", "runs", "subject"],
              align=["l", "l", "l", "r", "l", "r", "l", "l"])
    good = None
    for s in outcome.steps:
        if s.role == "good" and s.values:
            good = _geo(s.values)
    n = 0
    for s in outcome.steps:
        if s.role == "probe":
            n += 1
        name = f"probe {n}" if s.role == "probe" else s.role
        v = s.verdict
        verdict = v.verdict if v else ("skipped" if s.reason else "-")
        if s.role in ("good", "bad", "parent", "culprit"):
            verdict = s.role.upper() if s.role in ("good", "bad") else "-"
        # a probe's ratio is the one it was judged by (against its brackets when bracketed)
        ratio = v.ratio if v else (_geo(s.values) / good) if (good and s.values) else math.nan
        interval = (f"[{_pct(v.low)}, {_pct(v.high)}]" if v and not math.isnan(v.low) else "-")
        stored = "" if s.measured_now or not s.values else " (stored)"
        t.rows.append([name, s.commit.short, verdict + stored, _pct(ratio), interval, len(s.values),
                       ",".join(map(str, s.runs)) or "-", s.commit.subject[:60]])
    return t


def _geo(values) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def verdict_lines(outcome) -> list[str]:
    r = outcome.reference
    out = []
    if outcome.culprit:
        c = outcome.culprit
        out.append(f"culprit: {c.hash} {c.subject!r} by {c.author}")
        ver = outcome.verification
        if ver is None:
            out.append("verification: the culprit has no parent to compare with")
        else:
            how = ("exact counts" if outcome.plan.metric == "instructions"
                   else f"95% interval [{_pct(ver.low)}, {_pct(ver.high)}], p={ver.p:.2g}"
                   if not math.isnan(ver.p) else ver.reason)
            fresh = any(s.measured_now for s in outcome.steps if s.role in ("parent", "culprit"))
            said = ("fresh repetitions" if fresh or outcome.plan.metric != "instructions"
                    else "the counts stored for each (a deterministic guest counts the same on every boot)")
            out.append(f"{'verified' if outcome.verified else 'NOT verified'}: culprit against its parent, {said}: "
                       f"{_pct(ver.ratio)} ({how}); GOOD to BAD was {_pct(r.ratio)}")
            if not outcome.verified:
                out.append("  the culprit does not reproduce the regression on its own against its parent: "
                           "treat it as a suspect, not a verdict")
    elif outcome.candidates:
        out.append(f"no single culprit: skipped commits hide it; the first bad commit is one of "
                   f"{', '.join(c.short for c in outcome.candidates)}")
    else:
        out.append("no culprit found")
    if outcome.revert is not None:
        rv = outcome.revert
        if rv.verdict:
            out.append(f"revert of the culprit on BAD: {rv.verdict.verdict} ({_pct(rv.verdict.ratio)} vs GOOD)"
                       + (": the regression is recovered" if rv.verdict.verdict == "good" else
                          ": the revert does not recover GOOD" if rv.verdict.verdict == "bad" else ""))
        else:
            out.append(f"revert of the culprit on BAD: not measured ({rv.reason})")
    return out


def summary_line(outcome) -> str:
    n = outcome.commits
    bound = math.ceil(math.log2(max(n, 2))) + 2
    skipped = sum(1 for s in outcome.probes if s.verdict is None or s.verdict.verdict == "undecided")
    return (f"{outcome.measured_probes} probe{'s' if outcome.measured_probes != 1 else ''} measured for {n} "
            f"commits (ceil(log2 {n}) + 2 = {bound})" + (f", {skipped} skipped" if skipped else "")
            + f"; wall time {outcome.seconds:.0f} s")


def counters_table(ex) -> Table | None:
    if not ex.counters:
        return None
    t = Table(["counter (per operation)", "parent", "culprit", "change"],
              notes=["kernel counters are system-wide deltas over the verification's runs: other activity on "
                     "the machine counts too"])
    for name, a, b in ex.counters:
        t.rows.append([name, number(a), number(b), _pct(b / a) if a else "-"])
    return t


def counters_note(ex) -> str:
    """Which counters the table leaves out and why, or empty when it leaves none out."""
    names = ex.counters_left_out
    if not names:
        return ""
    listed = ", ".join(names[:LISTED]) + (f" and {len(names) - LISTED} more" if len(names) > LISTED else "")
    fewer = "fewer" if ex.ops_ratio < 1 else "more"
    return (f"left out: {len(names)} counter{'s' if len(names) != 1 else ''} with the same count per repetition "
            f"in parent and culprit ({listed}): per operation they moved {_pct(1 / ex.ops_ratio)} only because the "
            f"culprit did {abs(ex.ops_ratio - 1) * 100:.2f}% {fewer} operations per repetition, not because "
            f"the kernel counted them more or less often")


def to_text_report(outcome, ex) -> str:
    p = outcome.plan
    r = outcome.reference
    out = [f"bisect {p.bench}{'@' + str(p.cores) if p.cores > 1 else ''} on {p.target}: {_metric_words(outcome)}",
           f"GOOD {p.good[:12]} -> BAD {p.bad[:12]}: {_pct(r.ratio)}"
           + (f" (95% interval [{_pct(r.low)}, {_pct(r.high)}], p={r.p:.2g})" if p.metric == "time" else " (exact)"),
           *([modes_line(outcome)] if modes_line(outcome) else []),
           "", to_text(steps_table(outcome)).rstrip("\n"), ""]
    out += verdict_lines(outcome)
    out.append(summary_line(outcome))
    if ex is not None:
        out.append("")
        if ex.error:
            out.append(f"explanation: {ex.error}")
        else:
            out.append(f"explanation: {ex.command}")
            out.append(rdiff.render(ex.diff, "text").rstrip("\n"))
        # the counters come from the verification's runs, with or without profiles to rank
        ct = counters_table(ex)
        if ct:
            out += ["", to_text(ct).rstrip("\n")]
        if counters_note(ex):
            out += ([] if ct else [""]) + [counters_note(ex)]
    return "\n".join(out) + "\n"


def _commit(c) -> dict | None:
    return None if c is None else {"hash": c.hash, "subject": c.subject, "author": c.author}


def _verdict(v) -> dict | None:
    return None if v is None else {"verdict": v.verdict, "ratio": v.ratio, "low": v.low, "high": v.high,
                                   "midpoint": v.midpoint}


def _difference(d) -> dict | None:
    return None if d is None else {"ratio": d.ratio, "low": d.low, "high": d.high, "p": d.p,
                                   "significant": d.significant, "reason": d.reason}


def to_json_report(outcome, ex) -> str:
    p = outcome.plan
    doc = {
        "key": p.key, "repo": p.repo, "good": p.good, "bad": p.bad, "benchmark": p.bench, "cores": p.cores,
        "target": p.target, "metric": p.metric,
        "value": getattr(outcome, "value", "p10") if p.metric == "time" else None, "commits": outcome.commits,
        "reference": _difference(outcome.reference),
        "steps": [{"role": s.role, "commit": _commit(s.commit), "values": s.values, "runs": s.runs,
                   "verdict": _verdict(s.verdict), "reason": s.reason, "measured_now": s.measured_now}
                  for s in outcome.steps],
        "culprit": _commit(outcome.culprit), "candidates": [_commit(c) for c in outcome.candidates],
        "verification": _difference(outcome.verification), "verified": outcome.verified,
        "revert": None if outcome.revert is None else {"verdict": _verdict(outcome.revert.verdict),
                                                       "runs": outcome.revert.runs, "reason": outcome.revert.reason},
        "measured_probes": outcome.measured_probes, "seconds": outcome.seconds, "bracketed": outcome.bracketed,
        "modes": outcome.modes.as_list() if getattr(outcome, "modes", None) is not None else [],
        "explanation": None if ex is None else {
            "command": ex.command, "error": ex.error or None,
            "ranking": json.loads(rdiff.render(ex.diff, "json")) if ex.diff is not None else None,
            "counters": [{"name": n, "parent": a, "culprit": b} for n, a, b in ex.counters],
            "counters_left_out": ex.counters_left_out, "ops_per_repetition_ratio": ex.ops_ratio},
    }
    return json.dumps(json_clean(doc), indent=2) + "\n"


def to_html_report(outcome, ex) -> str:
    p = outcome.plan
    title = f"kperfdiff bisect: {p.bench} {p.good[:12]}..{p.bad[:12]}"
    head = verdict_lines(outcome)
    body = [f"<h1>{escape(title)}</h1>",
            f'<p class="verdict"><strong>{escape(head[0])}</strong></p>']
    body += [f'<p class="note">{escape(line)}</p>' for line in head[1:]]
    body.append(f'<p class="note">{escape(_metric_words(outcome))} on {escape(p.target)}; '
                f'GOOD to BAD {_pct(outcome.reference.ratio)}; {escape(summary_line(outcome))}</p>')
    if modes_line(outcome):
        body.append(f'<p class="note">{escape(modes_line(outcome))}</p>')
    if "qemu:" in p.target:
        body.append('<p class="emulated">Measured in an EMULATED guest: its times are not those of real '
                    'hardware.</p>')
    body += ['<h2 id="steps">Steps</h2>', table_html(steps_table(outcome))]
    scripts: tuple[str, ...] = ()
    if ex is not None:
        body.append('<h2 id="explanation">Culprit against its parent</h2>')
        if ex.error:
            body.append(f'<p class="note">{escape(ex.error)}</p>')
        else:
            body.append(f'<p class="note">{escape(ex.command)}</p>')
            body += [f'<p class="note side">{escape(line)}</p>' for line in rdiff.side_lines(ex.diff)]
            body += [table_html(t) for t in rdiff.tables(ex.diff, mark=True)]
            svg = flamegraph.differential_svg(ex.diff, title=f"{p.bench}: culprit against parent",
                                              script=False, id_prefix="f0-")
            body.append(f'<div class="flame">{svg[svg.find("<svg"):]}</div>')
            scripts = (flamescript.SCRIPT,)
        ct = counters_table(ex)
        body.append('<h2 id="counters">Kernel counters</h2>')
        body.append(table_html(ct) if ct else
                    f'<p class="note">No {"other " if ex.counters_left_out else ""}kernel counter moved.</p>')
        if counters_note(ex):
            body.append(f'<p class="note">{escape(counters_note(ex))}</p>')
    return html_page(title, body, scripts=scripts)
