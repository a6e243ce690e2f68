"""The HTML report reads like a result: the comparison and its plots first, the machine facts
folded after them; value axes in units that suit the numbers; every plot with whiskers says what
they are; the heat map's colours are not flattened by one outlier cell. Checked on the output
of `kperfdiff report` (parsed), and on the plots alone where a case needs numbers the store
fixture does not have."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

from support import run_cli
from kperfdiff import store as st
from kperfdiff.render import svgplot
from analysis.test_compare import add, make_store
from render.test_report import add_profiles

SVG = "{http://www.w3.org/2000/svg}"


def shifted(reps, k):
    return [[v * k for v in r] for r in reps]


@pytest.fixture
def report_html(tmp_path, home):
    """Two runs on machines that differ in THP mode, each benchmark at 1 and 2 copies: fork at ~600
    us/op, gups at ~0.07 GUP/s, and four more benchmarks, one of which (x.outlier) gets 10x faster while the others move by
    2-12% (3 repetitions each, so every cell has an interval)."""
    s = st.Store.open(home / "kperfdiff.db")
    ma = s.add_machine({"arch": "x86_64", "cpus": 2, "thp_enabled": "madvise", "cpu_model": "Test CPU"})
    mb = s.add_machine({"arch": "x86_64", "cpus": 2, "thp_enabled": "always", "cpu_model": "Test CPU"})
    ra = s.start_run(label="before", machine_id=ma)
    rb = s.start_run(label="after", machine_id=mb)
    base = [[600_000, 610_000, 620_000], [605_000, 615_000, 600_000], [598_000, 612_000, 607_000]]
    changes = {"proc.fork": 1.05, "x.a": 0.98, "x.b": 1.12, "x.c": 1.08, "x.outlier": 10.0}
    for copies in (1, 2):                   # two core counts: a scaling curve has two points
        for bench, k in changes.items():
            add(s, ra.id, bench, base, copies=copies)
            add(s, rb.id, bench, shifted(base, 1 / k), copies=copies)
        gups = [[0.070, 0.071, 0.072], [0.069, 0.070, 0.073], [0.071, 0.070, 0.072]]
        add(s, ra.id, "gups.4k", gups, unit="GUP/s", better="higher", copies=copies)
        add(s, rb.id, "gups.4k", shifted(gups, 1.3), unit="GUP/s", better="higher", copies=copies)
    for r in (ra, rb):
        s.finish_run(r.id, "complete")
    out = tmp_path / "r.html"
    run_cli("report", "before", "after", "-o", out, check=0)
    return out.read_text()


class Outline(HTMLParser):
    """The page's h2 ids in order, the <details> elements with their summary and the figures' SVG."""

    def __init__(self, html):
        super().__init__()
        self.h2, self.details, self.svgs = [], [], {}
        self._figure = None
        self._summary = False
        self._depth = 0
        self.feed(html)
        self.raw = html

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "h2":
            self.h2.append(a.get("id"))
        elif tag == "details":
            self.details.append({"summary": "", "h2_before": list(self.h2), "tables": 0, "text": ""})
            self._depth += 1
        elif tag == "summary":
            self._summary = True
        elif tag == "table" and self._depth:
            self.details[-1]["tables"] += 1
        elif tag == "figure":
            self._figure = a.get("id")

    def handle_endtag(self, tag):
        if tag == "details":
            self._depth -= 1
        elif tag == "summary":
            self._summary = False

    def handle_data(self, data):
        if self._summary:
            self.details[-1]["summary"] += data
        elif self._depth:
            self.details[-1]["text"] += data


def figures(html: str) -> dict[str, ET.Element]:
    """figure id -> its parsed <svg>."""
    return {m.group(1): ET.fromstring(m.group(2))
            for m in re.finditer(r'<figure id="([^"]+)">(<svg.*?</svg>)</figure>', html, re.S)}


def texts(svg: ET.Element, cls: str) -> list[str]:
    return ["".join(t.itertext()) for t in svg.iter(f"{SVG}text") if t.get("class") == cls]


def test_result_first_machines_folded_after(report_html):
    o = Outline(report_html)
    assert o.h2 == ["tables", "plots", "counters", "profiles", "machines"], o.h2
    # the comparison table comes before any plot, the plots before the machine facts
    assert report_html.index("<table>") < report_html.index("<figure") < report_html.index('<details class="machines"')
    # two folds: the method under the tables (compare --explain's text), the machines last
    assert [d["summary"].split(" (")[0] for d in o.details] == [
        "How the changes are computed", "CPU, memory, kernel, knobs and the rest of each machine"]
    assert "interval method: paired rounds" in o.details[0]["text"]
    d = o.details[1]
    assert d["h2_before"][-1] == "machines" and d["tables"] == 1
    # folded, not dropped: every fact and both values of the one that differs are inside
    assert "thp_enabled" in d["summary"] and "1 of" in d["summary"], d["summary"]
    for fact in ("arch", "cpu_model", "Test CPU", "thp_enabled", "madvise", "always", "runs"):
        assert fact in d["text"], fact
    assert 'class="differs"' in report_html.split('<details class="machines"', 1)[1]


def test_axes_in_units_that_suit_the_numbers(report_html):
    figs = figures(report_html)
    fork = figs[next(k for k in figs if k.startswith("scaling-") and "proc.fork" in
                     "".join(figs[k].find(f"{SVG}title").itertext()))]
    ticks = texts(fork, "tick")
    assert ticks and all(re.fullmatch(r"\d+(\.\d+)? µs", t) for t in ticks), ticks
    assert "600 µs" in ticks and texts(fork, "axis") == ["µs per fork"]     # the catalogue's op
    gups = figs[next(k for k in figs if k.startswith("scaling-") and "gups.4k" in
                     "".join(figs[k].find(f"{SVG}title").itertext()))]
    assert all(re.fullmatch(r"\d+(\.\d+)? MUP/s", t) for t in texts(gups, "tick")), texts(gups, "tick")
    for k, svg in figs.items():
        for t in texts(svg, "tick"):
            assert "e+" not in t and "e-" not in t, (k, t)
        if k.startswith("bars-"):
            assert all(re.fullmatch(r"-?\d+(\.\d+)?%", t) for t in texts(svg, "tick")), texts(svg, "tick")


@pytest.mark.parametrize("unit,values,expect", [
    ("ns/op", [191.6, 250.0], r"\d+ ns"),
    ("ns/op", [6.0e5, 6.2e5], r"\d+ µs"),
    ("ns/op", [2.5e6, 9.0e6], r"\d+(\.\d+)? ms"),
    ("ns", [3.0e9, 4.0e9], r"\d+(\.\d+)? s"),
    ("B", [5.0e6, 6.0e6], r"\d+(\.\d+)? MiB"),
    ("GUP/s", [0.07, 0.09], r"\d+ MUP/s"),
    ("instructions", [3.0e6, 3.5e6], r"\d+(\.\d+)? M"),
    ("samples", [120.0, 130.0], r"\d+"),
])
def test_scaling_axis_unit_from_magnitude(unit, values, expect):
    svg = ET.fromstring(svgplot.scaling("t", unit, [1, 2], {"a": [(1, values[0], values[0], values[0]),
                                                                  (2, values[1], values[1], values[1])]},
                                        caption="point: x; whiskers: y"))
    ticks = texts(svg, "tick")
    assert len(ticks) >= 3 and all(re.fullmatch(expect, t) for t in ticks), ticks


def test_every_whisker_plot_says_what_its_whiskers_are(report_html):
    figs = figures(report_html)
    bars = [k for k in figs if k.startswith("bars-")]
    scal = [k for k in figs if k.startswith("scaling-")]
    assert len(bars) == len(scal) == 6
    for k in bars:
        assert " ".join(texts(figs[k], "caption")) == ("bar: change of the centre, pale when not significant; "
                                                       "whiskers: 95% confidence interval of the change"), k
    for k in scal:
        # too long for one line under the plot: one clause per line
        assert texts(figs[k], "caption") == ["point: centre (geometric mean of the per-repetition medians);",
                                             "whiskers: min-max of the per-repetition medians"], k


def green(fill: str) -> float:
    """How far a heat-map cell is from white towards full green (0..1)."""
    r, g, b = map(int, re.fullmatch(r"rgb\((\d+),(\d+),(\d+)\)", fill).groups())
    return (255 - r) / 155


def cells(svg: ET.Element) -> dict[str, ET.Element]:
    """heat-map cell text ("+12.0% *") -> its rect."""
    out = {}
    for r in svg.iter(f"{SVG}rect"):
        t = r.find(f"{SVG}title")
        if t is not None and ": " in (t.text or ""):
            out[t.text.split(": ", 1)[1].split(" (")[0]] = r
    return out


def test_heat_map_outlier_does_not_flatten_the_others(report_html):
    hm = figures(report_html)["heatmap-0"]
    legend = " ".join(texts(hm, "legend"))
    assert "clipped at" in legend and "outlined cells lie beyond it" in legend, legend
    c = cells(hm)
    out = next(r for k, r in c.items() if k.startswith("+900.0%"))
    assert out.get("class") == "beyond" and out.get("stroke") == "#000"
    assert green(out.get("fill")) == pytest.approx(1.0, abs=0.01)
    assert "\u00b130%" in legend    # gups.4k's +30% is the largest change that is not an outlier
    top = next(r for k, r in c.items() if k.startswith("+30.0%"))
    assert green(top.get("fill")) == pytest.approx(1.0, abs=0.01) and top.get("class") is None
    # with the scale at +-900% this cell would be 1.3% green; clipped at 30%, 40%
    big = next(r for k, r in c.items() if k.startswith("+12.0%"))
    assert green(big.get("fill")) == pytest.approx(12 / 30, abs=0.01) and big.get("class") is None


def test_heat_map_bound():
    # without an outlier the scale is the largest change, and nothing is clipped
    assert svgplot.heat_bound([2.0, -8.0, 12.0, 5.0]) == (12.0, False)
    # one cell far beyond: the largest change within Tukey's fence of |change|
    assert svgplot.heat_bound([2.0, -8.0, 12.0, 5.0, 900.0]) == (12.0, True)
    assert svgplot.heat_bound([1.0, -2.0, 1.5, 3.0, 40.0]) == (svgplot.HEAT_FLOOR, True)
    svg = svgplot.heatmap("t", [1], ["a", "b", "c", "d"], {(1, "a"): (2.0, False), (1, "b"): (-8.0, True),
                                                            (1, "c"): (12.0, False), (1, "d"): (5.0, False)})
    assert "colour scale \u00b112% (the largest |change|" in svg and "clipped" not in svg
    assert svgplot.heat_bound([]) == (svgplot.HEAT_FLOOR, False)


def test_markdown_post_has_the_ranking_of_each_changed_benchmark(tmp_path, home):
    """The post holds the kperfdiff table of the benchmark that changed, not only a link to its
    flame graph (the table was lost behind a `continue`)."""
    s, ra, rb = make_store(home / "kperfdiff.db", p2_reps=3, extra_runs=2)
    add_profiles(s, ra, tmp_path / "pa", "unmap_vmas")
    add_profiles(s, rb, tmp_path / "pb", "zap_pte_range")
    run_cli("report", ra.id, rb.id, "--format", "markdown", "-o", tmp_path / "post.md", check=0)
    md = (tmp_path / "post.md").read_text()
    section = md.split("### x.lat, P=2", 1)[1]
    assert "Common kernel functions: " in section
    assert "zap_pte_range" in section and "Differential flame graph: [flame-0.svg]" in section


def test_one_unit_per_quantity_in_table_and_plot(report_html):
    """The centres table and the scaling plot of one benchmark say the same unit (the plot's axis in
    the table's unit, the catalogue's op in both), and the table's numbers are in it."""
    figs = figures(report_html)
    table = report_html.split("<caption>centres", 1)[1].split("</table>", 1)[0]
    rows = {cells_[0]: cells_ for cells_ in (re.findall(r"<td[^>]*>([^<]*)</td>", tr)
                                             for tr in re.findall(r"<tr>(.*?)</tr>", table)) if cells_}
    for name, unit in (("proc.fork", "µs per fork"), ("gups.4k", "MUP/s")):
        assert rows[name][2] == unit, rows[name]
        plot = figs[next(k for k in figs if k.startswith("scaling-") and
                         "".join(figs[k].find(f"{SVG}title").itertext()).startswith(name + ":"))]
        assert texts(plot, "axis") == [unit]
    assert float(rows["gups.4k"][3].split()[0]) == pytest.approx(70.7, abs=0.5)      # MUP/s, not 0.0707
    assert float(rows["proc.fork"][3].split()[0]) == pytest.approx(607, abs=5)       # µs, as the axis


