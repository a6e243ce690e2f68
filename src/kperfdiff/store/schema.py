"""The store's schema: the tables of version 1, the migrations since, and making or upgrading
them in either back end (SQLite, PostgreSQL); the check that a file is a kperfdiff store."""
from __future__ import annotations

import sqlite3
from pathlib import Path

from kperfdiff import __version__
from kperfdiff.core.errors import StoreError
from kperfdiff.store import backend
from kperfdiff.store.connection import Connection

SCHEMA_VERSION = 9

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
    # 6 -> 7: what `kperfdiff changes` keeps of each series it analysed (kperfdiff.store.history), so a
    # series that gained a result is analysed again only at its tail: ``series`` is the series' key
    # (JSON: benchmark, params, copies, host), ``settings`` the detector's settings, ``points`` how many
    # points were analysed, ``last_result`` the newest one's result id, ``digest`` a hash of every
    # analysed point (its result ids and centre, in order: a point deleted, replaced or slotted in before
    # the newest makes it differ, and the series is analysed whole), ``weak`` Otava's weak change points
    # ([index, qhat] each). A cache: deleting its rows loses nothing.
    6: """
CREATE TABLE IF NOT EXISTS change_cache (
    series TEXT PRIMARY KEY,
    settings TEXT NOT NULL,
    points INTEGER NOT NULL,
    last_result INTEGER NOT NULL,
    digest TEXT NOT NULL,
    weak TEXT NOT NULL DEFAULT '[]',
    updated REAL NOT NULL
);
""",
    # 7 -> 8: the sentinel (``kperfdiff watch``, kperfdiff.store.watch). ``watch_item`` is its queue: one row per
    # piece of work (measure a commit on a target, or bisect a change point between two commits), ``key``
    # unique so the same work is queued once, with a lease: the process that claimed it (``owner``) holds
    # it until ``lease_until`` (the store's clock), renews it while it works, and another process may claim
    # it once the lease has run out. ``watch_change`` holds the change points found in each watched
    # series (branch, target, benchmark in commit order): the commits either side, the change, whether
    # a later analysis moved it, its bisection and the culprit that named.
    7: """
CREATE TABLE IF NOT EXISTS watch_item (
    id INTEGER PRIMARY KEY,
    watch TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('measure','bisect')),
    key TEXT NOT NULL UNIQUE,
    branch TEXT NOT NULL,
    target TEXT NOT NULL,
    benchmark TEXT NOT NULL,
    commit_hash TEXT NOT NULL,
    good_hash TEXT,
    position INTEGER,
    state TEXT NOT NULL CHECK (state IN ('queued','running','done','failed')),
    owner TEXT,
    lease_until REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    run_id INTEGER REFERENCES run(id) ON DELETE SET NULL,
    detail TEXT NOT NULL DEFAULT '{}',
    created REAL NOT NULL,
    updated REAL
);
CREATE INDEX IF NOT EXISTS watch_item_state ON watch_item(watch, state);
CREATE TABLE IF NOT EXISTS watch_change (
    id INTEGER PRIMARY KEY,
    watch TEXT NOT NULL,
    branch TEXT NOT NULL,
    target TEXT NOT NULL,
    benchmark TEXT NOT NULL,
    before_hash TEXT NOT NULL,
    after_hash TEXT NOT NULL,
    direction TEXT NOT NULL CHECK (direction IN ('regression','improvement')),
    percent REAL,
    pvalue REAL,
    state TEXT NOT NULL CHECK (state IN ('current','moved')),
    bisect_item INTEGER REFERENCES watch_item(id) ON DELETE SET NULL,
    culprit TEXT,
    culprit_subject TEXT,
    culprit_author TEXT,
    verified INTEGER,
    detail TEXT NOT NULL DEFAULT '{}',
    found REAL NOT NULL,
    updated REAL,
    UNIQUE (watch, branch, target, benchmark, before_hash, after_hash)
);
""",
    # 8 -> 9: ``notified``: when a change point's culprit was sent to ``kperfdiff watch --notify`` (the
    # store's clock), so each culprit is announced once; NULL until a notify command took it.
    8: """
ALTER TABLE watch_change ADD COLUMN notified REAL;
""",
}


def check_is_store(p: Path) -> None:
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


class Schema(Connection):
    """Making, upgrading and reading the shape of a store's tables."""

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

    def columns(self, table: str) -> list[str]:
        """The columns of a table, in order (the same in both back ends: the schema test checks)."""
        if self.postgres:
            return [r[0] for r in self.conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
                "AND table_name = ? ORDER BY ordinal_position", (table,))]
        return [r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")]
