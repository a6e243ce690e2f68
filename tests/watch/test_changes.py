"""The change points of a watched series (kperfdiff.watch.changes), on a store made with the store's own
API: points in commit order, whatever order the commits were measured in; a change point recorded once
and bisected once; one that a commit measured later puts between other commits is marked moved, and
the new one is bisected; a second branch with the same two commits shares the bisection and gets its
culprit at once."""
from kperfdiff.bisect.git import Commit
from kperfdiff.store import Store
from kperfdiff.watch import changes
from kperfdiff.watch.follow import Line, measure_key
from kperfdiff.watch.suite import Bench, Suite
from store.test_history import populate

BENCH = Bench("x.lat", 1)
SUITE = Suite(name="w", path="w.toml", benches=(BENCH,), targets=("local",), build="./build.sh")
COMMITS = [Commit(f"{i:040x}", f"change {i}", "A <a@example.org>") for i in range(12)]
SLOWER = [100.0] * 5 + [200.0] * 7         # commit 5 makes x.lat twice as slow
FASTER = [200.0] * 5 + [100.0] * 7         # commit 5 makes it twice as fast


def measure(s: Store, level: list[float], *indexes: int) -> None:
    """Store runs of these commits at their ``level``, as the watch's measurements (done items naming
    their runs); each run starts an hour before the one stored before it."""
    for i in indexes:
        [run] = populate(s, [level[i]], commit=[COMMITS[i].hash], start=1_700_000_000.0 - 3600 * i, label=f"c{i}")
        s.queue_item(watch="w", kind="measure", key=measure_key(SUITE, "local", BENCH.id, COMMITS[i].hash),
                     branch="main", target="local", benchmark=BENCH.id, commit=COMMITS[i].hash, position=i)
        item = s.claim_item("w", "me", 60, kinds=("measure",))
        assert s.finish_item(item.id, "me", "done", run_id=run.id)


def test_a_change_point_moves_when_a_commit_between_is_measured_and_is_bisected_once(tmp_path):
    s = Store.open(tmp_path / "k.db")
    main = Line("main", COMMITS[-1].hash, COMMITS, COMMITS)
    measure(s, SLOWER, 10, 8, 6, 4, 2, 0)       # every other commit, the newest measured first
    [series] = changes.series_of(s, SUITE, main, "local", BENCH)
    assert [p.commit for p in series.points] == [COMMITS[i].hash for i in (0, 2, 4, 6, 8, 10)]   # commit order
    [first] = changes.update(s, SUITE, main, "local", BENCH)
    [c] = s.watch_changes("w")
    assert (c.id, c.before, c.after, c.direction, c.state) == (first, COMMITS[4].hash, COMMITS[6].hash, "regression",
                                                                "current")
    [b1] = s.watch_items("w", kind="bisect")
    assert (b1.good, b1.commit, c.bisect_item) == (COMMITS[4].hash, COMMITS[6].hash, b1.id)
    assert changes.update(s, SUITE, main, "local", BENCH) == []       # nothing new: nothing recorded or queued
    assert len(s.watch_items("w", kind="bisect")) == 1
    measure(s, SLOWER, 5)                       # the commit between: the change moves
    [second] = changes.update(s, SUITE, main, "local", BENCH)
    old, new = s.watch_changes("w")
    assert (old.state, old.detail["moved_to"]) == ("moved", [COMMITS[4].hash, COMMITS[5].hash])
    assert (new.id, new.before, new.after, new.state) == (second, COMMITS[4].hash, COMMITS[5].hash, "current")
    b2 = s.watch_item(new.bisect_item)
    assert (b2.good, b2.commit, b2.state) == (COMMITS[4].hash, COMMITS[5].hash, "queued") and b2.id != b1.id
    # its bisection ends (as the watch's worker ends it) ...
    assert s.claim_item("w", "me", 60, kinds=("bisect",)).id == b1.id
    taken = s.claim_item("w", "me", 60, kinds=("bisect",))
    assert taken.id == b2.id
    outcome = {"outcome": "culprit", "culprit": {"hash": COMMITS[5].hash, "subject": "change 5",
                                                 "author": "A <a@example.org>"}, "verified": True}
    assert s.finish_item(b2.id, "me", "done", detail=outcome)
    s.attach_culprit(b2.id, culprit=COMMITS[5].hash, subject="change 5", author="A <a@example.org>", verified=True,
                     detail=outcome)
    # ... and a second branch with the same commits shares it: its change point has the culprit at once
    stable = Line("stable", COMMITS[-1].hash, COMMITS, COMMITS)
    [third] = changes.update(s, SUITE, stable, "local", BENCH)
    got = next(c for c in s.watch_changes("w") if c.id == third)
    assert (got.branch, got.bisect_item, got.culprit, got.verified) == ("stable", b2.id, COMMITS[5].hash, True)
    assert len(s.watch_items("w", kind="bisect")) == 2


def test_improvements_are_bisected_only_when_the_suite_asks(tmp_path):
    s = Store.open(tmp_path / "k.db")
    measure(s, FASTER, 0, 1, 2, 3, 4, 5, 6, 7)
    main = Line("main", COMMITS[-1].hash, COMMITS, COMMITS)
    changes.update(s, SUITE, main, "local", BENCH)
    [c] = s.watch_changes("w")
    assert (c.direction, c.bisect_item, s.watch_items("w", kind="bisect")) == ("improvement", None, [])
    asked = Suite(**{**SUITE.__dict__, "improvements": True})
    changes.update(s, asked, Line("next", COMMITS[-1].hash, COMMITS, COMMITS), "local", BENCH)
    assert [i.good for i in s.watch_items("w", kind="bisect")] == [COMMITS[4].hash]
