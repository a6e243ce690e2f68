"""What a watch publishes: the static site and feed of `kperfdiff watch --publish` (opened in headless
Chromium: no console error, the plot's change-point marker, the links between index and change page),
and `--notify`, a real shell command given each culprit once, whose failure is one line and loses
nothing. The store is made with the watch's own API (tests/watch/test_changes.py): twelve commits,
commit 5 twice as slow, its change point found by the watch's analysis and its bisection's outcome
attached as the watch's worker attaches it."""
import json
import sqlite3

from kperfdiff.bisect import run as bisect_run
from kperfdiff.render.watchsite import NOT_PROFILED
from kperfdiff.store import Store
from kperfdiff.watch import changes
from kperfdiff.watch.follow import Line
from kperfdiff.watch.run import command
from schemas.test_schemas import validate
from support import assert_one_sentence_error, run_cli
from support.chromium import Chrome, Page, needs_chromium
from watch.test_changes import BENCH, COMMITS, SLOWER, SUITE, measure
from watch.test_watch_local import commit

CULPRIT = COMMITS[5]


def watched_store(path, repo="/src/linux") -> Store:
    """A watch "w" with a regression at commit 5, bisected: culprit commit 5, verified."""
    s = Store.open(path)
    measure(s, SLOWER, *range(12))
    [cid] = changes.update(s, SUITE, Line("main", COMMITS[-1].hash, COMMITS, COMMITS), "local", BENCH)
    item = s.claim_item("w", "me", 60, kinds=("bisect",))
    opts = bisect_run.Options(repo=repo, good=item.good, bad=item.commit, bench=BENCH.name, cores=1, target="local",
                              build="./build.sh", reps=3, max_reps=9, profile=False)
    detail = {"outcome": "culprit", "culprit": {"hash": CULPRIT.hash, "subject": CULPRIT.subject,
                                                "author": CULPRIT.author},
              "verified": True, "verification_percent": 99.7, "profiled": False,
              "command": command(repo, opts, BENCH)}
    assert s.finish_item(item.id, "me", "done", detail=detail)
    s.attach_culprit(item.id, culprit=CULPRIT.hash, subject=CULPRIT.subject, author=CULPRIT.author, verified=True,
                     detail=detail)
    return s


@needs_chromium
def test_the_site_and_its_feed_show_the_change_point_and_its_culprit(tmp_path):
    watched_store(tmp_path / "k.db")
    site = tmp_path / "site"
    run_cli("--store", tmp_path / "k.db", "watch", "--status", "--publish", site, "--no-progress")
    feed = validate("watch --publish", (site / "feed.json").read_text())
    [w] = feed["watches"]
    [series] = w["series"]
    assert [p["commit"] for p in series["points"]] == [c.hash for c in COMMITS]       # commit order
    [c] = w["changes"]
    assert series["changes"] == [{"change": c["id"], "index": 5}] and c["series"] == series["id"]
    assert (c["before"]["commit"], c["after"]["commit"], c["culprit"]["hash"]) == (COMMITS[4].hash, CULPRIT.hash,
                                                                                    CULPRIT.hash)
    assert c["direction"] == "regression" and c["interval"]["low"] <= c["percent"] <= c["interval"]["high"] < 0
    assert f"--good '{CULPRIT.hash}^' --bad {CULPRIT.hash}" in c["reproduce"]["verify"]
    assert sorted(p.name for p in site.iterdir()) == ["change-1.html", "feed.json", "index.html"]
    ch = Chrome(tmp_path / "chrome")
    try:
        index = Page(ch, site / "index.html", width=1200)
        assert index.eval("document.querySelectorAll('svg line.change').length") == 1      # the change-point marker
        assert index.eval("document.querySelectorAll('svg circle').length") == 12
        link = index.eval("(() => { const b = document.querySelector('a.change-link').getBoundingClientRect();"
                          " return {x: b.x + 5, y: b.y + b.height / 2}; })()")
        ch.events = []
        index.click(link["x"], link["y"])
        ch.wait_event("Page.loadEventFired")
        assert index.eval("location.pathname").endswith("/change-1.html")
        text = index.eval("document.body.innerText")
        assert CULPRIT.hash in text and CULPRIT.subject in text and "Verified" in text and NOT_PROFILED in text
        assert f"--good '{CULPRIT.hash}^'" in text
        assert index.eval("document.querySelectorAll('svg line.change').length") == 1
        back = index.eval("(() => { const b = document.querySelector('a#back').getBoundingClientRect();"
                          " return {x: b.x + 5, y: b.y + b.height / 2}; })()")
        index.click(back["x"], back["y"])
        ch.wait_event("Page.loadEventFired")
        assert index.eval("location.pathname").endswith("/index.html")
        assert index.errors() == []
    finally:
        ch.close()


def notified(store) -> list:
    with sqlite3.connect(store) as c:
        return [n is not None for (n,) in c.execute("SELECT notified FROM watch_change ORDER BY id")]


def test_notify_runs_a_shell_command_once_per_culprit_and_a_failure_loses_nothing(tmp_path):
    repo, store, suite = tmp_path / "repo", tmp_path / "k.db", tmp_path / "suite.toml"
    commit(repo, 100, "base")
    watched_store(store, repo=str(repo))
    suite.write_text('name = "w"\nbenchmarks = ["select.file.100"]\nreps = 2\nbuild = "./build.sh"\n')
    mails = tmp_path / "mails"
    look = ["--store", store, "watch", suite, "--repo", repo, "--branch", "main", "--no-progress"]
    failed = run_cli(*look, "--notify", "echo no mail server >&2; exit 3", check=0)
    assert "--notify exited with status 3 for culprit" in failed.stderr and "(no mail server)" in failed.stderr
    assert failed.stderr.count("--notify") == 1 and notified(store) == [False]
    run_cli(*look, "--notify", f"cat >> {mails}; echo --- >> {mails}", check=0)
    text = mails.read_text()
    assert text.count("\n---\n") == 1 and notified(store) == [True]
    for words in (f"commit: {CULPRIT.hash}", f"subject: {CULPRIT.subject}", f"author: {CULPRIT.author}",
                  "benchmark: x.lat@1", "target: local", "95% interval [", "verification: verified",
                  "functions: not profiled", f"kperfdiff bisect --repo {repo}", f"--good '{CULPRIT.hash}^'"):
        assert words in text, (words, text)
    run_cli(*look, "--notify", f"cat >> {mails}; echo --- >> {mails}", check=0)       # once
    assert mails.read_text() == text
    r = run_cli("--store", store, "watch", "--status", "--notify", "true", check=2)
    assert_one_sentence_error(r)
    assert json.loads(run_cli("--store", store, "watch", "--status", "--format", "json").stdout)["version"] == 1
