"""``kperfdiff store copy SRC DST``: a whole store, rows and artefacts, from one place to another
(SQLite to PostgreSQL, PostgreSQL to SQLite, SQLite to SQLite, PostgreSQL to PostgreSQL).

The destination must hold no run, experiment or machine yet: the copy keeps every id, so run 7
is run 7 in both, and a run's artefact folder keeps its name (``run-7``). Artefact paths are
rewritten from the source's artefact folder to the destination's (both kept relative to them);
a path outside the source's artefact folder (written by an old version) is kept as the absolute
path of the file. The rows go in one transaction of the destination, after the artefacts are
copied: a failure removes the artefacts copied and leaves no row (and no file, for an SQLite
destination the copy created). The sentinel's queue and change points go with the runs (its work
trees do not: a watch makes them again where it runs); the change-point cache does not go (a cache).
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from kperfdiff.core.errors import InputError, StoreError
from kperfdiff.store import Store, backend
from kperfdiff.store.backend import ID_TABLES

# In the order their references need (a run names its experiment and machine; a result its run...).
TABLES = ("machine", "experiment", "knob_saved", "run", "result", "interval", "profile", "watch_item", "watch_change")
CHUNK = 20_000


@dataclass
class Copied:
    rows: dict[str, int] = field(default_factory=dict)
    files: int = 0
    bytes: int = 0
    artefacts: str = ""
    matched_machines: int = 0      # --merge: source machines the destination had already


def same_place(a, b) -> bool:
    if backend.is_url(a) or backend.is_url(b):
        return str(a) == str(b)
    return os.path.abspath(a) == os.path.abspath(b)


def copy(src_location, dst_location, *, artefacts: str | None = None, merge: bool = False, log=None) -> Copied:
    """Copy the store at ``src_location`` into the (new or empty) store at ``dst_location``; ``merge``:
    add it to a store that has runs already (new ids)."""
    if same_place(src_location, dst_location):
        raise InputError("the source and the destination of store copy are the same store")
    if artefacts and not backend.is_url(dst_location):
        raise InputError("--artefacts is for a PostgreSQL destination; an SQLite store keeps its artefacts "
                         "beside its file (NAME.artefacts)")
    src = Store.open(src_location, create=False)
    dst_file = None if backend.is_url(dst_location) else Path(dst_location)
    made_file = dst_file is not None and not dst_file.exists()
    dst = None
    try:
        dst = Store.open(dst_location, create=True, artefacts=artefacts)
        return _copy(src, dst, log or (lambda m: None), merge)
    except BaseException:
        if dst is not None:
            dst.conn.close()
        if made_file:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{dst_file}{suffix}").unlink(missing_ok=True)
        raise
    finally:
        src.conn.close()


class _Plan:
    """How the source's ids and artefact folders become the destination's: the same (a copy into an
    empty store), or (--merge) each id moved past the destination's largest and each machine matched
    by its fingerprint; a run folder ``run-N`` follows its run's new id."""

    def __init__(self, src: Store, dst: Store, merge: bool):
        self.offset = {t: 0 for t in ID_TABLES}
        self.machines: dict[int, int] = {}
        self.skip_machines: set[int] = set()
        self.moves = merge
        if merge:
            for t in ID_TABLES:
                self.offset[t] = dst.conn.execute(f"SELECT coalesce(max(id), 0) FROM {t}").fetchone()[0]
            known = dict(dst.conn.execute("SELECT fingerprint, id FROM machine").fetchall())
            for mid, fp in src.conn.execute("SELECT id, fingerprint FROM machine").fetchall():
                if fp in known:
                    self.machines[mid] = known[fp]
                    self.skip_machines.add(mid)
                else:
                    self.machines[mid] = mid + self.offset["machine"]

    def entry(self, name: str) -> str:
        """An entry of the artefact folder as the destination names it."""
        if self.offset["run"] and name.startswith("run-") and name[4:].isdigit():
            return f"run-{int(name[4:]) + self.offset['run']}"
        return name

    def ids(self, table: str, cols: list[str], row: list) -> list:
        """A row with its own id and the ids it references moved (nothing moves in a plain copy)."""
        refs = {"id": table, "run_id": "run", "result_id": "result", "experiment_id": "experiment",
                "bisect_item": "watch_item"}
        for i, c in enumerate(cols):
            if row[i] is None:
                continue
            if c == "machine_id" or (table == "machine" and c == "id"):
                row[i] = self.machines.get(row[i], row[i])
            elif c in refs and (c != "id" or table in ID_TABLES):
                row[i] += self.offset[refs[c]]
        return row


