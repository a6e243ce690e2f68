"""Shared fixtures: a private store per test, a PostgreSQL cluster per session. What the tests share
besides fixtures (paths, run_cli, assertions) is in tests/support/."""
from __future__ import annotations

import fcntl
import importlib.util
import signal

import pytest

from support import machine_lock

# A suite started in the background by a shell without job control (`(make test &)`) inherits SIGINT
# ignored, and so does every command a test starts: a test that interrupts one (Ctrl-C: knobs put back,
# a run marked interrupted, exit status 130) would see it run on to the end. A handler of our own is
# reset to the default in each child at exec, as a terminal's foreground job has it.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items):
    """Tests marked long (half a minute or more) first: pytest-xdist hands out tests in this order, so they
    start at once on every worker instead of ending the run on one of them while the others are idle."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


@pytest.fixture(autouse=True)
def private_state_dir(tmp_path, monkeypatch):
    """Each test keeps its pending knob restores in its own directory, not the machine's."""
    d = tmp_path / "state"
    monkeypatch.setenv("KPERFDIFF_STATE_DIR", str(d))
    return d


@pytest.fixture(autouse=True)
def machine_state_lock(request):
    """Tests marked machine_state change the machine's own state (sysctls, cgroups, IRQ affinities, THP,
    swap and zram devices) and check it byte for byte afterwards: they hold one lock file for their whole
    length, so parallel workers (make test-python runs pytest-xdist) run them one at a time whichever
    worker has them. Tests marked stable_machine (several runs that must see one machine: an A/A
    comparison, a store of runs on one machine) hold the same lock shared: no machine_state test changes
    the machine under them, and they run beside each other."""
    if request.node.get_closest_marker("machine_state") is not None:
        with machine_lock(fcntl.LOCK_EX):
            yield
    elif request.node.get_closest_marker("stable_machine") is not None:
        with machine_lock(fcntl.LOCK_SH):
            yield
    else:
        yield


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh KPERFDIFF_HOME so each test has its own store."""
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("KPERFDIFF_HOME", str(h))
    return h


@pytest.fixture(scope="session")
def pg_cluster():
    """A throwaway PostgreSQL cluster for the whole test session (tests/support/pgcluster.py)."""
    from support.pgcluster import PgCluster, bin_dir
    if bin_dir() is None:
        pytest.skip("PostgreSQL is not installed (Debian's postgresql package; make setup installs it)")
    if importlib.util.find_spec("psycopg") is None:
        pytest.skip("psycopg is not installed (pip install 'psycopg[binary]'; make setup installs it)")
    with PgCluster() as pg:
        yield pg


@pytest.fixture
def pg_url(pg_cluster, tmp_path):
    """A new, empty PostgreSQL database, its artefacts in tmp_path/pg-artefacts: its URL."""
    return pg_cluster.new_database(artefacts=tmp_path / "pg-artefacts")


@pytest.fixture(params=["sqlite", "postgresql"])
def store_location(request, tmp_path):
    """Where a test's store is: an SQLite file, then a PostgreSQL database (the same test on both)."""
    if request.param == "sqlite":
        return tmp_path / "k.db"
    return request.getfixturevalue("pg_url")
