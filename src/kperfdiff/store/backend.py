"""The PostgreSQL back end of the store: a thin dialect layer under the store's own SQL.

The store's SQL (its schema, migrations and queries) is written once, in the SQL SQLite and
PostgreSQL share; SQLite runs it as it is, through ``sqlite3``. For PostgreSQL, :class:`PgConnection`
wraps a psycopg 3 connection in the small part of the ``sqlite3`` interface the store uses
(``execute``, ``executemany``, ``cursor``, rows read by name or position, ``lastrowid``,
``rowcount``, ``in_transaction``) and translates each statement once (cached):

* parameters: ``?`` becomes ``%s``;
* an ``INSERT`` into a table with an ``id`` gets ``RETURNING id``, read as ``lastrowid``;
* many rows into one table (``executemany`` of ``INSERT INTO t VALUES``) go in with ``COPY``;
* the schema (:func:`pg_ddl`): ``INTEGER PRIMARY KEY`` becomes an identity column, ``INTEGER``
  ``BIGINT`` (SQLite integers are 64-bit), ``REAL`` ``DOUBLE PRECISION``; the rest (defaults,
  checks, references, partial indexes, ``ALTER TABLE ... ADD COLUMN``) is the same text;
* a NaN parameter is stored as NULL, as SQLite stores it.

PostgreSQL's errors come back as the classes below, so the store tells a unique violation, a
transaction to retry (serialisation failure, deadlock) and a lost connection apart the same way
for both back ends (``IntegrityError`` and friends are tuples of the sqlite3 and PostgreSQL class);
they are StoreErrors, so one the store does not expect still reaches the user as one sentence.

psycopg is imported when a PostgreSQL store is opened, and only then (an optional dependency:
``pip install 'kperfdiff[postgresql]'``).
"""
from __future__ import annotations

import math
import re
import sqlite3
import urllib.parse

from kperfdiff.core.errors import StoreError

SCHEMES = ("postgresql", "postgres")
# Tables whose rows have an ``id`` (an INSERT into one returns it).
ID_TABLES = frozenset({"machine", "run", "result", "profile", "experiment", "watch_item", "watch_change"})


class PgDatabaseError(StoreError):
    """Any error PostgreSQL reported (first line of its message). A StoreError: one the store does not
    catch (a connection lost in the middle of a read) still reaches the user as one sentence."""

    def __init__(self, message: str, sqlstate: str | None = None):
        super().__init__(message)
        self.sqlstate = sqlstate


class PgIntegrityError(PgDatabaseError):
    """A unique, foreign-key, not-null or check constraint refused a row."""


class PgOperationalError(PgDatabaseError):
    """The connection or the server failed."""


class PgRetry(PgOperationalError):
    """A transaction PostgreSQL undid to let another go first (serialisation failure, deadlock):
    running it again is the answer."""


DatabaseError = (sqlite3.DatabaseError, PgDatabaseError)
IntegrityError = (sqlite3.IntegrityError, PgIntegrityError)
OperationalError = (sqlite3.OperationalError, PgOperationalError)


# -- URLs -------------------------------------------------------------------------------
def is_url(location) -> bool:
    """Whether a --store value names a PostgreSQL database rather than an SQLite file."""
    text = str(location)
    return "://" in text and text.split("://", 1)[0].lower() in SCHEMES


_SECRET_IN_USERINFO = re.compile(r"(?i)((?:postgres(?:ql)?)://[^:/@?#\s]*:)([^@\s]*)(@)")
_SECRET_IN_QUERY = re.compile(r"(?i)([?&]password=)[^&\s]*")


def mask(text: str) -> str:
    """``text`` with the password of every PostgreSQL URL in it (user:PASSWORD@ or password=...)
    replaced by ``***``: what messages, logs and the recorded command line show."""
    return _SECRET_IN_QUERY.sub(r"\1***", _SECRET_IN_USERINFO.sub(r"\1***\3", text))


def split_url(url: str) -> tuple[str, str | None]:
    """The connection URL for libpq (without kperfdiff's own ``artefacts`` query parameter) and the
    value of that parameter (None if absent)."""
    parts = urllib.parse.urlsplit(url)
    pairs = parts.query.split("&") if parts.query else []
    ours = [p for p in pairs if p.split("=", 1)[0] == "artefacts"]
    if not ours:
        return url, None         # libpq reads the URL as it was written
    rest = "&".join(p for p in pairs if p.split("=", 1)[0] != "artefacts")
    return urllib.parse.urlunsplit(parts._replace(query=rest)), urllib.parse.unquote(ours[-1].partition("=")[2])


