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
  CPU time and operations of the profiled interval.

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
"""
from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import json
import os
import socket
import sqlite3
import time
from pathlib import Path

from kperfdiff import __version__
from kperfdiff.core import limits
from kperfdiff.core.errors import InputError, StoreError
from kperfdiff.core.records import Result, Run
from kperfdiff.store import backend
from kperfdiff.store.backend import IntegrityError, OperationalError, is_url

SCHEMA_VERSION = 6
RUN_STATES = ("running", "complete", "interrupted", "failed")

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS machine (
    id INTEGER PRIMARY KEY,
    fingerprint TEXT NOT NULL UNIQUE,
    arch TEXT, cpu_model TEXT, cpus INTEGER, kernel_release TEXT,
    emulated INTEGER NOT NULL DEFAULT 0,
    facts TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS run (
    id INTEGER PRIMARY KEY,
    label TEXT NOT NULL DEFAULT '',
    variant TEXT NOT NULL DEFAULT '',
    target TEXT NOT NULL DEFAULT 'local',
    machine_id INTEGER REFERENCES machine(id),
    tool_version TEXT NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL,
    state TEXT NOT NULL CHECK (state IN ('running','complete','interrupted','failed')),
    experiment_hash TEXT,
    command TEXT NOT NULL DEFAULT '',
    options TEXT NOT NULL DEFAULT '{}',
    pid INTEGER,
    boot_id TEXT,
    artefact_dir TEXT
);
CREATE TABLE IF NOT EXISTS result (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES run(id) ON DELETE CASCADE,
    benchmark TEXT NOT NULL,
    params TEXT NOT NULL DEFAULT '{}',
    copies INTEGER NOT NULL DEFAULT 1,
    status TEXT NOT NULL CHECK (status IN ('ok','failed','skipped')),
    reason TEXT,
    unit TEXT, better TEXT,
    n INTEGER, median REAL, min REAL, max REAL, q1 REAL, q3 REAL, mean REAL, stdev REAL, cv REAL,
    overhead REAL,
    ops INTEGER, cpu_ns INTEGER, wall_s REAL,
    monitors TEXT NOT NULL DEFAULT '{}',
    info TEXT NOT NULL DEFAULT '[]',
    started_at REAL, ended_at REAL
);
CREATE INDEX IF NOT EXISTS result_run ON result(run_id, benchmark);
CREATE TABLE IF NOT EXISTS interval (
    result_id INTEGER NOT NULL REFERENCES result(id) ON DELETE CASCADE,
    rep INTEGER NOT NULL, copy INTEGER NOT NULL, seq INTEGER NOT NULL,
    value REAL NOT NULL, ops INTEGER, ns INTEGER,
    PRIMARY KEY (result_id, rep, copy, seq)
);
CREATE TABLE IF NOT EXISTS profile (
    id INTEGER PRIMARY KEY,
    result_id INTEGER REFERENCES result(id) ON DELETE CASCADE,
    run_id INTEGER NOT NULL REFERENCES run(id) ON DELETE CASCADE,
    benchmark TEXT NOT NULL,
    rep INTEGER NOT NULL DEFAULT 0,
    path TEXT NOT NULL,
    kallsyms TEXT,
    event TEXT,
    samples INTEGER,
    cpu_time_ns INTEGER,
    ops INTEGER,
    meta TEXT NOT NULL DEFAULT '{}'
);
"""

# Migrations from version N to N+1, applied in order inside one transaction.
# A new store is made with SCHEMA (version 1) and then every migration, so
# the migrations are the one description of what came after version 1.
MIGRATIONS: dict[int, str] = {
    # 1 -> 2: experiments (kperfdiff run FILE). An experiment owns one run per
    # variant; each cell (variant x benchmark x copies x rep) is one result row
    # with a unique ``cell`` key inside its experiment, so a resumed experiment
    # can never store a cell twice. ``knob_saved`` is no longer used: the
    # originals of changed knobs live in one file per machine (kperfdiff.measure.knobs),
    # so a crash is repaired whatever store the next command is given.
    1: """
CREATE TABLE IF NOT EXISTS experiment (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    path TEXT NOT NULL DEFAULT '',
    file_hash TEXT NOT NULL,
    spec TEXT NOT NULL DEFAULT '{}',
    state TEXT NOT NULL CHECK (state IN ('running','complete','interrupted','failed','superseded')),
    cells INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL,
    updated REAL,
    pid INTEGER,
    boot_id TEXT
);
CREATE INDEX IF NOT EXISTS experiment_name ON experiment(name);
CREATE TABLE IF NOT EXISTS knob_saved (
    experiment_id INTEGER NOT NULL REFERENCES experiment(id) ON DELETE CASCADE,
    path TEXT NOT NULL,
    original TEXT NOT NULL,
    pid INTEGER,
    boot_id TEXT,
    saved_at REAL NOT NULL,
    PRIMARY KEY (experiment_id, path)
);
ALTER TABLE run ADD COLUMN experiment_id INTEGER REFERENCES experiment(id);
ALTER TABLE result ADD COLUMN experiment_id INTEGER REFERENCES experiment(id);
ALTER TABLE result ADD COLUMN cell TEXT;
ALTER TABLE result ADD COLUMN rep INTEGER;
ALTER TABLE result ADD COLUMN bench_key TEXT;
CREATE UNIQUE INDEX IF NOT EXISTS result_cell ON result(experiment_id, cell) WHERE cell IS NOT NULL;
CREATE INDEX IF NOT EXISTS run_experiment ON run(experiment_id);
""",
    # 2 -> 3: noise. ``noise`` holds, per repetition of a result, what disturbed the machine
    # while it was measured (kperfdiff.bench.noise: steal, other runnable tasks, involuntary
    # switches, migrations, run-queue wait, CPU frequency) and the reasons it was judged
    # disturbed; ``stop`` says why the repetitions stopped where they did (a fixed count,
    # --precision reached, or --max-time / the repetition limit ran out).
    2: """
ALTER TABLE result ADD COLUMN noise TEXT NOT NULL DEFAULT '[]';
ALTER TABLE result ADD COLUMN stop TEXT;
""",
    # 3 -> 4: indexes for stores of thousands of runs and millions of intervals. ``result_history``
    # answers run_history (the stored bench results of one benchmark, parameter set and copy count,
    # newest run first) from the index alone, without reading a row of the result table (a result
    # row holds kilobytes of monitor and noise records); ``run_label`` finds a run by its label;
    # ``run_running`` lets every open find the runs left running without reading the run table;
    # ``profile_run`` lists a run's profiles, and ``profile_result`` finds the profiles of a result
    # that is replaced or deleted (the ON DELETE CASCADE lookup).
    3: """
CREATE INDEX IF NOT EXISTS result_history ON result(benchmark, params, copies, run_id)
    WHERE experiment_id IS NULL AND status = 'ok';
CREATE INDEX IF NOT EXISTS run_label ON run(label);
CREATE INDEX IF NOT EXISTS run_running ON run(state) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS profile_run ON profile(run_id, benchmark);
CREATE INDEX IF NOT EXISTS profile_result ON profile(result_id);
""",
    # 4 -> 5: shared stores. Several machines write one PostgreSQL store, so a run and an experiment
    # record the host of the process that owns them (``host_id()``: host name and machine id): there, a
    # process is judged dead (its run marked interrupted, its experiment resumable) only on its own
    # host; elsewhere its pid and boot id mean nothing. Rows without a host (from before, or copied
    # from an SQLite store) and every row of an SQLite store are judged as before.
    4: """
ALTER TABLE run ADD COLUMN host TEXT;
ALTER TABLE experiment ADD COLUMN host TEXT;
""",
    # 5 -> 6: what an experiment's cell was measured on (``identity``, JSON: kernel release, build id,
    # uname -v and command line, a machine fingerprint, the kperfdiff version; kperfdiff.targets.machine.identity),
    # so a resumed experiment does not mix cells of two kernels or machines. Cells stored before have
    # none, and a resume refuses to add to them (kperfdiff run --restart measures afresh).
    5: """
ALTER TABLE result ADD COLUMN identity TEXT;
""",
}

