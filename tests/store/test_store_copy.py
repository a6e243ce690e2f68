"""`kperfdiff store copy`: a store with real runs, profiles and an experiment moves from SQLite to
PostgreSQL and back, rows and artefacts identical; `compare` says the same from either back end;
what the copy refuses, and that a failed copy leaves nothing behind."""
import hashlib
import sqlite3
from pathlib import Path

import pytest

from support import assert_one_sentence_error, machine_lock, run_cli, two_variant_experiment
from kperfdiff import store as st
from kperfdiff.store import transfer
from kperfdiff.core.errors import StoreError

TINY = ["--intervals", "3", "--min-batch-ms", "1", "--no-progress"]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """An SQLite store with two bench runs (one with profiles) and an experiment of two variants."""
    d = tmp_path_factory.mktemp("lab")
    db = d / "k.db"
    with machine_lock():        # one machine for all its runs: no test changes THP or swap meanwhile
        return _lab(d, db)


def _lab(d: Path, db: Path) -> Path:
    run_cli("--store", db, "bench", "--only", "syscall.null,syscall.stat", "--reps", "3", "--label", "base", *TINY,
            check=0)
    run_cli("--store", db, "bench", "--only", "syscall.null,syscall.stat", "--reps", "3", "--label", "new",
            "--profile", *TINY, check=0)
    exp = two_variant_experiment(d / "e.toml", "lab", intervals=2, min_batch_ms=1, tiny=True)
    run_cli("--store", db, "run", exp, "--no-progress", check=0)
    return db


def _dump(db: Path) -> dict:
    """Every row of every table of an SQLite store (meta aside), in order."""
    c = sqlite3.connect(db)
    tables = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table' AND name != 'meta'")]
    out = {t: c.execute(f"SELECT * FROM {t} ORDER BY 1, 2, 3").fetchall() for t in tables}
    c.close()
    return out


