"""The results store: one SQLite file (WAL mode), or a PostgreSQL database shared by several
machines (``postgresql://`` URL, see :mod:`.backend`), and an artefact folder per run.

Tables (schema version in ``meta``):

* ``machine``: facts of one machine configuration (JSON) and its fingerprint;
* ``run``: label, variant, target, machine, tool version, start/end, state
  (running / complete / interrupted / failed), the command line;
* ``result``: one benchmark at one parameter set and copy count in a run:
  status (ok / failed / skipped) and reason, unit, direction, the summary
  (median, min, max, quartiles, mean, stdev, CV), monitor deltas, the
  workers' info, total operations and CPU time; an experiment's cell also
  its key and the identity of what it ran on (kernel, machine, kperfdiff);
* ``interval``: every raw interval value of a result (rep, copy, seq, value,
  ops, ns), so every statistic can be recomputed;
* ``profile``: perf recordings of a result: artefact paths, event, samples,
  CPU time and operations of the profiled interval;
* ``change_cache``: what ``kperfdiff changes`` found in each series (a cache);
* ``watch_item`` and ``watch_change``: the sentinel's queue of work with leases, and the change
  points of each watched series with their culprits (``kperfdiff watch``, :mod:`.watch`).

Every finished result is committed at once, so a run stopped by Ctrl-C or a
crash keeps what it measured; a run left ``running`` by a process that no
longer exists is marked ``interrupted`` the next time the store is opened (in a
PostgreSQL store, on the machine that ran it: each run records its host, and another
machine cannot tell whether a process of that one is alive). A running experiment of a
PostgreSQL store has a heartbeat instead (``experiment.updated``, refreshed by its process
every limits.HEARTBEAT_S): another machine takes it over when it is older than
limits.EXPERIMENT_DEAD_S.

Both back ends run the same schema, migrations and queries: SQLite as written,
PostgreSQL through the dialect layer of :mod:`.backend`. A SQLite store keeps its
artefacts in the folder ``NAME.artefacts`` beside its file; a PostgreSQL store in the
folder its configuration names (``meta`` row ``artefacts``, set by ``kperfdiff store
init URL --artefacts DIR``; a URL's ``?artefacts=DIR`` overrides it on one machine).
Stored artefact paths are relative to those places, so ``kperfdiff store copy`` moves
a store with its artefacts from one back end to the other.

The store is built by concern, one module each: :mod:`.connection` (the connection and its
transactions), :mod:`.schema` (tables and migrations), :mod:`.artefacts`, :mod:`.machines`,
:mod:`.runs`, :mod:`.results`, :mod:`.profiles`, :mod:`.experiments`, :mod:`.history` (results
across runs, and the change-point cache) and :mod:`.watch` (the sentinel's queue and change
points); :class:`Store` is all of them, and opens the store. Who owns a run or an experiment (host, boot, process): :mod:`kperfdiff.core.hosts`;
``kperfdiff store copy``: :mod:`.transfer`.
"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from kperfdiff.core.errors import StoreError
from kperfdiff.store import backend
from kperfdiff.store.backend import is_url
from kperfdiff.store.connection import RETRIES, connect_sqlite
from kperfdiff.store.experiments import Experiments
from kperfdiff.store.history import History
from kperfdiff.core.hosts import host_id
from kperfdiff.store.machines import STABLE_KEYS, fingerprint
from kperfdiff.store.profiles import COUNTED_EVENT, Profiles, kernel_instructions_per_op
from kperfdiff.store.runs import RUN_STATES
from kperfdiff.store.schema import MIGRATIONS, SCHEMA, SCHEMA_LOCK, SCHEMA_VERSION, Schema, check_is_store
from kperfdiff.store.watch import Watch

# what callers take from kperfdiff.store
__all__ = ["COUNTED_EVENT", "MIGRATIONS", "RETRIES", "RUN_STATES", "SCHEMA", "SCHEMA_LOCK", "SCHEMA_VERSION",
           "STABLE_KEYS", "Store", "backend", "default_location", "default_path", "fingerprint", "host_id", "is_url",
           "kernel_instructions_per_op"]


def default_path() -> Path:
    if os.environ.get("KPERFDIFF_HOME"):
        return Path(os.environ["KPERFDIFF_HOME"]) / "kperfdiff.db"
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "kperfdiff" / "kperfdiff.db"


def default_location() -> str | Path:
    """The store of a command given no --store: $KPERFDIFF_STORE (a file or a postgresql:// URL),
    else :func:`default_path`."""
    return os.environ.get("KPERFDIFF_STORE") or default_path()


class Store(Schema, Profiles, Experiments, History, Watch):
    """A results store: every part of it (see the module's docstring) on one connection."""

    def reopen(self) -> "Store":
        """Another connection to this store, for another thread of this process (a connection serves
        one thread). Nothing is checked or marked as :meth:`open` does (this process's own runs are
        running)."""
        if self.postgres:
            if self._url is None:
                raise StoreError(f"the store {self.path} was not opened from its URL; cannot connect to it again")
            other = Store(self.path, backend.connect(self._url), root=self.dir)
        else:
            try:
                conn = connect_sqlite(self.path)
            except sqlite3.Error as e:
                raise StoreError(f"cannot open the store {self.path}: {e}") from None
            other = Store(self.path, conn)
        other._url = self._url
        return other

    # -- opening ------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path | None = None, *, create: bool = True, artefacts: str | None = None) -> "Store":
        """Open the store at ``path``: an SQLite file, or a ``postgresql://`` URL (default:
        :func:`default_location`). ``create=False`` (the commands that only read) refuses a store
        that does not exist instead of making an empty one. A file that is not a kperfdiff store is
        refused before anything is written to it. ``artefacts`` (PostgreSQL): the artefact folder of
        a store made now (else the URL's ``?artefacts=``)."""
        path = path or default_location()
        if is_url(path):
            return cls._open_pg(str(path), create=create, artefacts=artefacts)
        p = Path(path)
        if "\0" in str(p):
            raise StoreError("the store path has a NUL character in it")
        if p.exists() and p.is_dir():
            raise StoreError(f"the store {p} is a directory; give the path of a file with --store")
        if not p.exists() or (p.is_file() and p.stat().st_size == 0 and not create):
            if not create:
                raise StoreError(f"there is no results store at {p}; give one with --store, or make one with "
                                 f"kperfdiff bench or kperfdiff run")
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(f"cannot create the store's folder {p.parent}: {e.strerror}; "
                                 f"choose another place with --store") from None
        elif p.stat().st_size > 0:
            check_is_store(p)
        try:
            conn = connect_sqlite(p, wal=True)
        except sqlite3.Error as e:
            raise StoreError(f"cannot open the store {p}: {e}; choose another with --store") from None
        store = cls(p, conn)
        store._init_schema()
        store._mark_dead_runs()
        return store

    # -- PostgreSQL ------------------------------------------------------------
    @classmethod
    def _open_pg(cls, url: str, *, create: bool, artefacts: str | None) -> "Store":
        shown = backend.mask(url)
        _, in_url = backend.split_url(url)
        conn = backend.connect(url)
        store = cls(shown, conn, root="/")
        store._url = url
        try:
            root = store._init_pg(create, artefacts or in_url)
        except backend.PgDatabaseError as e:
            conn.close()
            raise StoreError(f"cannot open the store {shown}: {e}") from None
        except BaseException:
            conn.close()
            raise
        # this machine's mount of the artefact folder (the URL's) wins over the one the store records
        store.dir = Path(backend.artefact_dir(in_url, shown) if in_url else root)
        store._mark_dead_runs()
        return store