def default_path() -> Path:
    if os.environ.get("KPERFDIFF_HOME"):
        return Path(os.environ["KPERFDIFF_HOME"]) / "kperfdiff.db"
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "kperfdiff" / "kperfdiff.db"


def default_location() -> str | Path:
    """The store of a command given no --store: $KPERFDIFF_STORE (a file or a postgresql:// URL),
    else :func:`default_path`."""
    return os.environ.get("KPERFDIFF_STORE") or default_path()


@functools.cache
def host_id() -> str:
    """This machine in a shared store: its host name and (where there is one) its machine id, so two
    machines of one name (cloned boards) are still two hosts."""
    mid = ""
    for p in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            mid = Path(p).read_text().strip()[:12]
        except OSError:
            continue
        if mid:
            break
    name = socket.gethostname()
    return f"{name}/{mid}" if mid else name


def _connect_sqlite(path, *, wal: bool = False) -> sqlite3.Connection:
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


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

COUNTED_EVENT = "instructions"   # the event of exact instruction-count profiles (deterministic guests)


def _of_kind(profs: list[dict], event: str | None, run_id: int) -> list[dict]:
    """The sampled profiles of a run, or its exact instruction counts (see Store.profile_refs)."""
    counted = [p for p in profs if p["event"] == COUNTED_EVENT]
    sampled = [p for p in profs if p["event"] != COUNTED_EVENT]
    if event == COUNTED_EVENT:
        if profs and not counted:
            raise InputError(f"run {run_id} has no exact instruction counts; a deterministic guest "
                             f"(qemu:arm64,deterministic) counts them")
        return counted
    return sampled or counted


def _sum_counts(parts: list) -> dict | None:
    """The exact instruction counts of a repetition's parallel copies added up (None unless every
    copy has them)."""
    if not parts or not all(isinstance(c, dict) for c in parts):
        return None
    return {k: sum(int(c.get(k) or 0) for c in parts) for k in ("kernel", "user", "ops")}


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""

def _sql_int(v: int) -> bool:
    """An id SQLite can hold (a bigger number names no row)."""
    return -2 ** 63 <= v < 2 ** 63

def _check_is_store(p: Path) -> None:
    """Refuse, without changing a byte of it, a file that is not a kperfdiff store."""
    try:
        with open(p, "rb") as f:
            head = f.read(20)
    except OSError as e:
        raise StoreError(f"cannot read the store {p}: {e.strerror}") from None
    if head[:16] != b"SQLite format 3\x00":
        raise StoreError(f"{p} is not a kperfdiff store (not an SQLite file)")
    # A WAL-mode file with no -wal beside it is open nowhere: read it as immutable, which creates no
    # -wal and -shm files (read-only mode would). Otherwise read-only mode changes nothing.
    wal_closed = len(head) == 20 and head[18] == 2 and not Path(f"{p}-wal").exists()
    try:
        conn = sqlite3.connect(f"{p.resolve().as_uri()}?{'immutable=1' if wal_closed else 'mode=ro'}", uri=True)
    except sqlite3.Error as e:
        raise StoreError(f"cannot open the store {p}: {e}") from None
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if tables and "meta" not in tables:
            raise StoreError(f"{p} is an SQLite file but not a kperfdiff store; give another with --store")
        if "meta" in tables:
            row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None or not str(row[0]).isdigit() or len(str(row[0])) > 6:
                raise StoreError(f"{p} has a schema_version of {None if row is None else str(row[0])[:20]!r}, "
                                 f"not a number: it is damaged or not a kperfdiff store")
            if int(row[0]) > SCHEMA_VERSION:
                raise StoreError(f"the store {p} was written by a newer kperfdiff (schema {int(row[0])}, this "
                                 f"one reads up to {SCHEMA_VERSION}); upgrade kperfdiff or use another --store")
    except sqlite3.DatabaseError as e:
        raise StoreError(f"cannot read the store {p}: {e}") from None
    finally:
        conn.close()

# The advisory lock PostgreSQL stores take while they create or upgrade their schema (any number).
SCHEMA_LOCK = 0x6B706466
# How often a PostgreSQL transaction undone for another (serialisation failure, deadlock) is tried.
RETRIES = 8


