"""The studies report: one self-contained HTML page, one section per study.

Each section says what the study measured and found (its own figures), what
kperfdiff measured here (tables with intervals, figures), whether the
direction and the mechanism agree, and what differs. Like the experiment
report it has inline CSS and SVG only, under a Content-Security-Policy that
fetches nothing; every text that comes from a file or the store is escaped.
"""
from __future__ import annotations

from kperfdiff.render import diff as rdiff
from kperfdiff.render.report import CSS, esc, html_page, sides_html, table_html
from kperfdiff.render.table import to_markdown as table_markdown

BADGE = {"yes": ("agrees", "#1a7f37"), "partly": ("partly", "#9a6700"), "no": ("disagrees", "#cf222e"),
         "unknown": ("not known", "#57606a")}
STUDIES_CSS = CSS + """
.verdict{margin:.3em 0}.badge{display:inline-block;min-width:6em;color:#fff;border-radius:3px;padding:0 .4em;
margin-right:.5em;text-align:center;font-size:.85em}.study{background:#f6f8fa;padding:.4em .8em;border-left:3px solid #888}
ul.differs li{margin:.15em 0}
"""


def _anchor(i: int, sec) -> str:
    return f"study-{i + 1}"


def _verdict(name: str, v) -> str:
    word, colour = BADGE[v.agrees]
    return (f'<p class="verdict"><span class="badge" style="background:{colour}">{esc(word)}</span>'
            f"<b>{esc(name)}.</b> {esc(v.text)}</p>")


def section_html(i: int, sec) -> str:
    st = sec.study
    out = [f'<h2 id="{_anchor(i, sec)}">{i + 1}. {esc(st.title)}'
           + (f" ({esc(st.source)})" if st.source else "") + "</h2>"]
    if sec.emulated:
        out.append('<p class="emulated">Measured on EMULATED machines (QEMU TCG): their times are not those '
                   "of real hardware; profiles and counts are the evidence.</p>")
    if not sec.complete:
        out.append('<p class="note">Incomplete: some cells are missing or failed; run '
                   f"<code>kperfdiff studies run {esc(sec.file)}</code> again to finish them.</p>")
    out.append('<div class="study"><h3>What the study measured and found</h3>')
    if st.measured:
        out.append(f"<p>{esc(st.measured)}</p>")
    if st.found:
        out.append(f"<p>{esc(st.found)}</p>")
    out.append("</div>")
    out.append("<h3>What kperfdiff measured here</h3>")
    out += [f"<p>{esc(p)}</p>" for p in sec.paragraphs]
    out += [table_html(t) for t in sec.tables]
    for pd in sec.diffs:
        out.append(f"<h4>kperfdiff ranking: {esc(pd.title or pd.key)}</h4>")
        if pd.error:
            out.append(f'<p class="note">{esc(pd.error)}</p>')
            continue
        out += [sides_html(pd.result)] + [table_html(t) for t in rdiff.tables(pd.result, mark=True)]
    if sec.figures:
        out.append('<div class="plots">' + "".join(f"<figure>{svg}</figure>" for svg in sec.figures) + "</div>")
    out.append("<h3>Verdict</h3>")
    out.append(_verdict("Direction", sec.direction))
    out.append(_verdict("Mechanism", sec.mechanism))
    differs = list(st.differs) + [d for d in sec.differs if d not in st.differs]
    if differs:
        out.append("<h3>What differs from the study</h3><ul class=\"differs\">"
                   + "".join(f"<li>{esc(d)}</li>" for d in differs) + "</ul>")
    out.append(f'<p class="note">experiment <code>{esc(sec.experiment)}</code>, file <code>{esc(sec.file)}</code></p>')
    return "\n".join(out)


def to_html(sections: list, generated: str, machine: str = "") -> str:
    title = "kperfdiff: the studies, reproduced"
    body = [f"<h1>{esc(title)}</h1>", f'<p class="note">generated {esc(generated)}'
            + (f" on {esc(machine)}" if machine else "") + "</p>"]
    rows = "".join(f'<tr><td class="l"><a href="#{_anchor(i, s)}">{i + 1}. {esc(s.study.title)}</a></td>'
                   f'<td class="l">{esc(BADGE[s.direction.agrees][0])}</td>'
                   f'<td class="l">{esc(BADGE[s.mechanism.agrees][0])}</td>'
                   f'<td class="l">{"emulated" if s.emulated else "this machine"}</td></tr>'
                   for i, s in enumerate(sections))
    body.append('<table><tr><th class="l">study</th><th class="l">direction</th><th class="l">mechanism</th>'
                f'<th class="l">measured on</th></tr>{rows}</table>')
    body += [section_html(i, s) for i, s in enumerate(sections)]
    return html_page(title, body, STUDIES_CSS)


def to_text(sections: list) -> str:
    """A short plain summary (the verdicts and the tables in Markdown), for the terminal."""
    out = []
    for i, s in enumerate(sections):
        out.append(f"## {i + 1}. {s.study.title}" + (f" ({s.study.source})" if s.study.source else "")
                   + ("  [EMULATED]" if s.emulated else "") + ("" if s.complete else "  [incomplete]"))
        out += [p for p in s.paragraphs]
        for t in s.tables:
            out.append(table_markdown(t).rstrip())
        for pd in s.diffs:
            out.append(f"kperfdiff ranking: {pd.title or pd.key}")
            out.append(pd.error or rdiff.to_study_text(pd.result).rstrip())
        out.append(f"direction: {BADGE[s.direction.agrees][0]}: {s.direction.text}")
        out.append(f"mechanism: {BADGE[s.mechanism.agrees][0]}: {s.mechanism.text}")
        out.append("")
    return "\n\n".join(out).rstrip() + "\n"
