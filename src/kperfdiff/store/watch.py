"""The sentinel's tables (``kperfdiff watch``): its queue of work with leases, and the change points it
found in each watched series with the culprits their bisections named.

The queue is shared: several watch processes, on one machine or on several writing one PostgreSQL
store, take work from it. A process claims an item by one compare-and-set UPDATE (the item is queued,
or its lease has run out), so of two processes claiming the same item one wins; it holds the item
until its lease runs out (``lease_until``, by the store's clock: the database server's in a shared
store, so the machines' clocks need not agree), renews the lease while it works, and completes,
fails or releases it. Each call takes ``now`` for tests that set the clock; by default it is the
store's own.
"""
from __future__ import annotations

import json

from kperfdiff.core.records import WatchChange, WatchItem
from kperfdiff.store.connection import Connection

ITEM_STATES = ("queued", "running", "done", "failed")
CLAIM_CANDIDATES = 20      # items a claim tries, oldest first, before it says there is none to take


class Watch(Connection):
    """The watch_item and watch_change tables."""

    def _clock(self, now: float | None) -> tuple[str, list]:
        """The SQL for now (the store's clock, or the ``now`` given) and its parameters."""
        return (self._now, []) if now is None else ("?", [float(now)])

    # -- the queue ----------------------------------------------------------------------
    def queue_item(self, *, watch: str, kind: str, key: str, branch: str, target: str, benchmark: str, commit: str,
                   good: str | None = None, position: int | None = None, detail: dict | None = None,
                   now: float | None = None) -> tuple[int, bool]:
        """Queue a piece of work unless the same (by ``key``) is queued already, in any state: (its id,
        whether it was added now)."""
        clock, at = self._clock(now)

        def w():
            added = self.conn.execute(
                "INSERT INTO watch_item (watch, kind, key, branch, target, benchmark, commit_hash, good_hash, position, "
                f"state, attempts, detail, created, updated) VALUES (?,?,?,?,?,?,?,?,?,'queued',0,?,{clock},{clock}) "
                "ON CONFLICT (key) DO NOTHING",
                [watch, kind, key, branch, target, benchmark, commit, good, position, json.dumps(detail or {}), *at, *at]
            ).rowcount == 1
            return self.conn.execute("SELECT id FROM watch_item WHERE key=?", (key,)).fetchone()[0], added
        return self._write(w)

    def claim_item(self, watch: str, owner: str, lease_s: float, *, now: float | None = None,
                   kinds: tuple[str, ...] = ("bisect", "measure")) -> WatchItem | None:
        """Take the oldest item of ``watch`` that is queued, or running under a lease that has run out
        (its process is gone or stuck), for ``owner`` until now + ``lease_s``: bisections before
        measurements (bisections come only from measurements, so they cannot crowd measuring out, and
        measurements first left every bisection waiting forever behind a backlog: docs/watch-scale.md). None when there is none to take. Each try is one UPDATE that checks the item's
        state again, so two processes never hold one item."""
        clock, at = self._clock(now)
        takeable = f"(state='queued' OR (state='running' AND lease_until < {clock}))"
        order = " ".join(f"WHEN '{k}' THEN {i}" for i, k in enumerate(kinds))

        def w():
            wanted, kind_args = self._id_list()
            ids = [r[0] for r in self.conn.execute(
                f"SELECT id FROM watch_item WHERE watch=? AND kind {wanted} AND {takeable} "
                f"ORDER BY CASE kind {order} END, id LIMIT {CLAIM_CANDIDATES}", [watch, kind_args(list(kinds)), *at])]
            for item_id in ids:
                if self.conn.execute(
                        f"UPDATE watch_item SET state='running', owner=?, lease_until={clock} + ?, "
                        f"attempts=attempts+1, updated={clock} WHERE id=? AND {takeable}",
                        [owner, *at, float(lease_s), *at, item_id, *at]).rowcount == 1:
                    return item_id
            return None
        got = self._write(w)
        return self.watch_item(got) if got is not None else None

    def renew_item(self, item_id: int, owner: str, lease_s: float, *, now: float | None = None) -> bool:
        """Hold the item for another ``lease_s`` seconds; False when it is no longer this owner's (its
        lease ran out and another process took it)."""
        clock, at = self._clock(now)
        return self._write(lambda: self.conn.execute(
            f"UPDATE watch_item SET lease_until={clock} + ?, updated={clock} WHERE id=? AND owner=? "
            f"AND state='running'", [*at, float(lease_s), *at, item_id, owner]).rowcount) == 1

    def finish_item(self, item_id: int, owner: str, state: str, *, run_id: int | None = None,
                    detail: dict | None = None, now: float | None = None) -> bool:
        """Mark the item done or failed (``detail`` merged into its own: the outcome, or why it
        failed), or queued again (released: the work was stopped, nothing is decided); False, and
        nothing changed, when the item is no longer this owner's."""
        assert state in ("done", "failed", "queued")
        clock, at = self._clock(now)

        def w():
            row = self.conn.execute("SELECT detail FROM watch_item WHERE id=? AND owner=? AND state='running'",
                                    (item_id, owner)).fetchone()
            if row is None:
                return False
            merged = {**json.loads(row[0] or "{}"), **(detail or {})}
            lease = "owner=NULL, lease_until=NULL, " if state == "queued" else "lease_until=NULL, "
            return self.conn.execute(
                f"UPDATE watch_item SET state=?, {lease}run_id=coalesce(?, run_id), detail=?, updated={clock} "
                f"WHERE id=? AND owner=? AND state='running'",
                [state, run_id, json.dumps(merged), *at, item_id, owner]).rowcount == 1
        return self._write(w)

    @staticmethod
    def _item(row) -> WatchItem:
        return WatchItem(id=row["id"], watch=row["watch"], kind=row["kind"], key=row["key"], branch=row["branch"],
                         target=row["target"], benchmark=row["benchmark"], commit=row["commit_hash"],
                         good=row["good_hash"], position=row["position"], state=row["state"], owner=row["owner"],
                         lease_until=row["lease_until"], attempts=row["attempts"], run_id=row["run_id"],
                         detail=json.loads(row["detail"] or "{}"), created=row["created"], updated=row["updated"])

    def watch_item(self, item_id: int) -> WatchItem:
        return self._item(self.conn.execute("SELECT * FROM watch_item WHERE id=?", (item_id,)).fetchone())

    def watch_items(self, watch: str | None = None, *, kind: str | None = None) -> list[WatchItem]:
        """The items of one watch (every watch when None), oldest first."""
        where, args = ["1=1"], []
        if watch is not None:
            where.append("watch=?")
            args.append(watch)
        if kind is not None:
            where.append("kind=?")
            args.append(kind)
        return [self._item(r) for r in self.conn.execute(
            f"SELECT * FROM watch_item WHERE {' AND '.join(where)} ORDER BY id", args)]

    def watch_names(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT DISTINCT watch FROM watch_item ORDER BY watch")]

    # -- change points ------------------------------------------------------------------
    def record_change(self, *, watch: str, branch: str, target: str, benchmark: str, before: str, after: str,
                      direction: str, percent: float | None, pvalue: float | None,
                      now: float | None = None) -> tuple[int, bool]:
        """A change point of a watched series, kept current (its figures brought up to date when it
        was recorded before): (its id, whether it is new)."""
        clock, at = self._clock(now)
        ident = [watch, branch, target, benchmark, before, after]
        same = "watch=? AND branch=? AND target=? AND benchmark=? AND before_hash=? AND after_hash=?"

        def w():
            added = self.conn.execute(
                "INSERT INTO watch_change (watch, branch, target, benchmark, before_hash, after_hash, direction, "
                f"percent, pvalue, state, detail, found, updated) VALUES (?,?,?,?,?,?,?,?,?,'current','{{}}',"
                f"{clock},{clock}) ON CONFLICT (watch, branch, target, benchmark, before_hash, after_hash) DO NOTHING",
                [*ident, direction, percent, pvalue, *at, *at]).rowcount == 1
            if not added:
                self.conn.execute(f"UPDATE watch_change SET percent=?, pvalue=?, direction=?, state='current', "
                                  f"updated={clock} WHERE {same}", [percent, pvalue, direction, *at, *ident])
            return self.conn.execute(f"SELECT id FROM watch_change WHERE {same}", ident).fetchone()[0], added
        return self._write(w)

    def set_change(self, change_id: int, *, state: str | None = None, bisect_item: int | None = None,
                   detail: dict | None = None, now: float | None = None) -> None:
        """Mark a change point moved, link it to its bisection, or add to its detail."""
        clock, at = self._clock(now)

        def w():
            row = self.conn.execute("SELECT detail FROM watch_change WHERE id=?", (change_id,)).fetchone()
            merged = {**json.loads(row[0] or "{}"), **(detail or {})}
            self.conn.execute(f"UPDATE watch_change SET state=coalesce(?, state), bisect_item=coalesce(?, bisect_item), "
                              f"detail=?, updated={clock} WHERE id=?",
                              [state, bisect_item, json.dumps(merged), *at, change_id])
        self._write(w)

    def attach_culprit(self, bisect_item: int, *, culprit: str | None, subject: str | None, author: str | None,
                       verified: bool | None, detail: dict, now: float | None = None) -> int:
        """The outcome of a bisection, on every change point it was queued for; how many. One that found no
        difference between the change point's two commits (``detail["outcome"]``, measured afresh) leaves
        the change point unconfirmed (:func:`_state`)."""
        clock, at = self._clock(now)

        def w():
            n = 0
            for cid, old in self.conn.execute("SELECT id, detail FROM watch_change WHERE bisect_item=?",
                                              (bisect_item,)).fetchall():
                merged = {**json.loads(old or "{}"), **detail}
                n += self.conn.execute(
                    f"UPDATE watch_change SET culprit=?, culprit_subject=?, culprit_author=?, verified=?, detail=?, "
                    f"updated={clock} WHERE id=?",
                    [culprit, subject, author, None if verified is None else int(verified), json.dumps(merged), *at,
                     cid]).rowcount
            return n
        return self._write(w)

    @staticmethod
    def _change(row) -> WatchChange:
        return WatchChange(id=row["id"], watch=row["watch"], branch=row["branch"], target=row["target"],
                           benchmark=row["benchmark"], before=row["before_hash"], after=row["after_hash"],
                           direction=row["direction"], percent=row["percent"], pvalue=row["pvalue"],
                           state=_state(row), bisect_item=row["bisect_item"], culprit=row["culprit"],
                           culprit_subject=row["culprit_subject"], culprit_author=row["culprit_author"],
                           verified=None if row["verified"] is None else bool(row["verified"]),
                           detail=json.loads(row["detail"] or "{}"), found=row["found"], updated=row["updated"],
                           notified=row["notified"])

    def watch_changes(self, watch: str | None = None) -> list[WatchChange]:
        """The change points of one watch (every watch when None), in the order they were found."""
        if watch is None:
            rows = self.conn.execute("SELECT * FROM watch_change ORDER BY id")
        else:
            rows = self.conn.execute("SELECT * FROM watch_change WHERE watch=? ORDER BY id", (watch,))
        return [self._change(r) for r in rows]

    def claim_notice(self, change_id: int, *, now: float | None = None) -> bool:
        """Take the change point's culprit for a notification: True for the one process that marks it
        notified now (one compare-and-set UPDATE), False when it was notified (or taken) before."""
        clock, at = self._clock(now)
        return self._write(lambda: self.conn.execute(
            f"UPDATE watch_change SET notified={clock} WHERE id=? AND notified IS NULL AND culprit IS NOT NULL",
            [*at, change_id]).rowcount) == 1

    def release_notice(self, change_id: int) -> None:
        """The notification failed: the culprit is to be notified again at the next look."""
        self._write(lambda: self.conn.execute("UPDATE watch_change SET notified=NULL WHERE id=?", (change_id,)))


def _state(row) -> str:
    """A change point's state: as stored (current or moved), except that a current one whose bisection
    found its two commits alike, measured afresh, is unconfirmed (it stays so when found again: the
    bisection's outcome is in its detail, which a new analysis does not replace)."""
    if row["state"] == "current" and json.loads(row["detail"] or "{}").get("outcome") == "no difference":
        return "unconfirmed"
    return row["state"]