def _copy(src: Store, dst: Store, log, merge: bool = False) -> Copied:
    out = Copied(artefacts=str(dst.artefact_root()))
    made: list[Path] = []
    new_root = None if dst.artefact_root().exists() else dst.artefact_root()
    try:
        with src.snapshot(), dst.tx():
            if dst.postgres:        # no other writer while the ids are chosen and the rows go in
                dst.conn.execute(f"LOCK TABLE {', '.join(TABLES)} IN EXCLUSIVE MODE")
            held = {t: dst.conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                    for t in ("run", "experiment", "machine")}
            if any(held.values()) and not merge:
                what = ", ".join(f"{n} {t}{'s' if n != 1 else ''}" for t, n in held.items() if n)
                raise InputError(f"the destination store {dst.path} is not empty ({what}); store copy fills a new "
                                 f"or empty store, or adds to one with --merge")
            plan = _Plan(src, dst, merge)
            out.matched_machines = len(plan.skip_machines)
            entries = {e: plan.entry(e) for e in _artefact_entries(src)}
            clash = sorted(n for n in entries.values() if (dst.artefact_root() / n).exists())
            if clash:
                raise InputError(f"the artefact folder {dst.artefact_root()} already has {clash[0]}; give the "
                                 f"destination an empty artefact folder")
            for e in sorted(entries):
                out.files, out.bytes = _copy_entry(src.artefact_root() / e, dst.artefact_root() / entries[e], made,
                                                   out.files, out.bytes)
            log(f"kperfdiff: copied {out.files} artefact files ({out.bytes / 1e6:.1f} MB) to {dst.artefact_root()}")
            for table in TABLES:
                out.rows[table] = _copy_table(src, dst, table, plan)
            if dst.postgres:
                for table in ID_TABLES:
                    dst.conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), max(id)) "
                                     f"FROM {table}")
    except backend.DatabaseError as e:
        _remove(made, new_root)
        raise StoreError(f"cannot copy into the store {dst.path}: {e}; nothing was copied") from None
    except OSError as e:
        _remove(made, new_root)
        raise StoreError(f"cannot copy the artefacts to {dst.artefact_root()}: {e.strerror or e}; "
                         f"nothing was copied") from None
    except BaseException:
        _remove(made, new_root)
        raise
    if dst.postgres:
        try:
            dst.conn.execute("ANALYZE")    # plan the first queries on the new rows well (autovacuum would, later)
        except backend.DatabaseError:
            pass
    return out


def _stored_texts(src: Store):
    """Every artefact path the source stores."""
    for (adir,) in src.conn.execute("SELECT artefact_dir FROM run WHERE artefact_dir IS NOT NULL"):
        yield adir
    for path, kallsyms, meta in src.conn.execute("SELECT path, kallsyms, meta FROM profile"):
        yield path
        if kallsyms:
            yield kallsyms
        symfs = json.loads(meta or "{}").get("symfs")
        if symfs:
            yield symfs


def _inside(src: Store, text: str) -> str | None:
    """The path of a stored artefact relative to the source's artefact folder (None: outside it)."""
    where = src.artefact_path(text)
    try:
        return Path(os.path.abspath(where)).relative_to(os.path.abspath(src.artefact_root())).as_posix()
    except ValueError:
        return None