def test_the_report_leads_with_the_verdict(tmp_path, home):
    """The first thing after the title says what changed, by how much and how sure: a significant
    slowdown as "1.77x slower" with its interval, then what did not change significantly."""
    s, ra, rb = make_store(home / "kperfdiff.db", p2_reps=3, extra_runs=2)
    out, md = tmp_path / "r.html", tmp_path / "r.md"
    run_cli("report", "A", "B", "-o", out, "--no-profiles")
    body = out.read_text().split("</h1>", 1)[1]
    first = re.match(r'\s*<p class="verdict">([^<]*)</p>\s*<p class="verdict">([^<]*)</p>', body)
    assert first, body[:300]
    assert re.fullmatch(r"B is 1\.\d\dx slower than A on x\.lat \(ns/op, P=2\): -\d+\.\d%, 95% interval "
                        r"\[-\d+\.\d%, -\d+\.\d%\], significant after Benjamini-Hochberg \(q = [0-9.e-]+\)\.",
                        first.group(1)), first.group(1)
    assert first.group(2) == "B vs A: y.tput P=1: no significant change (+100.0%, no interval)."
    run_cli("report", "A", "B", "-o", md, "--format", "markdown", "--no-profiles")
    lines = [line for line in md.read_text().splitlines() if line.strip()]
    assert lines[0].startswith("## kperfdiff report") and lines[1] == first.group(1)


def test_no_plot_of_a_single_point(tmp_path, home):
    """One benchmark at one core count: no centre-over-core-counts curve and no one-cell heat map,
    and a line says why; the change bars stay."""
    s = st.Store.open(home / "kperfdiff.db")
    ra, rb = s.start_run(label="a", machine_id=None), s.start_run(label="b", machine_id=None)
    base = [[100.0, 101.0, 102.0], [99.0, 100.0, 103.0], [101.0, 100.0, 100.5]]
    add(s, ra.id, "x.one", base)
    add(s, rb.id, "x.one", shifted(base, 0.5))
    for r in (ra, rb):
        s.finish_run(r.id, "complete")
    out = tmp_path / "r.html"
    run_cli("report", "a", "b", "-o", out, "--no-profiles")
    html = out.read_text()
    assert list(figures(html)) == ["bars-0"]
    assert "No centre-over-core-counts plot: every benchmark ran at one core count (P=1)." in html
    assert "No heat map of a comparison with a single cell" in html
