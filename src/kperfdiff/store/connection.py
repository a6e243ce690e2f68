"""The store's connection: one SQLite file or a PostgreSQL database (through the dialect layer of
:mod:`.backend`), its transactions, and what the queries of every part of the store share.

Every part of the store (:mod:`.schema`, :mod:`.runs`, :mod:`.results`, ...) is a class built on
:class:`Connection`; :class:`kperfdiff.store.Store` is all of them together.
"""
from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from pathlib import Path

from kperfdiff.core.errors import StoreError
from kperfdiff.store import backend
from kperfdiff.store.backend import OperationalError


def connect_sqlite(path, *, wal: bool = False) -> sqlite3.Connection:
    """A connection to an SQLite store as the store uses it: autocommit (the store opens its own
    transactions), rows by name, foreign keys checked; ``wal``: put the file in WAL mode (when it is
    opened; a mode the file keeps)."""
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA foreign_keys = ON")
    if wal:
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def sql_int(v: int) -> bool:
    """An id SQLite can hold (a bigger number names no row)."""
    return -2 ** 63 <= v < 2 ** 63


# How often a PostgreSQL transaction undone for another (serialisation failure, deadlock) is tried.
RETRIES = 8


class Connection:
    """A store's connection and its transactions."""

    def __init__(self, path: Path | str, conn, *, root: str | Path | None = None):
        """``path``: the SQLite file, or (PostgreSQL) the URL with its password masked, as messages
        name the store; ``root``: a PostgreSQL store's artefact folder."""
        self.path = path
        self.conn = conn
        self.postgres = root is not None
        # artefact paths are kept relative to dir: the SQLite file's folder, or the PostgreSQL store's
        # artefact folder
        self.dir = Path(root) if root is not None else Path(os.path.abspath(path)).parent
        self._begin_write = "BEGIN" if self.postgres else "BEGIN IMMEDIATE"
        self._begin_read = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" if self.postgres else "BEGIN"
        # now, in seconds since 1970, by the clock of the database: a PostgreSQL store's server, so
        # the heartbeats of experiments (experiment.updated) are written and judged by one clock
        # whatever the clocks of the machines writing them
        self._now = ("extract(epoch from clock_timestamp())" if self.postgres
                     else "((julianday('now') - 2440587.5) * 86400.0)")
        self._url: str | None = None

    class _Tx:
        def __init__(self, conn, begin: str):
            self.conn = conn
            self.begin = begin

        def __enter__(self):
            self.conn.execute(self.begin)

        def __exit__(self, et, ev, tb):
            if et is None:
                self.conn.execute("COMMIT")
            else:
                try:
                    self.conn.execute("ROLLBACK")
                except OperationalError:
                    if ev is None or not isinstance(ev, OperationalError):
                        raise    # a lost connection: the first error says so
            return False

    def tx(self):
        """A write transaction: committed whole, or rolled back whole."""
        return Connection._Tx(self.conn, self._begin_write)

    def _write(self, fn):
        """Run ``fn`` in one write transaction. PostgreSQL may undo a transaction to let a concurrent
        one go first (serialisation failure, deadlock): it is run again, a few times, after a pause."""
        for attempt in range(RETRIES):
            try:
                with self.tx():
                    return fn()
            except backend.PgRetry:
                if attempt == RETRIES - 1:
                    raise StoreError(f"cannot write the store {self.path}: other writers kept it busy; "
                                     f"try again") from None
                time.sleep(0.01 * 2 ** attempt)
            except OperationalError as e:
                raise StoreError(f"cannot write the store {self.path}: {e}") from None

    @contextlib.contextmanager
    def _snapshot(self):
        """One read transaction around several SELECTs, so they all see the same store (unless a
        transaction is open already)."""
        own = not self.conn.in_transaction
        if own:
            self.conn.execute(self._begin_read)
        try:
            yield
        finally:
            if own:
                self.conn.execute("COMMIT")

    @contextlib.contextmanager
    def exclusive(self, name: str):
        """One process at a time inside, per ``name``, among every process of every machine writing a
        PostgreSQL store (a session advisory lock). SQLite: nothing more than its writers taking turns
        (one machine writes it)."""
        if not self.postgres:
            yield
            return
        self.conn.execute("SELECT pg_advisory_lock(hashtext(?))", (name,))
        try:
            yield
        finally:
            self.conn.execute("SELECT pg_advisory_unlock(hashtext(?))", (name,))

    def snapshot(self):
        """One read transaction: what is read inside sees one state of the store (store copy)."""
        return self._snapshot()

    def _plain(self) -> sqlite3.Cursor:
        """A cursor that returns plain tuples (many rows: no sqlite3.Row per row)."""
        cur = self.conn.cursor()
        cur.row_factory = None
        return cur

    def _id_list(self):
        """(``IN ...`` of one parameter, what makes that parameter of a list of ids): a list of any
        length as one parameter (SQLite allows 32766 ``?`` in a statement, older ones 999)."""
        if self.postgres:
            return "= ANY(?)", list
        return "IN (SELECT value FROM json_each(?))", json.dumps
