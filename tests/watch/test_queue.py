"""The sentinel's queue in the store (kperfdiff.store.watch), on SQLite and on PostgreSQL: work is queued
once, claimed in order under a lease, held against other claimants until the lease runs out (the clock
set by the test), then taken over; the old holder can neither renew nor finish it. Claims from several
connections at once never hand one item to two. Change points are recorded once, kept current, and get
the culprit of their bisection."""
import threading
import time

import pytest

from kperfdiff.store import Store
from kperfdiff.watch.queue import Lease


def queue(s: Store, key: str, kind: str = "measure", commit: str = "c1", now: float = 100.0) -> tuple[int, bool]:
    return s.queue_item(watch="w", kind=kind, key=key, branch="main", target="local", benchmark="b@1", commit=commit,
                        good="c0" if kind == "bisect" else None, now=now)


def test_claim_holds_until_the_lease_runs_out_then_another_takes_it_over(store_location):
    s = Store.open(store_location)
    b, added = queue(s, "b", kind="bisect")
    m1, _ = queue(s, "m1")
    assert added and queue(s, "m1") == (m1, False)          # the same work is queued once
    m2, _ = queue(s, "m2", commit="c2")
    # measurements first, oldest first; a bisection after them
    a = s.claim_item("w", "A", 60, now=110, kinds=("measure", "bisect"))
    assert (a.id, a.state, a.owner, a.lease_until, a.attempts) == (m1, "running", "A", 170, 1)
    # the queue's own order: bisections first, then measurements, oldest first
    assert s.claim_item("w", "B", 60, now=111).id == b
    assert s.claim_item("w", "B", 60, now=112).id == m2
    assert s.claim_item("w", "C", 60, now=169) is None          # every item is held
    assert s.renew_item(m1, "A", 60, now=150)                    # A renews: held until 210
    assert s.claim_item("w", "C", 60, now=200).id == b           # B's first lease ran out at 171
    assert s.claim_item("w", "C", 60, now=200).id == m2          # ... and its second at 172
    assert s.claim_item("w", "C", 60, now=205) is None
    taken = s.claim_item("w", "D", 60, now=211)                   # A's renewed lease ran out at 210
    assert (taken.id, taken.owner, taken.attempts) == (m1, "D", 2)
    # the old holder can no longer renew or finish it; the new one can
    assert not s.renew_item(m1, "A", 60, now=212)
    assert not s.finish_item(m1, "A", "done", now=212)
    assert s.finish_item(m1, "D", "done", detail={"x": 1}, now=213)
    assert s.watch_item(m1).state == "done" and s.watch_item(m1).detail == {"x": 1}
    assert s.watch_item(m1).owner == "D" and s.watch_item(m1).lease_until is None
    # released work goes back to the queue, unowned; a failed item stays failed; neither is C's now
    assert s.finish_item(m2, "C", "queued", now=214) and s.finish_item(b, "C", "failed", detail={"reason": "r"}, now=214)
    assert not s.finish_item(m2, "C", "done", now=215)
    left = s.watch_item(m2)
    assert (left.state, left.owner, left.lease_until) == ("queued", None, None)
    assert s.claim_item("w", "E", 60, now=10_000).id == m2       # done and failed items are never claimed again
    assert s.claim_item("w", "E", 60, now=10_001) is None
    assert [i.state for i in s.watch_items("w")] == ["failed", "done", "running"]
    assert s.watch_items("other") == [] and s.claim_item("other", "A", 60) is None


