"""The HTML report: self-contained, loads in a real headless Chromium without console errors,
every label and symbol name escaped; and its Markdown form."""
import base64
import hashlib
import json
import re
import shutil

import pytest

from support.chromium import Chrome, Page, load_in_chromium, needs_chromium
from support import run_cli
from kperfdiff.analysis import bench_compare as cm
from kperfdiff.commands.experiment import write_report
from kperfdiff.render import diff as rdiff
from kperfdiff.analysis.report_data import gather
from analysis.test_compare import make_store

EVIL = "<script>alert(1)</script>"


def add_profiles(s, run, folder, hot):
    """Folded-stack profiles of x.lat -P 2: ``hot`` gets most samples."""
    folder.mkdir(parents=True, exist_ok=True)
    for rep in range(2):
        f = folder / f"x.lat.P2.r{rep}.folded"
        f.write_text(f"worker;entry_SYSCALL_64_[k];do_syscall_64_[k];{hot}_[k] {900 + rep}\n"
                     f"worker;entry_SYSCALL_64_[k];do_syscall_64_[k];clear_page_erms_[k] {100 + rep}\n"
                     f"worker;main {50}\n")
        s.add_profile(run_id=run.id, result_id=None, benchmark="x.lat", rep=rep, path=str(f), kallsyms=None,
                      event="cpu-clock", samples=None, cpu_time_ns=10 ** 9, ops=1000, meta={"copies": 2})


@pytest.fixture
def evil_store(tmp_path, home):
    s, ra, rb = make_store(home / "kperfdiff.db", label_b=EVIL, p2_reps=3, extra_runs=2)
    add_profiles(s, ra, tmp_path / "pa", "unmap_vmas")
    add_profiles(s, rb, tmp_path / "pb", EVIL)
    return s, ra, rb


def test_html_is_self_contained_and_escaped(tmp_path, evil_store):
    s, ra, rb = evil_store
    c = cm.from_runs(s, [str(ra.id), str(rb.id)])
    out = write_report(gather(s, c), tmp_path / "r.html")
    html = out.read_text()
    # one script, the flame graphs' own; the evil label is text
    assert html.lower().count("<script") == 1 and html.count("<script>") == 1
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # nothing to fetch (url(#id) is a pattern of the page itself)
    for bad in ("http://", "https://", "src=\"//", "@import", "url("):
        assert bad not in html.replace('xmlns="http://www.w3.org/2000/svg"', "").replace("url(#", ""), bad
    # sections: machine facts with differences, tables, plots, counters, the profile diff and flame graph
    assert 'class="differs"' in html and "thp_enabled" in html
    assert html.count("<table>") >= 5 and html.count("<svg") >= 6
    assert "THP fault alloc" in html
    assert "unmap_vmas" in html and "Common kernel functions: " in html
    # the profile diff starts with a line per side, as the diff command's output does
    sides = re.findall(r'<p class="note side">(.*?)</p>', html)
    assert len(sides) == 2 and sides[0].startswith("A (") and sides[1].startswith("B (&lt;script&gt;"), sides
    assert all(re.search(r": 2 profiles \(x\.lat\.P2\.r0\.folded, \.\.\.\), unknown, [\d,]+ samples, 9\d% kernel, \d+% user, "
                         r"symbols: as named in the file$", side) for side in sides), sides


def scripts_and_csp(html: str) -> tuple[list[str], dict[str, list[str]]]:
    """The inline scripts of a page, and its Content-Security-Policy (directive -> sources)."""
    scripts = re.findall(r"<script>(.*?)</script>", html, re.S)
    meta = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', html)
    assert meta, "no Content-Security-Policy"
    csp = {}
    for d in meta.group(1).split(";"):
        name, *sources = d.split()
        csp[name] = sources
    return scripts, csp


def test_csp_allows_exactly_the_emitted_script(tmp_path, evil_store):
    """The policy's script-src is the SHA-256 of the script the page carries, recomputed here."""
    s, ra, rb = evil_store
    c = cm.from_runs(s, [str(ra.id), str(rb.id)])
    html = write_report(gather(s, c), tmp_path / "r.html").read_text()
    scripts, csp = scripts_and_csp(html)
    assert len(scripts) == 1 and 'class="kpd-flame"' in html
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    assert csp["script-src"] == [f"'sha256-{digest}'"]
    assert csp["default-src"] == ["'none'"]
    assert not any("unsafe" in src for src in csp["script-src"])
    assert "<noscript>" in html