def artefact_dir(text: str, url: str) -> str:
    """An artefact location (a folder, or a file:// URL of one) as an absolute folder path."""
    if "://" in text:
        scheme = text.split("://", 1)[0].lower()
        if scheme != "file":
            raise StoreError(f"the artefact location {text!r} of {mask(url)} is not a folder: only a folder or a "
                             f"file:// URL can hold a PostgreSQL store's artefacts ({scheme}:// is not implemented)")
        parts = urllib.parse.urlsplit(text)
        if parts.netloc not in ("", "localhost"):
            raise StoreError(f"the artefact location {text!r} names another host; give a folder this machine "
                             f"sees (a shared mount) as file:///PATH or PATH")
        text = urllib.parse.unquote(parts.path)
    if not text.startswith("/"):
        raise StoreError(f"the artefact folder {text!r} of {mask(url)} is not an absolute path; every machine "
                         f"that writes the store must find it, so give it from /")
    return text


# -- the schema in PostgreSQL's words --------------------------------------------------
_DDL = ((re.compile(r"\bINTEGER PRIMARY KEY\b"), "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"),
        (re.compile(r"\bINTEGER\b"), "BIGINT"),
        (re.compile(r"\bREAL\b"), "DOUBLE PRECISION"))


def pg_ddl(stmt: str) -> str:
    """One statement of the store's schema or migrations as PostgreSQL runs it."""
    for pattern, repl in _DDL:
        stmt = pattern.sub(repl, stmt)
    return stmt


# -- statements ---------------------------------------------------------------------------
_INSERT = re.compile(r"\s*INSERT\s+INTO\s+(\w+)", re.I)
_BULK = re.compile(r"\s*INSERT\s+INTO\s+(\w+)\s*(\([^)]*\))?\s*VALUES\s*\(\s*\?(\s*,\s*\?)*\s*\)\s*$", re.I)


def _translate(sql: str) -> tuple[str, bool]:
    """(PostgreSQL's text of a statement, whether it returns the new row's id)."""
    m = _INSERT.match(sql)
    returning = bool(m and m.group(1).lower() in ID_TABLES and "RETURNING" not in sql.upper())
    text = sql.replace("%", "%%").replace("?", "%s")
    return (text + " RETURNING id" if returning else text), returning


def _clean(params):
    """Parameters with NaN as None (SQLite stores a NaN as NULL; so does this back end)."""
    if not params:
        return params
    return [None if isinstance(v, float) and math.isnan(v) else v for v in params]


class _Row(tuple):
    """A row read by position or by column name, and ``dict(row)`` (as sqlite3.Row)."""
    __slots__ = ()
    _index: dict[str, int] = {}

    def __getitem__(self, key):
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self):
        return list(self._index)


_ROW_CLASSES: dict[tuple[str, ...], type] = {}


def _named_rows(cursor):
    """psycopg row factory: rows of a _Row subclass that knows the statement's column names."""
    desc = cursor.description
    if desc is None:
        return tuple
    names = tuple(c.name for c in desc)
    cls = _ROW_CLASSES.get(names)
    if cls is None:
        cls = _ROW_CLASSES[names] = type("Row", (_Row,), {"__slots__": (), "_index": {n: i for i, n in
                                                                                      enumerate(names)}})
    return cls


