"""The watch's static site (``kperfdiff watch --publish DIR``) from its feed
(:func:`kperfdiff.watch.publish.feed`): an index with each series' history plot, its change points
marked and linked, and a page per change point (culprit, change and interval, verification, what
explains it and its differential flame graph, how to reproduce it); and ``feed.json``. Pure: the feed
(and the culprits' rankings, for the flame graphs) in, file names and contents out. Each page is
self-contained (inline CSS and SVG, nothing fetched; the flame graph's own script, allowed by its hash,
on a change page that has one).
"""
from __future__ import annotations

from html import escape

from kperfdiff.render import flamegraph, flamescript, svgplot
from kperfdiff.render import watch as render
from kperfdiff.render.report import html_page, table_html
from kperfdiff.render.table import Table, number, percent, to_json

NOT_PROFILED = ("No profiles were recorded for this change point (the suite's profile = false), so there is "
                "no ranking of functions and no differential flame graph.")
NO_COUNTERS = "No kernel counters are stored with this change point."


def page_name(change: dict) -> str:
    return f"change-{change['id']}.html"


def _pct(v) -> str:
    return "-" if v is None else percent(v, signed=True, mark=True)


def _plot(series: dict, only: int | None = None) -> str:
    marks = [m for m in series["changes"] if only is None or m["change"] == only]
    culprit_at = {m["index"] for m in marks}
    points = [(f"{p['commit'][:12]} ({p['subject'] or ''})" + (" - first after a change point" if i in culprit_at
                                                                   else ""), p["centre"], p["low"], p["high"])
              for i, p in enumerate(series["points"])]
    nan = float("nan")
    points = [(lab, nan if v is None else v, nan if lo is None else lo, nan if hi is None else hi)
              for lab, v, lo, hi in points]
    title = f"{series['benchmark']} on {series['target']}, {series['branch']}"
    svg = svgplot.history(title, series["unit"] or "", points, sorted(culprit_at), [],
                          caption="points in commit order on the branch; whiskers: 95% interval of each run's "
                                  "centre; dashed line: a change point")
    return f'<div class="plot">{svg[svg.find("<svg"):]}</div>'


def _change_line(c: dict) -> str:
    k = c["culprit"]
    who = (f'culprit <code>{escape(k["hash"][:12])}</code> "{escape(k["subject"] or "")}"' if k else
           "no difference when measured again" if c["state"] == "unconfirmed" else
           "no culprit yet" if c["bisection"] else "not bisected")
    return (f'<li><a class="change-link" href="{page_name(c)}">{escape(c["direction"])} {_pct(c["percent"])} between '
            f'{escape(c["before"]["commit"][:12])} and {escape(c["after"]["commit"][:12])}</a>: {who}'
            + (f" ({c['state']})" if c["state"] != "current" else "") + "</li>")


def index(feed: dict) -> str:
    body = ["<h1>kperfdiff watch</h1>"]
    for w in feed["watches"]:
        body.append(f"<h2>{escape(w['name'])}</h2>")
        if not w["series"]:
            body.append('<p class="note">Nothing measured yet.</p>')
        for s in w["series"]:
            body.append(f'<h3 id="{escape(s["id"])}">{escape(s["id"])}</h3>')
            body.append(_plot(s))
            mine = [c for c in w["changes"] if c["series"] == s["id"]]
            body.append("<ul>" + "".join(_change_line(c) for c in mine) + "</ul>" if mine else
                        '<p class="note">No change point in this series.</p>')
    return html_page("kperfdiff watch", body)


def _facts(rows: list[tuple[str, str]]) -> str:
    return "<table>" + "".join(f"<tr><th>{escape(a)}</th><td>{b}</td></tr>" for a, b in rows) + "</table>"