def test_no_script_without_flame_graphs(tmp_path, home):
    """A report without profile diffs carries no script and its policy allows none."""
    s, ra, rb = make_store(home / "kperfdiff.db")
    c = cm.from_runs(s, [str(ra.id), str(rb.id)])
    html = write_report(gather(s, c), tmp_path / "r.html").read_text()
    scripts, csp = scripts_and_csp(html)
    assert scripts == [] and "<script" not in html and "script-src" not in csp


def test_markdown_with_svgs_beside(tmp_path, evil_store):
    s, ra, rb = evil_store
    r = run_cli("report", ra.id, rb.id, "--format", "markdown", "-o", tmp_path / "post.md", check=0)
    md = (tmp_path / "post.md").read_text()
    svgs = sorted(p.name for p in (tmp_path / "post.files").iterdir())
    assert "heatmap-0.svg" in svgs and any(n.startswith("flame-") for n in svgs)
    assert "(post.files/heatmap-0.svg)" in md and "| benchmark | P | change | % | interval | detectable | verdict | mark |" in md
    # the hostile label's tag is escaped (a backslash before its '<'), never written as an HTML entity
    assert not re.search(r"(?<!\\)<script", md) and "&lt;" not in md and str(tmp_path / "post.md") in r.stdout
    for n in svgs:
        text = (tmp_path / "post.files" / n).read_text()
        assert EVIL not in text
        # the flame graphs are standalone and interactive: their one script, nothing else
        assert text.count("<script") == (1 if n.startswith("flame-") else 0), n


@needs_chromium
def test_chromium_detects_errors_in_a_bad_page(tmp_path):
    """The check itself works: a page with a console error and a failed fetch is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><table></table><script>console.error('boom')</script>"
                   "<img src='http://127.0.0.1:9/x.png'></body></html>")
    errors, facts = load_in_chromium(bad, tmp_path / "chrome-bad")
    assert any(k == "console" for k, _ in errors), errors
    assert facts["tables"] == 1


@needs_chromium
def test_report_loads_in_headless_chromium(tmp_path, evil_store):
    s, ra, rb = evil_store
    c = cm.from_runs(s, [str(ra.id), str(rb.id)])
    out = write_report(gather(s, c), tmp_path / "report.html")
    errors, facts = load_in_chromium(out, tmp_path / "chrome")
    assert errors == [], errors
    assert facts["tables"] >= 5 and facts["svgs"] >= 6 and facts["drawn"] == facts["svgs"]
    assert facts["scripts"] == 1
    assert EVIL in facts["text"] and EVIL in facts["title"] or EVIL in facts["text"]


@needs_chromium
def test_report_flame_graph_runs_under_its_csp(tmp_path, evil_store):
    """In the report the flame graph's script runs (allowed by its hash: no CSP violation is
    logged): a search highlights a frame, a click zooms one to the full width. The same page
    with one byte of the script changed is refused by the policy (the check can fail), and
    with JavaScript off the graph is drawn, static, its controls hidden."""
    s, ra, rb = evil_store
    c = cm.from_runs(s, [str(ra.id), str(rb.id)])
    out = write_report(gather(s, c), tmp_path / "report.html")
    html = out.read_text()
    tampered = tmp_path / "tampered.html"
    tampered.write_text(html.replace("'use strict';", "'use strict'; ", 1))
    ch = Chrome(tmp_path / "chrome")
    try:
        page = Page(ch, out, width=1300)
        search = page.flame_control("k-search")
        assert search["shown"]
        page.click(search["x"], search["y"], dialog_text="unmap")
        hit = page.flame_frame("unmap_vmas")
        assert hit["fill"] == "rgb(230, 0, 230)" and hit["w"] < 1180
        assert page.flame_control("k-matched")["text"].startswith("1 frame match /unmap/: A ")
        page.click(hit["x"], hit["y"])
        zoomed = page.flame_frame("unmap_vmas")
        assert zoomed["w"] == 1180 and abs(zoomed["screen_w"] - 1180) < 1
        assert not page.flame_frame(EVIL)["shown"]
        assert page.errors() == []

        bad = Page(ch, tampered, width=1300)
        assert any(kind == "log" and "Content Security Policy" in (text or "") for kind, text in bad.errors())
        assert not bad.flame_control("k-search")["shown"]

        static = Page(ch, out, width=1300, javascript=False)
        frame = static.flame_frame("unmap_vmas")
        assert frame["shown"] and 0 < frame["w"] < 1180
        assert "unmap_vmas" in static.eval("document.querySelector('svg.kpd-flame').textContent")
        drawn = static.eval("[...document.querySelectorAll('svg.kpd-flame g.f rect')]"
                            ".filter(r => r.getBoundingClientRect().width > 0).length")
        assert drawn >= 5
        assert static.eval("getComputedStyle(document.querySelector('svg.kpd-flame .k-search')).display") == "none"
    finally:
        ch.close()


def _thp_on():
    try:
        return "[never]" not in open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return False


@pytest.mark.skipif(shutil.which("perf") is None or not _thp_on(), reason="needs perf and transparent huge pages")
def test_run_with_profiles_prints_table_diff_and_report(tmp_path, home):
    """The demo's path on a tiny experiment: run --report prints the table, a kperfdiff table and the path."""
    exp = tmp_path / "p.toml"
    exp.write_text('name = "prof"\nbenchmarks = ["fault.anon.{p}"]\ncores = [1]\nreps = 1\nintervals = 2\n'
                   'min_batch_ms = 1\ntiny = true\nprofile = true\nprofile_freq = 999\n'
                   '[[variant]]\nlabel = "4k"\nvars = { p = "4k" }\n'
                   '[[variant]]\nlabel = "huge"\nvars = { p = "huge" }\n')
    out = tmp_path / "r.html"
    r = run_cli("run", exp, "--no-progress", "--report", out, check=0)
    assert "change: huge vs 4k (baseline)\n" in r.stdout
    assert "benchmark that moved most: fault.anon -P 1, huge vs 4k: " in r.stdout
    assert "Common kernel functions: " in r.stdout or "no profiles" not in r.stdout
    assert f"report: {out}" in r.stdout and out.exists()
    # the report names the column plainly, never by its template
    assert "{p}" not in out.read_text()


