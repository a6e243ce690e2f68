"""The HTML report: self-contained, loads in a real headless Chromium without console errors,
every label and symbol name escaped; and its Markdown form."""
import fcntl
import json
import os
import select
import shutil
import subprocess
import time

import pytest

from conftest import run_cli
from kperfdiff import compare as cm
from kperfdiff.commands.experiment import write_report
from kperfdiff.report import gather
from test_compare import make_store

EVIL = "<script>alert(1)</script>"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Debian package chromium is not installed")


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
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    for bad in ("http://", "https://", "src=\"//", "@import", "url("):
        assert bad not in html.replace('xmlns="http://www.w3.org/2000/svg"', ""), bad
    # sections: machine facts with differences, tables, plots, counters, the profile diff and flame graph
    assert 'class="differs"' in html and "thp_enabled" in html
    assert html.count("<table>") >= 5 and html.count("<svg") >= 6
    assert "THP fault alloc" in html
    assert "unmap_vmas" in html and "Top 5 candidates among common kernel functions" in html


def test_markdown_with_svgs_beside(tmp_path, evil_store):
    s, ra, rb = evil_store
    r = run_cli("report", ra.id, rb.id, "--format", "markdown", "-o", tmp_path / "post.md", check=0)
    md = (tmp_path / "post.md").read_text()
    svgs = sorted(p.name for p in (tmp_path / "post.files").iterdir())
    assert "heatmap-0.svg" in svgs and any(n.startswith("flame-") for n in svgs)
    assert "(post.files/heatmap-0.svg)" in md and "| P | x.lat | y.tput | geomean |" in md
    assert "<script>" not in md and str(tmp_path / "post.md") in r.stdout
    for n in svgs:
        assert "<script>" not in (tmp_path / "post.files" / n).read_text()


# -- a minimal Chrome DevTools Protocol client over --remote-debugging-pipe ------------

class Chrome:
    """Chromium with CDP on file descriptors 3 (commands in) and 4 (events out)."""

    def __init__(self, profile_dir):
        cmd_r, self.cmd_w = os.pipe()
        self.ev_r, ev_w = os.pipe()
        hi_r = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 100)
        hi_w = fcntl.fcntl(ev_w, fcntl.F_DUPFD, 100)

        def child():
            os.dup2(hi_r, 3)
            os.dup2(hi_w, 4)
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-extensions", f"--user-data-dir={profile_dir}", "--remote-debugging-pipe", "about:blank"],
            preexec_fn=child, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for fd in (cmd_r, ev_w, hi_r, hi_w):
            os.close(fd)
        self.buf = b""
        self.next_id = 0
        self.events = []

    def _read(self, timeout):
        r, _, _ = select.select([self.ev_r], [], [], timeout)
        if r:
            chunk = os.read(self.ev_r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the devtools pipe")
            self.buf += chunk
        out = []
        while b"\0" in self.buf:
            msg, self.buf = self.buf.split(b"\0", 1)
            out.append(json.loads(msg))
        return out

    def send(self, method, params=None, session=None, timeout=30):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while time.time() < deadline:
            for m in self._read(0.5):
                if m.get("id") == self.next_id:
                    if "error" in m:
                        raise RuntimeError(m["error"])
                    return m["result"]
                self.events.append(m)
        raise TimeoutError(method)

    def wait_event(self, name, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if any(e.get("method") == name for e in self.events):
                return
            self.events += self._read(0.5)
        raise TimeoutError(name)

    def close(self):
        try:
            self.send("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.cmd_w)
        os.close(self.ev_r)


def load_in_chromium(path, profile_dir):
    """Open a page; return (console and log errors, page facts)."""
    ch = Chrome(profile_dir)
    try:
        target = ch.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        sid = ch.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for dom in ("Runtime.enable", "Log.enable", "Page.enable"):
            ch.send(dom, session=sid)
        ch.send("Page.navigate", {"url": path.as_uri()}, session=sid)
        ch.wait_event("Page.loadEventFired")
        time.sleep(0.3)
        facts = ch.send("Runtime.evaluate", {"returnByValue": True, "expression": """JSON.stringify({
            tables: document.querySelectorAll('table').length,
            svgs: document.querySelectorAll('svg').length,
            drawn: [...document.querySelectorAll('svg')].filter(s => s.getBoundingClientRect().width > 50).length,
            scripts: document.querySelectorAll('script').length,
            title: document.title,
            text: document.body.innerText})"""}, session=sid)
        ch.events += ch._read(0.2)
        errors = []
        for e in ch.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                errors.append(("console", p.get("args")))
            elif m == "Runtime.exceptionThrown":
                errors.append(("exception", p.get("exceptionDetails", {}).get("text")))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                errors.append(("log", p["entry"].get("text")))
        return errors, json.loads(facts["result"]["value"])
    finally:
        ch.close()


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
    assert facts["scripts"] == 0
    assert EVIL in facts["text"] and EVIL in facts["title"] or EVIL in facts["text"]


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
    assert ">> change: huge vs 4k (baseline)" in r.stdout
    assert ">> benchmark that moved most: fault.anon.{p} -P 1" in r.stdout
    assert "candidates among common kernel functions" in r.stdout or "no profiles" not in r.stdout
    assert f"report: {out}" in r.stdout and out.exists()
