"""The store travels: artefact paths are relative to the store, a moved store still reads from any
directory, read-only commands never create a store, and a foreign or damaged file is refused
without being changed."""
import hashlib
import json
import shutil
import sqlite3

import pytest

from support import assert_one_sentence_error, run_cli
from kperfdiff.store import Store


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A store made by a profiled run started in one directory with a relative --store."""
    top = tmp_path_factory.mktemp("travel")
    start = top / "start"
    start.mkdir()
    p = run_cli("bench", "--only", "syscall.null", "--profile", "--reps", "2", "--intervals", "3",
                "--min-batch-ms", "2", "--no-progress", "--format", "json", "--store", "lab/kperfdiff.db",
                cwd=start, check=0)
    return top, json.loads(p.stdout)["run"]["id"]


def test_artefact_paths_are_stored_relative_to_the_store(recorded):
    top, run_id = recorded
    c = sqlite3.connect(top / "start" / "lab" / "kperfdiff.db")
    (adir,) = c.execute("SELECT artefact_dir FROM run WHERE id=?", (run_id,)).fetchone()
    paths = c.execute("SELECT path, kallsyms FROM profile WHERE run_id=?", (run_id,)).fetchall()
    c.close()
    assert adir == f"kperfdiff.artefacts/run-{run_id}"
    assert len(paths) == 2
    for path, kall in paths:
        assert path.startswith(f"kperfdiff.artefacts/run-{run_id}/") and path.endswith(".perf.data")
        assert kall == f"kperfdiff.artefacts/run-{run_id}/kallsyms"


def test_moved_store_reads_from_another_directory(recorded, tmp_path):
    top, run_id = recorded
    moved = tmp_path / "elsewhere" / "copy"
    shutil.copytree(top / "start" / "lab", moved)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    db = moved / "kperfdiff.db"
    r = run_cli("show", str(run_id), "--store", db, cwd=elsewhere, check=0)
    assert "syscall.null" in r.stdout
    r = run_cli("diff", f"{run_id}:syscall.null", f"{run_id}:syscall.null", "--store", db, "--format", "json",
                cwd=elsewhere, check=0)
    sources = json.loads(r.stdout)["sides"]["a"]["sources"]
    assert len(sources) == 2 and all(x.startswith(str(moved / "kperfdiff.artefacts")) for x in sources)
    s = Store.open(db)
    run = s.get_run(run_id)
    assert run.artefact_dir == str(moved / "kperfdiff.artefacts" / f"run-{run_id}")
    assert all(p.path.startswith(str(moved)) for p in s.profiles(run_id))
    r = run_cli("report", str(run_id), str(run_id), "--store", db, "--format", "markdown", "-o", "r.md",
                cwd=elsewhere, check=0)
    assert (elsewhere / "r.md").read_text().strip()


def test_old_style_paths_are_found_after_a_move(tmp_path):
    """Stores written before paths were store-relative held cwd-relative or absolute paths."""
    s = Store.open(tmp_path / "old" / "k.db")
    adir = s.artefact_root() / "run-1"
    adir.mkdir(parents=True)
    (adir / "x.perf.data").write_bytes(b"PERFILE2")
    s.conn.close()
    shutil.move(tmp_path / "old", tmp_path / "new")
    s = Store.open(tmp_path / "new" / "k.db")
    want = tmp_path / "new" / "k.artefacts" / "run-1" / "x.perf.data"
    assert s.artefact_path("some/cwd/old/k.artefacts/run-1/x.perf.data") == want
    assert s.artefact_path(str(tmp_path / "old" / "k.artefacts" / "run-1" / "x.perf.data")) == want
    assert s.artefact_path("k.artefacts/run-1/x.perf.data") == want


def test_diff_of_a_moved_store_without_its_artefacts_names_the_missing_file(recorded, tmp_path):
    top, run_id = recorded
    moved = tmp_path / "bare"
    moved.mkdir()
    shutil.copy(top / "start" / "lab" / "kperfdiff.db", moved / "kperfdiff.db")
    r = run_cli("diff", f"{run_id}:syscall.null", f"{run_id}:syscall.null", "--store", moved / "kperfdiff.db",
                cwd=tmp_path)
    assert_one_sentence_error(r)
    assert "is missing" in r.stderr and ".perf.data" in r.stderr


@pytest.mark.parametrize("args", [
    ["runs"], ["show", "1"], ["compare", "1", "2"], ["report", "1", "2", "-o", "r.html"], ["diff", "1", "2"],
])
def test_read_only_commands_do_not_create_a_store(tmp_path, args):
    db = tmp_path / "none" / "kperfdiff.db"
    r = run_cli(*args, "--store", db, cwd=tmp_path)
    assert_one_sentence_error(r)
    assert r.returncode == 2
    assert not (tmp_path / "none").exists()
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("kind", ["foreign-sqlite", "foreign-wal-sqlite", "not-sqlite", "schema-word",
                                  "schema-future"])
def test_foreign_or_damaged_store_is_refused_unchanged(tmp_path, kind):
    db = tmp_path / "x.db"
    if kind == "not-sqlite":
        db.write_bytes(b"hello, this is not a database\n" * 10)
    else:
        c = sqlite3.connect(db)
        if kind == "foreign-wal-sqlite":
            c.execute("PRAGMA journal_mode = WAL")
        if kind.startswith("schema"):
            c.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
            c.execute("INSERT INTO meta VALUES ('schema_version', ?)", ("abc" if kind == "schema-word" else "99",))
        else:
            c.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)")
            c.execute("INSERT INTO photos (name) VALUES ('cat.jpg')")
        c.commit()
        c.close()
    before = _sha(db)
    names = sorted(p.name for p in tmp_path.iterdir())
    for args in (["runs"], ["bench", "--only", "syscall.null", "--reps", "1"]):
        r = run_cli(*args, "--store", db, cwd=tmp_path)
        assert_one_sentence_error(r)
        assert r.returncode == 2
        words = {"schema-word": "not a number", "schema-future": "newer kperfdiff",
                 "not-sqlite": "not an SQLite file"}.get(kind, "not a kperfdiff store")
        assert words in r.stderr, r.stderr
        assert _sha(db) == before
        assert sorted(p.name for p in tmp_path.iterdir()) == names   # no -wal, -shm or artefacts


def test_empty_file_is_no_store_for_reading(tmp_path):
    db = tmp_path / "empty.db"
    db.touch()
    r = run_cli("runs", "--store", db)
    assert_one_sentence_error(r)
    assert "no results store" in r.stderr and db.stat().st_size == 0


@pytest.mark.parametrize("ref", ["99999999999999999999999", "-5", "0", "9223372036854775808"])
def test_show_of_an_impossible_id_is_a_sentence(home, ref):
    Store.open(home / "kperfdiff.db").conn.close()
    r = run_cli("show", ref)
    assert_one_sentence_error(r)
    assert r.returncode == 2 and "there is no run" in r.stderr


def test_impossible_experiment_id_is_a_sentence(home):
    Store.open(home / "kperfdiff.db").conn.close()
    r = run_cli("compare", "--experiment", "99999999999999999999999")
    assert_one_sentence_error(r)
    assert "there is no experiment" in r.stderr