def _files(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_compare_says_the_same_from_sqlite_and_postgresql(lab, pg_url):
    run_cli("store", "copy", lab, pg_url, check=0)
    for args in (["compare", "base", "new"], ["compare", "base", "new", "--format", "json"],
                 ["compare", "base", "new", "--format", "csv"], ["compare", "--experiment", "lab"],
                 ["compare", "--experiment", "lab", "--format", "markdown"], ["runs", "--all"]):
        a = run_cli("--store", lab, *args, check=0)
        b = run_cli("--store", pg_url, *args, check=0)
        assert a.stdout == b.stdout and a.stdout.strip(), args
    # the profiles are found through the PostgreSQL store's artefact folder
    a = run_cli("--store", lab, "diff", "new:syscall.stat", "new:syscall.null", "--top", "5", check=0)
    b = run_cli("--store", pg_url, "diff", "new:syscall.stat", "new:syscall.null", "--top", "5", check=0)
    assert a.stdout == b.stdout and "do_syscall_64" in a.stdout


def test_sqlite_to_postgresql_to_sqlite_gives_the_same_store_and_artefacts(lab, pg_url, pg_cluster, tmp_path):
    p = run_cli("store", "copy", lab, pg_url, check=0)
    assert "copied" in p.stderr and "artefact files" in p.stderr
    pg_root = Path(st.Store.open(pg_url).artefact_root())
    assert _files(pg_root) == _files(lab.parent / "k.artefacts")           # run-N/ folders, as they were
    # PostgreSQL to PostgreSQL, then back to SQLite (a file of the same name in another folder)
    pg2 = pg_cluster.new_database(artefacts=tmp_path / "pg2-artefacts")
    run_cli("store", "copy", pg_url, pg2, check=0)
    back = tmp_path / "back" / "k.db"
    back.parent.mkdir()
    run_cli("store", "copy", pg2, back, check=0)
    assert _dump(back) == _dump(lab)
    assert _files(back.parent / "k.artefacts") == _files(lab.parent / "k.artefacts")
    d = run_cli("--store", back, "diff", "new:syscall.stat", "new:syscall.null", "--top", "3", check=0)
    assert "do_syscall_64" in d.stdout
    # and the copy goes on taking runs: ids continue after the copied ones in both back ends
    for where in (pg2, back):
        s = st.Store.open(where)
        assert s.start_run(machine_id=None).id == max(r.id for r in s.list_runs()[:-1]) + 1


def test_copy_refuses_what_it_cannot_do_in_one_sentence(lab, pg_url, tmp_path):
    run_cli("store", "copy", lab, pg_url, check=0)
    cases = [
        ([lab, pg_url], "is not empty (4 runs, 1 experiment, 1 machine); store copy fills a new or empty store, "
                        "or adds to one with --merge"),
        ([lab, lab], "the same store"),
        ([tmp_path / "none.db", tmp_path / "x.db"], "no results store"),
        ([lab, tmp_path / "y.db", "--artefacts", tmp_path], "--artefacts is for a PostgreSQL destination"),
        ([pg_url.split("&artefacts=")[0].replace("/db_", "/nodb_"), tmp_path / "z.db"], "does not exist"),
    ]
    for args, words in cases:
        p = run_cli("store", "copy", *args)
        assert_one_sentence_error(p)
        assert words in p.stderr, p.stderr
    assert not (tmp_path / "x.db").exists() and not (tmp_path / "y.db").exists()
    assert not (tmp_path / "z.db").exists()


def test_a_failed_copy_leaves_no_row_no_artefact_and_no_new_file(lab, tmp_path, pg_url, monkeypatch):
    # the artefact folder already holds a run folder: refused before anything is written
    clash = tmp_path / "clash"
    (clash / "k.artefacts" / "run-2").mkdir(parents=True)
    p = run_cli("store", "copy", lab, clash / "k.db")
    assert_one_sentence_error(p)
    assert "already has run-2" in p.stderr and not (clash / "k.db").exists()
    # a failure half way through the rows: the destination's transaction is undone, the artefacts removed
    real = transfer._copy_table

    def failing(src, dst, table, plan):
        if table == "interval":
            raise StoreError("the disk went away")
        return real(src, dst, table, plan)
    monkeypatch.setattr(transfer, "_copy_table", failing)
    for dst in (tmp_path / "half" / "k.db", pg_url):
        if isinstance(dst, Path):
            dst.parent.mkdir()
        with pytest.raises(StoreError, match="disk went away"):
            transfer.copy(lab, dst)
    assert not (tmp_path / "half" / "k.db").exists() and list((tmp_path / "half").iterdir()) == []
    s = st.Store.open(pg_url)
    assert s.count_runs() == 0 and s.conn.execute("SELECT count(*) FROM machine").fetchone()[0] == 0
    assert not Path(s.artefact_root()).exists() or list(Path(s.artefact_root()).iterdir()) == []


def test_merge_adds_a_store_to_one_that_has_runs_with_new_ids(lab, pg_url):
    run_cli("store", "copy", lab, pg_url, check=0)
    run_cli("store", "copy", lab, pg_url, "--merge", check=0)
    a, s = st.Store.open(lab), st.Store.open(pg_url)
    n = a.count_runs()
    assert s.count_runs() == 2 * n and s.conn.execute("SELECT count(*) FROM machine").fetchone()[0] == 1
    assert [e.id for e in s.list_experiments()] == [1, 2]
    for run in a.list_runs():
        moved = s.get_run(run.id + n)
        assert (moved.label, moved.state, moved.command) == (run.label, run.state, run.command)
        assert moved.artefact_dir.endswith(f"run-{run.id + n}")
        assert [(r.benchmark, r.values, r.median) for r in s.results(moved.id)] == \
            [(r.benchmark, r.values, r.median) for r in a.results(run.id)]
        assert s.run_experiment_id(moved.id) == (None if a.run_experiment_id(run.id) is None else 2)
        for p, q in zip(s.profiles(moved.id), a.profiles(run.id)):
            assert f"/run-{run.id + n}/" in p.path and Path(p.path).read_bytes() == Path(q.path).read_bytes()
    new = str([r.id for r in s.list_runs() if r.label == "new"][-1])     # the label names two runs now
    d = run_cli("--store", pg_url, "diff", f"{new}:syscall.stat", f"{new}:syscall.null", "--top", "3", check=0)
    assert "do_syscall_64" in d.stdout
    assert len(s.cell_states(2)) == len(a.cell_states(1)) and s.find_experiment("lab").id == 2