def test_report_diffs_every_repetition_as_diff_does(tmp_path, home):
    """The report's profile diff ranks every stored repetition of each side (8 here), the same
    numbers as `kperfdiff diff RUN:BENCH@CORES` of the same references; the last two repetitions of
    B spend most of their time in late_fn, which a report of the first 6 would not see."""
    s, ra, rb = make_store(home / "kperfdiff.db", p2_reps=3, extra_runs=2)
    for run, folder, late in ((ra, tmp_path / "pa", 0), (rb, tmp_path / "pb", 3000)):
        folder.mkdir()
        for rep in range(8):
            f = folder / f"x.lat.P2.r{rep}.folded"
            f.write_text(f"worker;entry_SYSCALL_64_[k];do_syscall_64_[k];unmap_vmas_[k] {900 + 10 * rep}\n"
                         f"worker;entry_SYSCALL_64_[k];do_syscall_64_[k];clear_page_erms_[k] {100 + rep}\n"
                         + (f"worker;entry_SYSCALL_64_[k];late_fn_[k] {late}\n" if rep >= 6 and late else "")
                         + "worker;main 50\n")
            s.add_profile(run_id=run.id, result_id=None, benchmark="x.lat", rep=rep, path=str(f), kallsyms=None,
                          event="cpu-clock", samples=None, cpu_time_ns=10 ** 9, ops=1000, meta={"copies": 2})
    data = gather(s, cm.from_runs(s, ["A", "B"]))
    (pd,) = data.diffs
    assert not pd.error
    cli = json.loads(run_cli("diff", "A:x.lat@2", "B:x.lat@2", "--format", "json", check=0).stdout)
    report = json.loads(rdiff.to_json_text(pd.result))
    for section in ("common", "only_a", "only_b"):
        assert report[section] == cli[section], section
    assert report["sides"]["b"]["samples"] == cli["sides"]["b"]["samples"]
    assert pd.reps == (8, 8)
    late_row = next(r for r in cli["only_b"] if r["symbol"] == "late_fn")
    md = write_report(data, tmp_path / "r.md", "markdown").read_text()
    assert "profiles of every stored repetition, parallel copies merged: 8 of A, 8 of B" in md
    assert re.search(rf"\n\| {late_row['value_b']:.2f} \|[^\n]*\| late_fn( ~)? \|\n", md)
