"""GOOD and BAD are measured one repetition of each in turn, as the verification is, every other
round in the reverse order, so that a burst of load, a drift of the machine or a cost of going first
falls on both alike: measured as two blocks, the
reference of validation/bisect_accuracy.py's series came out -18% for a 5% slow-down, and
"significant" at -0.6% on a series where nothing changed (tight repetitions, two moments)."""
import json
import sqlite3

from support import run_cli
from support.bisect_repo import make_series, refused_null

BENCH = "select.file.100"


def test_good_and_bad_are_measured_one_repetition_of_each_in_turn(tmp_path):
    s = make_series(tmp_path / "repo", 2, None, good=[f"param={BENCH}:n=100"], bad=[])

    def bisect(store):
        return run_cli("--store", store, "bisect", "--repo", s.path, "--good", s.commits[0], "--bad", s.commits[-1],
                       "--bench", BENCH, "--build", "./build.sh", "--reps", "3", "--max-reps", "3", "--no-profile",
                       "--no-progress")
    r, store = refused_null(bisect, tmp_path / "k")
    assert r.returncode == 3, r.stderr
    with sqlite3.connect(store) as c:
        tags = [json.loads(o)["bisect"]["commit"] for (o,) in c.execute(
            "SELECT options FROM run WHERE state='complete' AND options LIKE ? ORDER BY id", ('%"bisect"%',))]
    g, b = s.commits[0], s.commits[-1]
    assert tags == [g, b, b, g, g, b]         # every other round reversed: order costs fall on both alike
    # resuming measures nothing again
    r = bisect(store)
    assert r.returncode == 3
    with sqlite3.connect(store) as c:
        assert c.execute("SELECT count(*) FROM run WHERE options LIKE ?", ('%"bisect"%',)).fetchone()[0] == 6