class PgCursor:
    """The result of one statement (or a cursor to run statements on)."""

    def __init__(self, owner: "PgConnection", named: bool = True):
        self._owner = owner
        with owner.errors():
            self._cur = owner.raw.cursor()
        self.row_factory = _named_rows if named else None   # None: plain tuples, as sqlite3's
        self.lastrowid = None

    @property
    def rowcount(self) -> int:
        return self._cur.rowcount

    def execute(self, sql: str, params=()) -> "PgCursor":
        text, returning = self._owner.translated(sql)
        self._cur.row_factory = self.row_factory or _tuple_rows
        with self._owner.errors():
            self._cur.execute(text, _clean(params) if params else [])
            if returning:
                row = self._cur.fetchone()
                self.lastrowid = row[0] if row else None
        return self

    def executemany(self, sql: str, seq) -> "PgCursor":
        rows = [_clean(r) for r in seq]
        if not rows:
            return self
        m = _BULK.match(sql)
        with self._owner.errors():
            if m and len(rows) > 8:
                cols = m.group(2) or ""
                with self._cur.copy(f"COPY {m.group(1)} {cols} FROM STDIN") as copy:
                    for r in rows:
                        copy.write_row(r)
            else:
                self._cur.executemany(self._owner.translated(sql)[0], rows)
        return self

    def fetchone(self):
        with self._owner.errors():
            return self._cur.fetchone()

    def fetchall(self):
        with self._owner.errors():
            return self._cur.fetchall()

    def fetchmany(self, n: int):
        with self._owner.errors():
            return self._cur.fetchmany(n)

    def __iter__(self):
        return iter(self.fetchall())


def _tuple_rows(cursor):
    return tuple


class PgConnection:
    """A psycopg 3 connection (autocommit: the store opens its transactions with BEGIN) with the
    sqlite3.Connection methods the store uses."""

    def __init__(self, raw, psycopg):
        self.raw = raw
        self._psycopg = psycopg
        self._idle = psycopg.pq.TransactionStatus.IDLE
        self._sql: dict[str, tuple[str, bool]] = {}

    def translated(self, sql: str) -> tuple[str, bool]:
        got = self._sql.get(sql)
        if got is None:
            if len(self._sql) > 2000:        # statements with IN (?,?,...) lists vary: keep the cache small
                self._sql.clear()
            got = self._sql[sql] = _translate(sql)
        return got

    def errors(self):
        return _Errors(self._psycopg)

    def execute(self, sql: str, params=()) -> PgCursor:
        return PgCursor(self).execute(sql, params)

    def executemany(self, sql: str, seq) -> PgCursor:
        return PgCursor(self).executemany(sql, seq)

    def cursor(self) -> PgCursor:
        return PgCursor(self)

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status != self._idle

    def close(self) -> None:
        self.raw.close()


class _Errors:
    """Turns psycopg's exceptions into this module's (first line of the message)."""

    def __init__(self, psycopg):
        self.psycopg = psycopg

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        if ev is None or not isinstance(ev, self.psycopg.Error):
            return False
        raise pg_error(ev, self.psycopg) from None


def pg_error(e, psycopg) -> PgDatabaseError:
    text = "PostgreSQL: " + (str(e).strip().splitlines() or [type(e).__name__])[0]
    state = getattr(e, "sqlstate", None)
    if state in ("40001", "40P01"):
        return PgRetry(text, state)
    if isinstance(e, psycopg.IntegrityError):
        return PgIntegrityError(text, state)
    if isinstance(e, psycopg.OperationalError):
        return PgOperationalError(text, state)
    return PgDatabaseError(text, state)


def connect(url: str) -> PgConnection:
    """A connection to the database a postgresql:// URL names, or a StoreError of one sentence
    that names the URL with its password masked."""
    try:
        import psycopg
    except ImportError:
        raise StoreError(f"the store {mask(url)} is a PostgreSQL database, and this kperfdiff has no psycopg "
                         f"to reach it; install it with pip install 'kperfdiff[postgresql]' "
                         f"(or 'psycopg[binary]')") from None
    conninfo, _ = split_url(url)
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.Error as e:
        raise StoreError(f"{mask(url)} is not a PostgreSQL URL libpq understands: {_sentence(e, url)}") from None
    extra = {} if "connect_timeout" in params else {"connect_timeout": 10}
    try:
        raw = psycopg.connect(conninfo, autocommit=True, application_name="kperfdiff", **extra)
    except psycopg.Error as e:
        raise StoreError(f"cannot connect to the store {mask(url)}: {_sentence(e, url)}") from None
    return PgConnection(raw, psycopg)


def _sentence(e, url: str) -> str:
    """psycopg's message on one line, without the password, however libpq quoted it."""
    lines = [" ".join(line.split()) for line in str(e).strip().splitlines() if line.strip()]
    text = "; ".join(lines) or type(e).__name__
    secret = urllib.parse.urlsplit(url).password
    if secret:
        text = text.replace(secret, "***").replace(urllib.parse.unquote(secret), "***")
    return mask(text).rstrip(".")