def _artefact_entries(src: Store) -> set[str]:
    """The entries of the source's artefact folder (run folders, mostly) that stored paths name."""
    out = set()
    for text in _stored_texts(src):
        rel = _inside(src, text)
        if rel and rel != "." and (src.artefact_root() / rel.split("/")[0]).exists():
            out.add(rel.split("/")[0])
    return out


def _copy_entry(a: Path, b: Path, made: list[Path], files: int, size: int) -> tuple[int, int]:
    b.parent.mkdir(parents=True, exist_ok=True)
    made.append(b)
    if a.is_dir():
        shutil.copytree(a, b, symlinks=True)
        for p in b.rglob("*"):
            if p.is_file() and not p.is_symlink():
                files, size = files + 1, size + p.stat().st_size
    else:
        shutil.copy2(a, b)
        files, size = files + 1, size + b.stat().st_size
    return files, size


def _remove(made: list[Path], new_root: Path | None) -> None:
    """Remove what a failed copy made: the entries it copied, then the artefact folder if it made it
    and nothing else is in it."""
    for p in made:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    if new_root is not None:
        try:
            new_root.rmdir()
        except OSError:
            pass


def _moved(src: Store, dst: Store, plan: _Plan, text: str | None) -> str | None:
    """A stored artefact path of the source, as the destination stores the same file."""
    if not text:
        return text
    rel = _inside(src, text)
    if rel:
        head, _, rest = rel.partition("/")
        target = dst.artefact_root() / plan.entry(head) / rest if rest else dst.artefact_root() / plan.entry(head)
    else:
        target = Path(os.path.abspath(src.artefact_path(text)))
    return dst.stored_path(target)


def _rewrite(src: Store, dst: Store, plan: _Plan, table: str, cols: list[str], row) -> list:
    row = list(row)
    if table == "run":
        i = cols.index("artefact_dir")
        row[i] = _moved(src, dst, plan, row[i])
    elif table == "profile":
        for c in ("path", "kallsyms"):
            i = cols.index(c)
            row[i] = _moved(src, dst, plan, row[i])
        i = cols.index("meta")
        meta = json.loads(row[i] or "{}")
        if meta.get("symfs"):
            meta["symfs"] = _moved(src, dst, plan, meta["symfs"])
            row[i] = json.dumps(meta)
    return plan.ids(table, cols, row)


def _copy_table(src: Store, dst: Store, table: str, plan: _Plan) -> int:
    """Every row of one table, in chunks (a big store's intervals do not fit in memory at once)."""
    cols = src.columns(table)
    if cols != dst.columns(table):
        raise StoreError(f"the {table} tables of {src.path} and {dst.path} differ; open both with this kperfdiff "
                         f"first")
    insert = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
    key = "id" if table in ID_TABLES else ("result_id" if table == "interval" else "experiment_id")
    order = "result_id, rep, copy, seq" if table == "interval" else ("id" if key == "id" else "experiment_id, path")
    cur = src.conn.cursor()
    cur.row_factory = None
    n, last = 0, None
    # one key range at a time (by id, or result id for the intervals), so no chunk is ever the whole table
    while True:
        ids = [r[0] for r in cur.execute(
            f"SELECT DISTINCT {key} FROM {table} WHERE {key} > ? ORDER BY {key} LIMIT ?",
            (-1 if last is None else last, CHUNK if table != "interval" else 500)).fetchall()]
        if not ids:
            return n
        rows = cur.execute(f"SELECT {', '.join(cols)} FROM {table} WHERE {key} >= ? AND {key} <= ? ORDER BY {order}",
                           (ids[0], ids[-1])).fetchall()
        if table == "machine":
            rows = [r for r in rows if r[0] not in plan.skip_machines]
        if plan.moves or table in ("run", "profile"):
            rows = [_rewrite(src, dst, plan, table, cols, r) for r in rows]
        dst.conn.executemany(insert, rows)
        n += len(rows)
        last = ids[-1]
