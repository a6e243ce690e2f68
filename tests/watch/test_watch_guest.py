"""`kperfdiff watch` in a deterministic guest (QEMU TCG, -icount), as the bisection's guest test
(tests/bisection/test_bisect_guest.py): a prebuilt Debian kernel booted with each commit's command line,
exact kernel instructions per operation of proc.fork, one repetition per commit. A branch receives 12
commits one by one, each followed by a look; commit 4 turns on init_on_alloc=1 (zero every allocation:
fork does more work), commit 8 turns it off again. With improvements bisected too, the watch names exactly
those two commits as culprits, verified, and nothing else; with profile = true each culprit is explained
by the ranking of culprit against parent from their stored profiles, the zeroing functions first, in the
text report, the JSON, the --notify report and the change page. About 20 deterministic boots with
profiles: 169 s on this 2-vCPU VM, so it runs in `make test-slow`, and `make test` keeps the local twin
(tests/watch/test_watch_local.py, command-line settings through a benchmark parameter, 41 s)."""
import json

import pytest

from support import run_cli
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
SUBJECTS = {4: "mm: zero every allocation (init_on_alloc=1)", 8: "mm: stop zeroing allocations (init_on_alloc=0)"}


@need_guest
@pytest.mark.slow
def test_init_on_alloc_on_then_off_gets_its_two_culprits_verified_and_explained(tmp_path):
    repo, store, suite = tmp_path / "repo", tmp_path / "k.db", tmp_path / "suite.toml"
    suite.write_text(SUITE)
    commits = []
    for i in range(12):
        on = 4 <= i < 8
        commits.append(push(repo, [f"append=init_on_alloc={int(on)}"], SUBJECTS.get(i, f"notes: entry {i}")))
        last = look(store, suite, repo, "--format", "json", "--notify", f"cat >> {tmp_path / 'mails.txt'}")
        [w] = validate("watch", last.stdout)["watches"]
        assert [m["commit"] for m in w["measured"]] == [commits[-1]], last.stderr
    assert watch_runs(store) == commits
    current = [c for c in w["changes"] if c["state"] == "current"]
    assert sorted((c["direction"], c["culprit"]["hash"]) for c in current) == sorted(
        [("regression", commits[4]), ("improvement", commits[8])]), json.dumps(w["changes"], indent=1)
    for c in current:
        assert c["culprit"]["verified"] is True and c["bisection"]["state"] == "done"
        assert c["culprit"]["subject"] == SUBJECTS[commits.index(c["culprit"]["hash"])]
    assert w["queue"]["bisect"] == {"queued": 0, "running": 0, "done": 2, "failed": 0}
    # explained: the zeroing functions head the ranking of culprit against parent, up at the regression's
    # culprit and down at the improvement's
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
    print(status)


def zeroing(name: str) -> bool:
    """The kernel's functions that zero memory, by their names (as test_bisect_guest.py checks them)."""
    return "memset" in name or "clear_page" in name or "zero" in name