class Store:
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
                conn = _connect_sqlite(self.path)
            except sqlite3.Error as e:
                raise StoreError(f"cannot open the store {self.path}: {e}") from None
            other = Store(self.path, conn)
        other._url = self._url
        return other

    # -- artefact paths ----------------------------------------------------------
    # Artefacts (perf.data, kallsyms, the run folders) are kept relative to the
    # store's folder, so a store copied or moved with its .artefacts folder works
    # from any directory and on any machine. Paths outside the folder stay absolute.
    def stored_path(self, path: str | Path) -> str:
        p = Path(os.path.abspath(path))
        try:
            return p.relative_to(self.dir).as_posix()
        except ValueError:
            return str(p)

    def artefact_path(self, text: str | None) -> Path | None:
        """Where a stored artefact path is now. Paths written by older kperfdiff versions (relative to
        the directory the run started in, or absolute) are found again through their
        ``NAME.artefacts`` folder beside the store when the store has moved."""
        if not text:
            return None
        return self._find(text) or self._here(text)

    def _artefact_text(self, text: str, folders: dict[str, str]) -> str:
        """``str(artefact_path(text))`` for one file of a listing (a run's profiles, a page of runs),
        looking at the disk once per folder rather than once per file: ``folders`` keeps where each
        folder is (a file is where its folder is; where no folder of that name is, no file is either)."""
        head, _, name = text.rpartition("/")
        if not head or name in ("", ".", ".."):
            return str(self.artefact_path(text))
        if head not in folders:
            found = self._find(head)
            folders[head] = str(found if found is not None else self._here(head))
        return f"{folders[head]}/{name}"

    def _here(self, text: str) -> Path:
        p = Path(text)
        return p if p.is_absolute() else self.dir / p

    def _find(self, text: str) -> Path | None:
        """The first place a stored artefact path exists: beside the store, in its moved
        ``.artefacts`` folder, or relative to the current directory (older versions); None if nowhere."""
        p = Path(text)
        here = self._here(text)
        if here.exists():
            return here
        parts = p.parts
        for i in range(len(parts) - 1, -1, -1):
            if parts[i].endswith(".artefacts"):
                moved = self.dir.joinpath(*parts[i:])
                if moved.exists():
                    return moved
                break
        if not p.is_absolute() and p.exists():
            return Path(os.path.abspath(p))
        return None

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
            _check_is_store(p)
        try:
            conn = _connect_sqlite(p, wal=True)
        except sqlite3.Error as e:
            raise StoreError(f"cannot open the store {p}: {e}; choose another with --store") from None
        store = cls(p, conn)
        store._init_schema()
        store._mark_dead_runs()
        return store

    def _init_schema(self) -> None:
        try:
            tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "meta" not in tables:
                if tables:
                    raise StoreError(f"{self.path} is an SQLite file but not a kperfdiff store")
                with self.tx():
                    self._create_schema()
                return
            row = self.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            version = int(row[0]) if row else 0
            if version > SCHEMA_VERSION:
                raise StoreError(f"the store {self.path} was written by a newer kperfdiff (schema {version}, "
                                 f"this one reads up to {SCHEMA_VERSION}); upgrade kperfdiff or use another --store")
            if version < SCHEMA_VERSION:
                self._migrate(version)
        except sqlite3.DatabaseError as e:
            raise StoreError(f"cannot read the store {self.path}: {e}") from None
        except OSError as e:
            raise StoreError(f"cannot write the store {self.path}: {e.strerror}; choose another with --store") from None

    def _migrate(self, version: int) -> None:
        with self.tx():
            self._upgrade(version)

    def _upgrade(self, version: int) -> None:
        """Run the migrations from ``version`` to SCHEMA_VERSION (inside the caller's transaction)."""
        for v in range(version, SCHEMA_VERSION):
            if v not in MIGRATIONS:
                raise StoreError(f"the store {self.path} has schema {version}, which this kperfdiff "
                                 f"cannot upgrade; start a new store with --store")
            self._run_script(MIGRATIONS[v])
        self.conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))

    def _create_schema(self) -> None:
        """A new store's tables: SCHEMA (version 1) and every migration since, in the caller's transaction."""
        self._run_script(SCHEMA)
        self.conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", ("1",))
        self._upgrade(1)
        self.conn.execute("INSERT INTO meta VALUES ('created_by', ?)", (__version__,))

    def _run_script(self, sql: str) -> None:
        """Statements of SCHEMA or a migration, in this back end's words."""
        for stmt in sql.split(";"):
            if stmt.strip():
                self.conn.execute(backend.pg_ddl(stmt) if self.postgres else stmt)

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

    def _init_pg(self, create: bool, artefacts: str | None) -> str:
        """Make or upgrade a PostgreSQL store's schema (one process at a time: an advisory lock);
        the artefact folder it records."""
        with self.tx():
            self.conn.execute("SELECT pg_advisory_xact_lock(?)", (SCHEMA_LOCK,))
            tables = {r[0] for r in self.conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")}
            if "meta" not in tables:
                if tables:
                    raise StoreError(f"the database {self.path} has tables but no kperfdiff store; give an empty "
                                     f"database (or schema) with --store")
                if not create:
                    raise StoreError(f"there is no results store in {self.path}; make one with kperfdiff store "
                                     f"init URL --artefacts DIR")
                if not artefacts:
                    raise StoreError(f"{self.path} is an empty database: a PostgreSQL store needs a folder for "
                                     f"its artefacts; make it with kperfdiff store init URL --artefacts DIR "
                                     f"(or add ?artefacts=DIR to the URL)")
                root = backend.artefact_dir(artefacts, self.path)
                self._create_schema()
                self.conn.execute("INSERT INTO meta VALUES ('artefacts', ?)", (root,))
                return root
            row = self.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            version = int(row[0]) if row and str(row[0]).isdigit() else 0
            if version > SCHEMA_VERSION:
                raise StoreError(f"the store {self.path} was written by a newer kperfdiff (schema {version}, "
                                 f"this one reads up to {SCHEMA_VERSION}); upgrade kperfdiff or use another --store")
            if version < SCHEMA_VERSION:
                self._upgrade(version)
            row = self.conn.execute("SELECT value FROM meta WHERE key='artefacts'").fetchone()
            if row is None and artefacts:
                root = backend.artefact_dir(artefacts, self.path)
                self.conn.execute("INSERT INTO meta VALUES ('artefacts', ?)", (root,))
                return root
            if row is None:
                raise StoreError(f"the store {self.path} names no artefact folder; set one with kperfdiff store "
                                 f"init URL --artefacts DIR")
            return row[0]

    def set_artefact_folder(self, artefacts: str) -> str:
        """Record the artefact folder of a PostgreSQL store (``kperfdiff store init --artefacts``)."""
        root = backend.artefact_dir(artefacts, str(self.path))
        self._write(lambda: self.conn.execute(
            "INSERT INTO meta VALUES ('artefacts', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (root,)))
        self.dir = Path(root)
        return root

    def _mark_dead_runs(self) -> None:
        """Mark interrupted the runs left running by a process that is gone (or of a boot that is
        over). In a PostgreSQL store, only this host's: another host's runs are that host's to judge.
        An SQLite file is written by one machine at a time, so a run another host left running in it
        (a store copied mid-run) is over."""
        boot, host = _boot_id(), host_id()
        rows = self.conn.execute("SELECT id, pid, boot_id, host FROM run WHERE state='running'").fetchall()
        for r in rows:
            if self.postgres and r["host"] and r["host"] != host:
                continue
            if r["boot_id"] != boot or not _pid_alive(r["pid"]) or r["pid"] == os.getpid():
                self.finish_run(r["id"], "interrupted")

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
        return Store._Tx(self.conn, self._begin_write)

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

    # -- machines and runs ---------------------------------------------------
    def add_machine(self, facts: dict) -> int:
        fp = fingerprint(facts)

        def w():
            row = self.conn.execute("SELECT id FROM machine WHERE fingerprint=?", (fp,)).fetchone()
            if row:
                return row[0]
            # another machine of a shared store may be adding the same configuration now: the first
            # row wins, and both use it
            self.conn.execute(
                "INSERT INTO machine (fingerprint, arch, cpu_model, cpus, kernel_release, emulated, facts) "
                "VALUES (?,?,?,?,?,?,?) ON CONFLICT (fingerprint) DO NOTHING",
                (fp, facts.get("arch"), facts.get("cpu_model"), facts.get("cpus"), facts.get("kernel_release"),
                 int(bool(facts.get("emulated"))), json.dumps(facts, sort_keys=True)))
            return self.conn.execute("SELECT id FROM machine WHERE fingerprint=?", (fp,)).fetchone()[0]
        return self._write(w)

    def machine(self, machine_id: int | None) -> dict:
        if machine_id is None:
            return {}
        row = self.conn.execute("SELECT facts FROM machine WHERE id=?", (machine_id,)).fetchone()
        return json.loads(row[0]) if row else {}

    def artefact_root(self) -> Path:
        """Where the run folders go: ``NAME.artefacts`` beside an SQLite file; a PostgreSQL store's
        artefact folder."""
        return self.dir if self.postgres else self.dir / (self.path.stem + ".artefacts")

    def start_run(self, *, label: str = "", variant: str = "", target: str = "local", machine_id: int | None,
                  command: str = "", options: dict | None = None, experiment_hash: str | None = None) -> Run:
        now = time.time()

        def w():
            cur = self.conn.execute(
                "INSERT INTO run (label, variant, target, machine_id, tool_version, started_at, state, command, "
                "options, pid, boot_id, experiment_hash, host) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (label, variant, target, machine_id, __version__, now, "running", backend.mask(command),
                 json.dumps(options or {}), os.getpid(), _boot_id(), experiment_hash, host_id()))
            rid = cur.lastrowid
            adir = self.artefact_root() / f"run-{rid}"
            self.conn.execute("UPDATE run SET artefact_dir=? WHERE id=?", (self.stored_path(adir), rid))
            return rid
        rid = self._write(w)
        return self.get_run(rid)

    def set_run_machine(self, run_id: int, machine_id: int) -> None:
        """Attach the machine a run measured on, once a remote target has said what it is."""
        self._write(lambda: self.conn.execute("UPDATE run SET machine_id=? WHERE id=?", (machine_id, run_id)))

    def finish_run(self, run_id: int, state: str) -> None:
        if state not in RUN_STATES:
            raise ValueError(state)
        self._write(lambda: self.conn.execute("UPDATE run SET state=?, ended_at=? WHERE id=?",
                                              (state, time.time(), run_id)))

    def _run(self, row, folders: dict[str, str] | None = None) -> Run:
        """A run from its row; ``folders``: the folder cache of a listing (see _artefact_text)."""
        adir = row["artefact_dir"]
        if adir:
            adir = self._artefact_text(adir, folders) if folders is not None else str(self.artefact_path(adir))
        return Run(id=row["id"], label=row["label"], variant=row["variant"], target=row["target"],
                   machine_id=row["machine_id"], tool_version=row["tool_version"], started_at=row["started_at"],
                   ended_at=row["ended_at"], state=row["state"], command=row["command"],
                   options=json.loads(row["options"] or "{}"), artefact_dir=adir or None,
                   experiment_hash=row["experiment_hash"])

    def get_run(self, run_id: int) -> Run:
        row = self.conn.execute("SELECT * FROM run WHERE id=?", (run_id,)).fetchone() if _sql_int(run_id) else None
        if not row:
            raise InputError(f"there is no run {run_id} in the store {self.path}")
        return self._run(row)

    def list_runs(self, limit: int | None = None, offset: int = 0) -> list[Run]:
        """Runs, oldest first: every run, or with ``limit`` the newest ``limit`` of them after
        leaving out the newest ``offset`` (a page counted back from the newest run)."""
        folders: dict[str, str] = {}
        if limit is None and not offset:
            rows = self.conn.execute("SELECT * FROM run ORDER BY id")
        else:
            rows = self.conn.execute("SELECT * FROM (SELECT * FROM run ORDER BY id DESC LIMIT ? OFFSET ?) AS page "
                                     "ORDER BY id", (2 ** 62 if limit is None else limit, offset))
        return [self._run(r, folders) for r in rows]

    def count_runs(self) -> int:
        return self.conn.execute("SELECT count(*) FROM run").fetchone()[0]

    def find_run(self, ref: str) -> Run:
        """A run by id, or by a label that names exactly one run."""
        ref = ref.strip()
        if ref.isdigit():
            return self.get_run(int(ref))
        rows = self.conn.execute("SELECT * FROM run WHERE label=? ORDER BY id", (ref,)).fetchall()
        if len(rows) == 1:
            return self._run(rows[0])
        if len(rows) > 1:
            ids = ", ".join(str(r["id"]) for r in rows)
            raise InputError(f"the label {ref!r} names several runs ({ids}); give a run id")
        raise InputError(f"there is no run {ref!r} in the store {self.path}; see kperfdiff runs")

    # -- results -------------------------------------------------------------
    def add_result(self, run_id: int, *, benchmark: str, params: dict, copies: int, status: str,
                   reason: str | None, unit: str | None, better: str | None, summary: dict | None,
                   raw: list[tuple], overhead: float | None = None, ops: int | None = None,
                   cpu_ns: int | None = None, wall_s: float | None = None, monitors: dict | None = None,
                   info: list | None = None, started_at: float | None = None, noise: list | None = None,
                   stop: str | None = None, replace: int | None = None, experiment_id: int | None = None,
                   cell: str | None = None, rep: int | None = None, bench_key: str | None = None) -> int:
        """Store one result and its raw intervals in one transaction.

        ``replace``: the id of a result of the same run that this one supersedes (a
        benchmark that gained repetitions): its row and intervals are rewritten in the
        same transaction, keeping its id (and so its profiles), so a reader sees the old
        result or the new one, never a mix.
        """
        return self._write(lambda: self._insert_result(
            run_id, benchmark, params, copies, status, reason, unit, better, summary, raw, overhead, ops, cpu_ns,
            wall_s, monitors, info, started_at, noise, stop, replace, experiment_id, cell, rep, bench_key))

    def _insert_result(self, run_id, benchmark, params, copies, status, reason, unit, better, summary, raw,
                       overhead, ops, cpu_ns, wall_s, monitors, info, started_at, noise, stop, replace,
                       experiment_id, cell, rep, bench_key, identity=None) -> int:
        s = summary or {}
        cols = ("run_id, benchmark, params, copies, status, reason, unit, better, n, median, min, max, q1, q3, "
                "mean, stdev, cv, overhead, ops, cpu_ns, wall_s, monitors, info, started_at, ended_at, "
                "experiment_id, cell, rep, bench_key, noise, stop, identity").split(", ")
        values = (run_id, benchmark, json.dumps(params, sort_keys=True), copies, status, reason, unit, better,
                  s.get("n"), s.get("median"), s.get("min"), s.get("max"), s.get("q1"), s.get("q3"),
                  s.get("mean"), _nan_none(s.get("stdev")), _nan_none(s.get("cv")), overhead, ops, cpu_ns, wall_s,
                  json.dumps(monitors or {}, sort_keys=True), json.dumps(info or []), started_at, time.time(),
                  experiment_id, cell, rep, bench_key, json.dumps(noise or []), stop,
                  json.dumps(identity, sort_keys=True) if identity else None)
        if replace is not None:
            cur = self.conn.execute(f"UPDATE result SET {', '.join(c + '=?' for c in cols)} WHERE id=? AND run_id=?",
                                    (*values, replace, run_id))
            if cur.rowcount != 1:
                raise StoreError(f"result {replace} of run {run_id} is not in the store {self.path}")
            self.conn.execute("DELETE FROM interval WHERE result_id=?", (replace,))
            rid = replace
        else:
            rid = self.conn.execute(f"INSERT INTO result ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                                    values).lastrowid
        self.conn.executemany("INSERT INTO interval VALUES (?,?,?,?,?,?,?)", [(rid, *r) for r in raw])
        return rid

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

    def columns(self, table: str) -> list[str]:
        """The columns of a table, in order (the same in both back ends: the schema test checks)."""
        if self.postgres:
            return [r[0] for r in self.conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
                "AND table_name = ? ORDER BY ordinal_position", (table,))]
        return [r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")]

    def _plain(self) -> sqlite3.Cursor:
        """A cursor that returns plain tuples (many rows: no sqlite3.Row per row)."""
        cur = self.conn.cursor()
        cur.row_factory = None
        return cur

    @staticmethod
    def _result(r) -> Result:
        return Result(id=r["id"], run_id=r["run_id"], benchmark=r["benchmark"], params=json.loads(r["params"]),
                      copies=r["copies"], status=r["status"], reason=r["reason"], unit=r["unit"],
                      better=r["better"], n=r["n"], median=r["median"], min=r["min"], max=r["max"], q1=r["q1"],
                      q3=r["q3"], mean=r["mean"], stdev=r["stdev"], cv=r["cv"], overhead=r["overhead"],
                      ops=r["ops"], cpu_ns=r["cpu_ns"], wall_s=r["wall_s"], monitors=json.loads(r["monitors"]),
                      info=json.loads(r["info"]), experiment_id=r["experiment_id"], cell=r["cell"],
                      rep=r["rep"], bench_key=r["bench_key"], noise=json.loads(r["noise"] or "[]"),
                      stop=r["stop"])

    def results(self, run_id: int, with_raw: bool = True) -> list[Result]:
        """A run's results in the order they were stored. ``with_raw`` also reads every raw interval
        (in one query for the whole run); what needs only the summaries passes False."""
        with self._snapshot():
            out = [self._result(r) for r in self.conn.execute("SELECT * FROM result WHERE run_id=? ORDER BY id",
                                                               (run_id,))]
            if not (with_raw and out):
                return out
            # every interval of the run in one list, cut into results by their counts: no Python work per value
            of_run = "result_id IN (SELECT id FROM result WHERE run_id=?)"
            cur = self._plain()
            raw = cur.execute(f"SELECT rep, copy, seq, value, ops, ns FROM interval WHERE {of_run} "
                              f"ORDER BY result_id, rep, copy, seq", (run_id,)).fetchall()
            sizes = cur.execute(f"SELECT result_id, count(*) FROM interval WHERE {of_run} GROUP BY result_id "
                                f"ORDER BY result_id", (run_id,)).fetchall()
        by_id = {r.id: r for r in out}
        at = 0
        for rid, n in sizes:
            by_id[rid].raw = raw[at:at + n]
            by_id[rid].values = [x[3] for x in by_id[rid].raw]
            at += n
        return out

    def run_history(self, machine_id: int | None, benchmark: str, params: dict, copies: int,
                    limit: int = 100, min_reps: int = 0) -> list[list[list[float]]]:
        """The repetitions (interval values per repetition) of one benchmark, parameter set and
        copy count in every `bench` run (not experiment cells) on one machine configuration,
        newest ``limit`` runs: what the drift between runs of this benchmark has been here.
        ``min_reps``: of those, only the runs of that many repetitions or more (the values of the
        others are not read)."""
        key = (machine_id, benchmark, json.dumps(params, sort_keys=True), copies)
        return self.run_histories([key], limit=limit, min_reps=min_reps)[key]

    def run_histories(self, keys, limit: int = 100, min_reps: int = 0) -> dict[tuple, list[list[list[float]]]]:
        """:meth:`run_history` of many (machine id, benchmark, params as sorted JSON, copies) keys at once,
        in three statements whatever their number (a comparison of two big runs asks for hundreds; to a
        PostgreSQL server on the network, each statement is a round trip). key -> its history."""
        keys = list(dict.fromkeys(keys))
        out: dict[tuple, list[list[list[float]]]] = {k: [] for k in keys}
        asked = [k for k in keys if k[0] is not None and _sql_int(k[0])]
        if not asked:
            return out
        cur = self._plain()
        with self._snapshot():
            ids_of = self._history_ids(cur, asked, limit)
            ids = [rid for got in ids_of for rid in got]
            if not ids:
                return out
            # The size of each repetition, then the values in one column cut by those sizes: less
            # Python work than a (result, rep, value) row per value, for the hundreds of thousands of
            # values a comparison of two big runs reads.
            in_ids, arg = self._id_list()
            sizes = cur.execute(f"SELECT result_id, count(*) FROM interval WHERE result_id {in_ids} "
                                f"GROUP BY result_id, rep ORDER BY result_id, rep", (arg(ids),)).fetchall()
            n_reps = collections.Counter(rid for rid, _ in sizes)
            ids_of = [[rid for rid in got if n_reps[rid] >= min_reps] for got in ids_of]
            kept = sorted(rid for got in ids_of for rid in got)
            values = [v for (v,) in cur.execute(f"SELECT value FROM interval WHERE result_id {in_ids} "
                                                f"ORDER BY result_id, rep, copy, seq", (arg(kept),))] if kept else []
        reps: dict[int, list[list[float]]] = {rid: [] for rid in kept}
        at = 0
        for rid, n in sizes:
            if rid in reps:
                reps[rid].append(values[at:at + n])
                at += n
        for k, got in zip(asked, ids_of):
            out[k] = [reps[rid] for rid in got]
        return out

    def _history_ids(self, cur, keys: list[tuple], limit: int) -> list[list[int]]:
        """For each key, the ids of its newest ``limit`` ok bench results, newest first, in one statement:
        per key, a search of the result_history index (its benchmark, params and copies) in run order
        from the newest, stopped after ``limit`` rows of its machine. The keys go in as one JSON
        parameter (no limit on their number). SQLite has no LATERAL join: a correlated subquery per key
        gives its ids and runs as one text, sorted here."""
        if self.postgres:
            arg = json.dumps([dict(zip("imbpc", (i, *k))) for i, k in enumerate(keys)])
            rows = cur.execute(
                "SELECT k.i, h.id FROM json_to_recordset(?::json) AS k(i bigint, m bigint, b text, p text, c bigint) "
                "CROSS JOIN LATERAL (SELECT result.id, result.run_id FROM result JOIN run ON run.id = result.run_id "
                "WHERE run.machine_id=k.m AND result.benchmark=k.b AND result.params=k.p AND result.copies=k.c "
                "AND result.status='ok' AND result.experiment_id IS NULL "
                "ORDER BY result.run_id DESC, result.id DESC LIMIT ?) AS h "
                "ORDER BY k.i, h.run_id DESC, h.id DESC", (arg, limit)).fetchall()
            out: list[list[int]] = [[] for _ in keys]
            for i, rid in rows:
                out[i].append(rid)
            return out
        arg = json.dumps([[i, *k] for i, k in enumerate(keys)])
        rows = cur.execute(
            "SELECT k.key, (SELECT group_concat(h.run_id || ':' || h.id) FROM (SELECT result.id, result.run_id "
            "FROM result JOIN run ON run.id = result.run_id WHERE run.machine_id=json_extract(k.value, '$[1]') "
            "AND result.benchmark=json_extract(k.value, '$[2]') AND result.params=json_extract(k.value, '$[3]') "
            "AND result.copies=json_extract(k.value, '$[4]') AND result.status='ok' AND result.experiment_id IS NULL "
            "ORDER BY result.run_id DESC, result.id DESC LIMIT ?) AS h) FROM json_each(?) AS k",
            (limit, arg)).fetchall()
        out = [[] for _ in keys]
        for i, text in rows:
            pairs = sorted((tuple(map(int, x.split(":"))) for x in text.split(",")), reverse=True) if text else []
            out[i] = [rid for _run, rid in pairs]
        return out

    def _id_list(self):
        """(``IN ...`` of one parameter, what makes that parameter of a list of ids): a list of any
        length as one parameter (SQLite allows 32766 ``?`` in a statement, older ones 999)."""
        if self.postgres:
            return "= ANY(?)", list
        return "IN (SELECT value FROM json_each(?))", json.dumps

    # -- profiles ------------------------------------------------------------
    def add_profile(self, *, run_id: int, result_id: int | None, benchmark: str, rep: int, path: str,
                    kallsyms: str | None, event: str | None, samples: int | None, cpu_time_ns: int | None,
                    ops: int | None, meta: dict | None = None) -> int:
        def w():
            return self.conn.execute(
                "INSERT INTO profile (result_id, run_id, benchmark, rep, path, kallsyms, event, samples, "
                "cpu_time_ns, ops, meta) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (result_id, run_id, benchmark, rep, self.stored_path(path),
                 self.stored_path(kallsyms) if kallsyms else None, event, samples, cpu_time_ns, ops,
                 json.dumps(meta or {}))).lastrowid
        return self._write(w)

    def profiles(self, run_id: int, benchmark: str | None = None) -> list[dict]:
        q = "SELECT * FROM profile WHERE run_id=?"
        args: list = [run_id]
        if benchmark:
            q += " AND benchmark=?"
            args.append(benchmark)
        out = []
        folders: dict[str, str] = {}
        for r in self.conn.execute(q + " ORDER BY id", args):
            d = dict(r) | {"meta": json.loads(r["meta"] or "{}")}
            d["path"] = self._artefact_text(d["path"], folders)
            d["kallsyms"] = self._artefact_text(d["kallsyms"], folders) if d["kallsyms"] else None
            if d["meta"].get("symfs"):
                d["meta"]["symfs"] = self._artefact_text(d["meta"]["symfs"], folders)
            out.append(d)
        return out

    def primary_profiles(self, run_id: int) -> list[dict]:
        """A run's profiles, one kind per benchmark: the sampled ones, else the exact counts."""
        by_bench: dict[str, list[dict]] = {}
        for p in self.profiles(run_id):
            by_bench.setdefault(p["benchmark"], []).append(p)
        return [p for ps in by_bench.values() for p in _of_kind(ps, None, run_id)]

    def profile_refs(self, spec: str, event: str | None = None) -> list[tuple[list[Path], dict]]:
        """Resolve ``RUN``, ``RUN:BENCH``, ``RUN:BENCH@CORES`` or ``R1,R2:BENCH`` to the profile files of
        each repetition and their facts.

        A run with profiles of several benchmarks needs the benchmark named, and one with several
        core counts needs ``@CORES``. The parallel copies of one repetition come back together (one
        replicate, to be merged); repetitions are the replicates. A run of a deterministic guest may
        also hold exact instruction counts (event COUNTED_EVENT): ``event="instructions"`` picks
        them; otherwise they are used only when the run has no sampled profile.
        """
        out: list[tuple[list[Path], dict]] = []
        for part in spec.split(","):
            ref, _, bench = part.strip().partition(":")
            bench, at, cores_text = bench.partition("@")
            if at and not (cores_text.isdigit() and len(cores_text) < 6 and int(cores_text) >= 1):
                raise InputError(f"{part.strip()!r}: @ takes a core count, as in {ref}:{bench or 'BENCHMARK'}@2")
            run = self.find_run(ref)
            profs = _of_kind(self.profiles(run.id, bench or None), event, run.id)
            if not profs:
                what = f"of {bench} " if bench else ""
                raise InputError(f"run {run.id} has no profile {what}in the store; record one with "
                                 f"kperfdiff bench --profile")
            benches = sorted({p["benchmark"] for p in profs})
            if len(benches) > 1:
                raise InputError(f"run {run.id} has profiles of several benchmarks ({', '.join(benches)}); "
                                 f"name one as {run.id}:BENCHMARK")

            def cores_of(p):
                return int((p.get("meta") or {}).get("copies") or 1)
            counts = sorted({cores_of(p) for p in profs})
            if at:
                profs = [p for p in profs if cores_of(p) == int(cores_text)]
                if not profs:
                    raise InputError(f"run {run.id} has no profile of {benches[0]} at {cores_text} cores "
                                     f"(it has {', '.join(map(str, counts))})")
            elif len(counts) > 1:
                raise InputError(f"run {run.id} has profiles of {benches[0]} at {', '.join(map(str, counts))} "
                                 f"cores; choose one as {run.id}:{benches[0]}@N")
            facts = self.machine(run.machine_id)
            by_rep: dict[int, list[dict]] = {}
            for p in profs:
                by_rep.setdefault(p["rep"], []).append(p)
            for rep, ps in sorted(by_rep.items()):
                ops = [p["ops"] for p in ps]
                cpu = [p["cpu_time_ns"] for p in ps]
                out.append(([Path(p["path"]) for p in ps], {
                    "label": run.label or f"run {run.id}", "arch": facts.get("arch"),
                    "ops": sum(ops) if all(ops) else None, "cpu_time_ns": sum(cpu) if all(cpu) else None,
                    "kallsyms": ps[0]["kallsyms"], "run_id": run.id, "rep": rep, "cores": cores_of(ps[0]),
                    "benchmark": ps[0]["benchmark"], "emulated": bool(facts.get("emulated")),
                    "symfs": (ps[0].get("meta") or {}).get("symfs"), "time_unit": facts.get("time_unit"),
                    "counted": ps[0]["event"] == COUNTED_EVENT,
                    "instructions": _sum_counts([(p.get("meta") or {}).get("instructions") for p in ps])}))
        return out

    # -- experiments (schema 2) ----------------------------------------------
    def create_experiment(self, *, name: str, path: str, file_hash: str, spec: dict, cells: int) -> int:
        """A new experiment, owned by this process and marked running."""
        return self._write(lambda: self.conn.execute(
            "INSERT INTO experiment (name, path, file_hash, spec, state, cells, created, updated, pid, boot_id, host) "
            f"VALUES (?,?,?,?,?,?,?,{self._now},?,?,?)",
            (name, path, file_hash, json.dumps(spec, sort_keys=True), "running", cells, time.time(), os.getpid(),
             _boot_id(), host_id())).lastrowid)

    @staticmethod
    def _experiment(row) -> dict:
        d = dict(row)
        d["spec"] = json.loads(d["spec"] or "{}")
        return d

    def get_experiment(self, exp_id: int) -> dict:
        row = self.conn.execute("SELECT * FROM experiment WHERE id=?", (exp_id,)).fetchone() \
            if _sql_int(exp_id) else None
        if not row:
            raise InputError(f"there is no experiment {exp_id} in the store {self.path}")
        return self._experiment(row)

    def list_experiments(self) -> list[dict]:
        return [self._experiment(r) for r in self.conn.execute("SELECT * FROM experiment ORDER BY id")]

    def latest_experiment(self, name: str) -> dict | None:
        """The newest experiment of that name that was not superseded by --restart, or None."""
        row = self.conn.execute("SELECT * FROM experiment WHERE name=? AND state!='superseded' "
                                "ORDER BY id DESC LIMIT 1", (name,)).fetchone()
        return self._experiment(row) if row else None

    def find_experiment(self, ref: str) -> dict:
        """An experiment by id, or the newest (not superseded) one of that name."""
        ref = ref.strip()
        if ref.isdigit():
            return self.get_experiment(int(ref))
        exp = self.latest_experiment(ref)
        if exp is None:
            raise InputError(f"there is no experiment {ref!r} in the store {self.path}; run one with "
                             f"kperfdiff run FILE")
        return exp

    def set_experiment_state(self, exp_id: int, state: str, *, claim: bool = False) -> None:
        """Set the state; ``claim`` also records this process as the owner."""
        if claim:
            self._write(lambda: self.conn.execute(
                f"UPDATE experiment SET state=?, updated={self._now}, pid=?, boot_id=?, host=? WHERE id=?",
                (state, os.getpid(), _boot_id(), host_id(), exp_id)))
        else:
            self._write(lambda: self.conn.execute(f"UPDATE experiment SET state=?, updated={self._now} WHERE id=?",
                                                  (state, exp_id)))

    def owns_experiment(self, exp_id: int) -> bool:
        """Whether this process is (still) the one running the experiment: no other machine took it over."""
        row = self.conn.execute("SELECT pid, host FROM experiment WHERE id=?", (exp_id,)).fetchone()
        return bool(row) and row[0] == os.getpid() and row[1] in (None, host_id())

    def heartbeat(self, exp_id: int) -> bool:
        """Say that this process is running the experiment still (experiment.updated := now, by the
        store's clock); False if it is no longer this process's (another machine took it over)."""
        return self._write(lambda: self.conn.execute(
            f"UPDATE experiment SET updated={self._now} WHERE id=? AND state='running' AND pid=? AND host=?",
            (exp_id, os.getpid(), host_id())).rowcount) == 1

    def heartbeat_age(self, exp_id: int) -> float | None:
        """Seconds since the experiment's process last said it was alive (its heartbeat), by the
        store's clock; None if it never did."""
        row = self.conn.execute(f"SELECT {self._now} - updated FROM experiment WHERE id=?", (exp_id,)).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def of_another_host(self, exp: dict) -> bool:
        """A PostgreSQL store's experiment whose process is on another machine (which only its heartbeat
        can say is alive)."""
        return self.postgres and bool(exp.get("host")) and exp["host"] != host_id()

    def experiment_owner_alive(self, exp: dict) -> bool:
        """Whether another live process is running this experiment now. In a PostgreSQL store, one of
        another host is alive while its heartbeat is younger than limits.EXPERIMENT_DEAD_S."""
        if exp["state"] != "running":
            return False
        if self.of_another_host(exp):
            age = self.heartbeat_age(exp["id"])
            return age is not None and age < limits.EXPERIMENT_DEAD_S
        return exp.get("pid") != os.getpid() and exp.get("boot_id") == _boot_id() and _pid_alive(exp.get("pid"))

    def take_over_experiment(self, exp_id: int) -> bool:
        """Mark interrupted an experiment another machine's process left running, and its runs, if its
        heartbeat is older than limits.EXPERIMENT_DEAD_S: in one statement that checks and changes, so
        of several machines trying at once one wins (True); the others, and any try on an experiment whose
        process is alive after all, change nothing (False). The winner then resumes it as any interrupted
        experiment."""
        def w():
            won = self.conn.execute(
                f"UPDATE experiment SET state='interrupted', updated={self._now} WHERE id=? AND state='running' "
                f"AND host IS NOT NULL AND host<>? AND (updated IS NULL OR updated < {self._now} - ?)",
                (exp_id, host_id(), limits.EXPERIMENT_DEAD_S)).rowcount == 1
            if won:
                self.conn.execute("UPDATE run SET state='interrupted', ended_at=? WHERE experiment_id=? "
                                  "AND state='running'", (time.time(), exp_id))
            return won
        return self._write(w)

    def link_run(self, run_id: int, exp_id: int) -> None:
        self._write(lambda: self.conn.execute("UPDATE run SET experiment_id=? WHERE id=?", (exp_id, run_id)))

    def reopen_run(self, run_id: int) -> Run:
        """Mark a run running again, owned by this process (a resumed experiment)."""
        self._write(lambda: self.conn.execute(
            "UPDATE run SET state='running', ended_at=NULL, pid=?, boot_id=?, host=? WHERE id=?",
            (os.getpid(), _boot_id(), host_id(), run_id)))
        return self.get_run(run_id)

    def experiment_runs(self, exp_id: int) -> list[Run]:
        return [self._run(r) for r in self.conn.execute(
            "SELECT * FROM run WHERE experiment_id=? ORDER BY id", (exp_id,))]

    def run_experiment_id(self, run_id: int) -> int | None:
        row = self.conn.execute("SELECT experiment_id FROM run WHERE id=?", (run_id,)).fetchone()
        return row[0] if row else None

    def cell_states(self, exp_id: int) -> dict[str, str]:
        """cell key -> status of every stored cell of an experiment."""
        return {r[0]: r[1] for r in self.conn.execute(
            "SELECT cell, status FROM result WHERE experiment_id=? AND cell IS NOT NULL", (exp_id,))}

    def add_cell_result(self, run_id: int, *, experiment_id: int, cell: str, rep: int, bench_key: str,
                        benchmark: str, params: dict, copies: int, status: str, reason: str | None,
                        unit: str | None, better: str | None, summary: dict | None, raw: list[tuple],
                        overhead: float | None = None, ops: int | None = None, cpu_ns: int | None = None,
                        wall_s: float | None = None, monitors: dict | None = None, info: list | None = None,
                        started_at: float | None = None, noise: list | None = None, stop: str | None = None,
                        identity: dict | None = None) -> int:
        """Store one experiment cell and its raw intervals in one transaction; ``identity``: what it
        was measured on (kperfdiff.targets.machine.identity).

        A failed cell of the same key (an earlier attempt) is replaced in the
        same transaction; a finished (ok or skipped) cell is never replaced:
        the unique index on (experiment_id, cell) refuses a second one.
        """
        def w():
            self.conn.execute("DELETE FROM result WHERE experiment_id=? AND cell=? AND status='failed'",
                              (experiment_id, cell))
            return self._insert_result(run_id, benchmark, params, copies, status, reason, unit, better, summary,
                                       raw, overhead, ops, cpu_ns, wall_s, monitors, info, started_at, noise, stop,
                                       None, experiment_id, cell, rep, bench_key, identity)
        try:
            return self._write(w)
        except IntegrityError:
            raise StoreError(f"cell {cell} of experiment {experiment_id} is already stored; "
                             f"it is never measured twice") from None

    def cell_identities(self, exp_id: int) -> dict[str, dict[str, int]]:
        """variant -> {identity as sorted JSON ("" for none): how many of its finished (ok or skipped)
        cells were measured on it} of an experiment (failed cells are measured again, so not counted)."""
        out: dict[str, dict[str, int]] = {}
        for variant, ident, n in self.conn.execute(
                "SELECT run.variant, result.identity, count(*) FROM result JOIN run ON run.id = result.run_id "
                "WHERE result.experiment_id=? AND result.cell IS NOT NULL AND result.status IN ('ok','skipped') "
                "GROUP BY run.variant, result.identity", (exp_id,)).fetchall():
            out.setdefault(variant, {})[ident or ""] = n
        return out

    def cell_stops(self, exp_id: int) -> dict[tuple[str, int], str]:
        """(column, copies) -> why its repetitions stopped, for the columns of an experiment that have a reason.
        (Every cell has a key: ``cell IS NOT NULL`` lets this and set_cell_stop use the result_cell index.)"""
        return {(r[0], r[1]): r[2] for r in self.conn.execute(
            "SELECT bench_key, copies, stop FROM result WHERE experiment_id=? AND cell IS NOT NULL "
            "AND stop IS NOT NULL", (exp_id,))}

    def set_cell_stop(self, exp_id: int, bench_key: str, copies: int, text: str) -> None:
        """Say, on every cell of one column and core count of an experiment, why its repetitions stopped."""
        self._write(lambda: self.conn.execute(
            "UPDATE result SET stop=? WHERE experiment_id=? AND cell IS NOT NULL AND bench_key=? AND copies=?",
            (text, exp_id, bench_key, copies)))

def _nan_none(v):
    if v is None:
        return None
    try:
        return None if v != v else v
    except TypeError:
        return v

# The machine row's identity: facts that stay the same across boots of one configuration.
STABLE_KEYS = ("arch", "cpu_model", "cpus", "kernel_release", "kernel_version", "cmdline", "hostname",
               "page_size", "mem_total_kb", "thp_enabled", "thp_defrag", "clocksource", "virtualisation",
               "emulated", "perf_events", "swap_active")   # swap on or off changes what paging measures

def fingerprint(f: dict) -> str:
    stable = {k: f.get(k) for k in STABLE_KEYS}
    return hashlib.sha256(json.dumps(stable, sort_keys=True).encode()).hexdigest()[:16]