def change_page(w: dict, c: dict, diff=None) -> str:
    """A change point's page; ``diff``: the culprit's ranking against its parent with folded stacks
    (:func:`kperfdiff.watch.publish.culprit_diffs`), drawn as a differential flame graph."""
    k, iv, r = c["culprit"], c["interval"], c["reproduce"]
    title = f"{w['name']}: {c['direction']} {_pct(c['percent'])} in {c['benchmark']} on {c['target']}"
    body = ['<p><a id="back" href="index.html">all series</a></p>', f"<h1>{escape(title)}</h1>", "<h2>Culprit</h2>"]
    if k:
        body.append(_facts([("commit", f"<code>{escape(k['hash'])}</code>"), ("subject", escape(k["subject"] or "")),
                            ("author", escape(k["author"] or ""))]))
    else:
        b = c["bisection"]
        body.append(f'<p class="note">No culprit: {escape(b["outcome"] or b["state"]) if b else "not bisected"}.</p>')
    body.append("<h2>The change</h2>")
    body.append(_facts([("series", escape(c["series"])),
                        ("change", f"{_pct(c['percent'])} (positive = better), 95% interval [{_pct(iv['low'])}, "
                                   f"{_pct(iv['high'])}], p = {number(c['pvalue']) if c['pvalue'] else '-'}"),
                        ("last commit before", f"<code>{escape(c['before']['commit'])}</code> "
                                               f"{escape(c['before']['subject'] or '')}"),
                        ("first commit after", f"<code>{escape(c['after']['commit'])}</code> "
                                               f"{escape(c['after']['subject'] or '')}"),
                        ("state", escape(c["state"]))]))
    s = next((s for s in w["series"] if s["id"] == c["series"]), None)
    if s is not None:
        body.append(_plot(s, only=c["id"]))
    body.append("<h2>Verification</h2>")
    body.append(f'<p class="verdict">{"Verified" if k["verified"] else "NOT verified"}: the culprit measures '
                f'{_pct(k["percent"])} against its parent.</p>' if k else '<p class="note">Nothing to verify.</p>')
    body.append("<h2>Culprit against its parent</h2>")
    body += _explanation(c.get("explanation"), r["explain"])
    scripts: tuple[str, ...] = ()
    if diff is not None:
        body.append('<h2 id="flame">Differential flame graph</h2>')
        svg = flamegraph.differential_svg(diff, title=f"{c['benchmark']}: culprit against parent", script=False,
                                          id_prefix=f"c{c['id']}-")
        body.append(f'<div class="flame">{svg[svg.find("<svg"):]}</div>')
        scripts = (flamescript.SCRIPT,)
    body.append("<h2>To reproduce</h2>")
    body.append("<pre>" + escape("\n".join(x for x in (r["bisect"], r["verify"]) if x)) + "</pre>" if r["bisect"] else
                '<p class="note">The bisection\'s command line was not recorded.</p>')
    return html_page(title, body, scripts=scripts)


def _explanation(e: dict | None, command: str | None) -> list[str]:
    """The culprit's top functions against its parent and the counters that moved, or why there are none."""
    out = []
    if e and not e["error"]:
        out.append(f'<p class="note">The head of the ranking of culprit against parent, per operation (the whole '
                   f'ranking: <code>{escape(command or e["command"])}</code>).</p>')
        out.append(table_html(render.functions_table(e)))
    elif e:
        out.append(f'<p class="note">{escape(e["error"])}</p>')
    else:
        out.append(f'<p class="note">Ranked by <code>{escape(command)}</code>.</p>' if command else
                   f'<p class="note">{NOT_PROFILED}</p>')
    out.append("<h2>Kernel counters</h2>")
    if e and e["counters"]:
        t = Table(["counter (per operation)", "parent", "culprit"], align=list("lrr"))
        t.rows += [[k["name"], number(k["parent"]), number(k["culprit"])] for k in e["counters"]]
        out.append(table_html(t))
    else:
        out.append(f'<p class="note">{NO_COUNTERS}</p>')
    return out


def site(feed: dict, diffs: dict | None = None) -> dict[str, str]:
    """The site's files: ``index.html``, a page per change point (with the flame graph of ``diffs``, by
    change point id, where there is one), ``feed.json``."""
    files = {"index.html": index(feed), "feed.json": to_json(feed)}
    for w in feed["watches"]:
        for c in w["changes"]:
            files[page_name(c)] = change_page(w, c, (diffs or {}).get(c["id"]))
    return files