def test_claims_from_several_connections_at_once_take_each_item_once(store_location):
    s = Store.open(store_location)
    for n in range(40):
        queue(s, f"m{n}", commit=f"c{n}")
    got: dict[str, list[int]] = {}

    def worker(name: str) -> None:
        own = s.reopen()
        mine = got.setdefault(name, [])
        while (item := own.claim_item("w", name, 600)) is not None:
            mine.append(item.id)
            assert own.finish_item(item.id, name, "done")
        own.conn.close()
    threads = [threading.Thread(target=worker, args=(f"w{k}",)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [i for mine in got.values() for i in mine]
    assert sorted(ids) == list(range(1, 41))                      # each once, none lost
    assert {i.state for i in s.watch_items("w")} == {"done"}


def test_a_lease_is_renewed_while_its_work_goes_on(tmp_path):
    s = Store.open(tmp_path / "k.db")
    queue(s, "m1")
    item = s.claim_item("w", "A", 0.6)
    with Lease(s, item.id, "A", 0.6) as lease:
        time.sleep(1.5)                                           # over twice the lease
        assert s.claim_item("w", "B", 0.6) is None                # renewed every 0.2 s: still A's
    assert not lease.lost
    time.sleep(0.8)                                               # no renewal since: the lease runs out
    assert s.claim_item("w", "B", 0.6).owner == "B"


def test_change_points_are_recorded_once_and_get_their_culprit(store_location):
    s = Store.open(store_location)
    ident = dict(watch="w", branch="main", target="local", benchmark="b@1")
    cid, added = s.record_change(**ident, before="c3", after="c4", direction="regression", percent=-70.0, pvalue=1e-6)
    assert added
    assert s.record_change(**ident, before="c3", after="c4", direction="regression", percent=-71.0,
                           pvalue=1e-7) == (cid, False)
    other, _ = s.record_change(**ident, before="c7", after="c8", direction="improvement", percent=200.0, pvalue=1e-6)
    item, _ = queue(s, "b", kind="bisect", commit="c4")
    s.set_change(cid, bisect_item=item)
    assert s.attach_culprit(item, culprit="c4", subject="slower", author="A <a@b>", verified=True,
                            detail={"outcome": "culprit"}) == 1
    s.set_change(other, state="moved", detail={"moved_to": ["c8", "c9"]})
    first, second = s.watch_changes("w")
    assert (first.percent, first.culprit, first.culprit_subject, first.verified, first.detail) == \
        (-71.0, "c4", "slower", True, {"outcome": "culprit"})
    assert (second.state, second.culprit, second.detail) == ("moved", None, {"moved_to": ["c8", "c9"]})
    with pytest.raises(Exception):
        s.record_change(**ident, before="c1", after="c2", direction="sideways", percent=0.0, pvalue=1.0)


def test_a_change_point_its_bisection_finds_no_difference_in_stays_unconfirmed(store_location):
    """A noise change point: its bisection measured both commits afresh and found them alike. It is
    unconfirmed, found again it stays so, and it is neither counted nor notified as a change."""
    from kperfdiff.render.watch import to_text_doc
    from kperfdiff.watch import publish, report
    s = Store.open(store_location)
    ident = dict(watch="w", branch="main", target="local", benchmark="b@1")
    cid, _ = s.record_change(**ident, before="c3", after="c4", direction="regression", percent=-9.0, pvalue=1e-4)
    item, _ = queue(s, "b", kind="bisect", commit="c4")
    s.set_change(cid, bisect_item=item)
    why = "GOOD c3 and BAD c4 do not differ significantly in b (+0.41%, p=0.62; 30 and 30 repetitions)"
    claimed = s.claim_item("w", "me", 60, kinds=("bisect",))
    assert s.finish_item(claimed.id, "me", "done", detail={"outcome": "no difference", "reason": why})
    s.attach_culprit(item, culprit=None, subject=None, author=None, verified=None,
                     detail={"outcome": "no difference", "reason": why})
    assert s.watch_changes("w")[0].state == "unconfirmed"
    s.record_change(**ident, before="c3", after="c4", direction="regression", percent=-8.0, pvalue=1e-4)
    [c] = s.watch_changes("w")
    assert (c.state, c.percent) == ("unconfirmed", -8.0)
    assert publish.to_notify(s, "w") == []
    out = to_text_doc(report.document(s, ["w"]))
    assert "[unconfirmed: measured afresh, the two commits do not differ]" in out and why in out, out


def test_store_copy_takes_the_queue_and_the_change_points_along(tmp_path, store_location):
    from kperfdiff.store import transfer
    from store.test_history import populate
    src = Store.open(tmp_path / "src.db")
    [run] = populate(src, [100.0])
    m, _ = queue(src, "m1")
    src.claim_item("w", "A", 60)
    src.finish_item(m, "A", "done", run_id=run.id)
    b, _ = queue(src, "b", kind="bisect")
    cid, _ = src.record_change(watch="w", branch="main", target="local", benchmark="b@1", before="c0", after="c1",
                               direction="regression", percent=-50.0, pvalue=1e-6)
    src.set_change(cid, bisect_item=b)
    src.conn.close()
    out = transfer.copy(tmp_path / "src.db", store_location)
    assert (out.rows["watch_item"], out.rows["watch_change"]) == (2, 1)
    dst = Store.open(store_location)
    assert [(i.kind, i.state, i.run_id) for i in dst.watch_items("w")] == [("measure", "done", run.id), ("bisect", "queued", None)]
    [c] = dst.watch_changes("w")
    assert (c.bisect_item, c.before, c.percent) == (b, "c0", -50.0)
    assert dst.claim_item("w", "B", 60).id == b                   # the copied queue goes on
