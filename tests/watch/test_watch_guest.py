"""`kperfdiff watch` in a deterministic guest (QEMU TCG, -icount), as the bisection's guest test
(tests/bisection/test_bisect_guest.py): a prebuilt Debian kernel booted with each commit's command line,
exact kernel instructions per operation of proc.fork, one repetition per commit. One commit turns on
init_on_alloc=1 (zero every allocation: fork does more work), a later one turns it off again. With
improvements bisected too, the watch names exactly those two commits as culprits, verified, and nothing
else; with profile = true each culprit is explained by the ranking of culprit against parent from their
stored counts, the zeroing functions first, in the text report, the JSON, the --notify report and the
change page.

The bisections take the watch's own counts for GOOD and BAD, and the verification the counts stored for
culprit and parent (a deterministic guest counts the same on every boot), so only probes boot.

- In `make test`: `commits = "newest"` and pushes of one to two commits: 6 commits measured, each
  bisection probes the one commit between its ends: 8 boots (about 70 s here).
- In `make test-slow`: 12 commits pushed one by one, each measured: 12 boots (about 100 s here).
"""
import json

import pytest

from support import run_cli
from support.chromium import CHROMIUM, Chrome, Page
from support.bisect_repo import push
from bisection.test_bisect_guest import ARCH, need_guest
from schemas.test_schemas import validate
from watch.test_watch_local import look, watch_runs

SUITE = f"""name = "guest-sentinel"
benchmarks = ["proc.fork"]
targets = ["qemu:{ARCH},deterministic"]
metric = "instructions"
reps = 1
build = "./build.sh"
improvements = true
profile = true
"""
ON, OFF = "mm: zero every allocation (init_on_alloc=1)", "mm: stop zeroing allocations (init_on_alloc=0)"


def sentinel(tmp_path, pushes: list[list[bool]], suite: str) -> tuple[list[str], list[str], dict, list[dict]]:
    """Each push's commits (init_on_alloc on or off in each), a look after each push; the commits, those
    measured, the last look's watch and its current change points."""
    repo, store, path = tmp_path / "repo", tmp_path / "k.db", tmp_path / "suite.toml"
    path.write_text(suite)
    commits, measured, subjects, was = [], [], {}, None
    for commits_of_push in pushes:
        for on in commits_of_push:
            subject = (ON if on else OFF) if was is not None and on != was else f"notes: entry {len(commits)}"
            commits.append(push(repo, [f"append=init_on_alloc={int(on)}"], subject))
            subjects[commits[-1]], was = subject, on
        last = look(store, path, repo, "--format", "json", "--notify", f"cat >> {tmp_path / 'mails.txt'}")
        [w] = validate("watch", last.stdout)["watches"]
        assert [m["commit"] for m in w["measured"]] == [commits[-1]], last.stderr      # the tip, once
        measured.append(commits[-1])
    assert watch_runs(store) == measured
    current = [c for c in w["changes"] if c["state"] == "current"]
    assert all(c["culprit"] for c in current), json.dumps(w["changes"], indent=1)
    culprits = sorted((c["direction"], c["culprit"]["hash"]) for c in current)
    turned = [c for c in commits if subjects[c] in (ON, OFF)]
    assert culprits == sorted([("regression", turned[0]), ("improvement", turned[1])]), json.dumps(w["changes"], indent=1)
    for c in current:
        assert c["culprit"]["verified"] is True and c["bisection"]["state"] == "done"
        assert c["culprit"]["subject"] == subjects[c["culprit"]["hash"]]
    assert w["queue"]["bisect"] == {"queued": 0, "running": 0, "done": 2, "failed": 0}
    explained(tmp_path, store, current)
    return commits, measured, w, current


def explained(tmp_path, store, current: list[dict]) -> None:
    """The zeroing functions head each culprit's ranking against its parent, up at the regression's culprit
    and down at the improvement's, in the JSON, the status, the --notify report and the change page."""
    for c in current:
        e = c["explanation"]
        assert e["error"] is None and "--event instructions" in e["command"], e
        first = e["functions"][0]
        assert zeroing(first["symbol"]) and first["section"] == "common", e["functions"][:3]
        assert (first["change"] > 0) == (c["direction"] == "regression"), first
    names = [c["explanation"]["functions"][0]["symbol"] for c in current]
    status = run_cli("--store", store, "watch", "--status", "--publish", tmp_path / "site", check=0).stdout
    mails = (tmp_path / "mails.txt").read_text()
    assert status.count("top functions (culprit against its parent") == 2 and mails.count("top functions") == 2
    for c, name in zip(current, names):
        page = (tmp_path / "site" / f"change-{c['id']}.html").read_text()
        assert name in status and name in mails and name in page and "<table" in page
        # the differential flame graph of culprit against parent, its frames named
        flame = page[page.index('<h2 id="flame">'):]
        assert "<svg" in flame and name in flame
    if CHROMIUM:         # the page's flame graph script runs under its Content-Security-Policy
        ch = Chrome(tmp_path / "chrome")
        try:
            page = Page(ch, tmp_path / "site" / f"change-{current[0]['id']}.html", width=1200)
            assert page.eval("document.querySelectorAll('#flame ~ .flame svg g').length") > 3
            assert page.errors() == []
        finally:
            ch.close()
    print(status)


@need_guest
@pytest.mark.long
def test_the_tip_of_each_push_measured_and_both_changes_bisected_to_their_commits(tmp_path):
    commits, measured, w, current = sentinel(
        tmp_path, [[False], [False], [False, True], [True], [False, False], [False]],
        SUITE + 'commits = "newest"\n')
    assert len(commits) == 8 and len(measured) == 6
    for c in current:        # each bisection probed the one commit between its ends, nothing else booted
        assert c["bisection"]["probes"] == 1, c["bisection"]


@need_guest
@pytest.mark.slow
def test_init_on_alloc_on_then_off_gets_its_two_culprits_verified_and_explained(tmp_path):
    commits, measured, w, current = sentinel(tmp_path, [[4 <= i < 8] for i in range(12)], SUITE)
    assert measured == commits and len(commits) == 12
    for c in current:        # adjacent commits: GOOD, BAD, parent and culprit all the watch's counts
        assert c["bisection"]["probes"] == 0, c["bisection"]


def zeroing(name: str) -> bool:
    """The kernel's functions that zero memory, by their names (as test_bisect_guest.py checks them)."""
    return "memset" in name or "clear_page" in name or "zero" in name
