"""The experiments of a store (``kperfdiff run FILE``): who runs each (its process, host and
heartbeat), and its cells, one result each."""
from __future__ import annotations

import json
import os
import time

from kperfdiff.core import limits
from kperfdiff.core.errors import InputError, StoreError
from kperfdiff.core.records import StoredExperiment
from kperfdiff.store.backend import IntegrityError
from kperfdiff.store.connection import sql_int
from kperfdiff.core.hosts import boot_id, host_id, pid_alive
from kperfdiff.store.results import Results
from kperfdiff.store.runs import Runs


class Experiments(Runs, Results):
    """The experiment table, and the cells of each in the result table."""

    def create_experiment(self, *, name: str, path: str, file_hash: str, spec: dict, cells: int) -> int:
        """A new experiment, owned by this process and marked running."""
        return self._write(lambda: self.conn.execute(
            "INSERT INTO experiment (name, path, file_hash, spec, state, cells, created, updated, pid, boot_id, host) "
            f"VALUES (?,?,?,?,?,?,?,{self._now},?,?,?)",
            (name, path, file_hash, json.dumps(spec, sort_keys=True), "running", cells, time.time(), os.getpid(),
             boot_id(), host_id())).lastrowid)

    @staticmethod
    def _experiment(row) -> StoredExperiment:
        return StoredExperiment(id=row["id"], name=row["name"], path=row["path"], file_hash=row["file_hash"],
                                spec=json.loads(row["spec"] or "{}"), state=row["state"], cells=row["cells"],
                                created=row["created"], updated=row["updated"], pid=row["pid"],
                                boot_id=row["boot_id"], host=row["host"])

    def get_experiment(self, exp_id: int) -> StoredExperiment:
        row = self.conn.execute("SELECT * FROM experiment WHERE id=?", (exp_id,)).fetchone() \
            if sql_int(exp_id) else None
        if not row:
            raise InputError(f"there is no experiment {exp_id} in the store {self.path}")
        return self._experiment(row)

    def list_experiments(self) -> list[StoredExperiment]:
        return [self._experiment(r) for r in self.conn.execute("SELECT * FROM experiment ORDER BY id")]

    def latest_experiment(self, name: str) -> StoredExperiment | None:
        """The newest experiment of that name that was not superseded by --restart, or None."""
        row = self.conn.execute("SELECT * FROM experiment WHERE name=? AND state!='superseded' "
                                "ORDER BY id DESC LIMIT 1", (name,)).fetchone()
        return self._experiment(row) if row else None

    def find_experiment(self, ref: str) -> StoredExperiment:
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
                (state, os.getpid(), boot_id(), host_id(), exp_id)))
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

    def of_another_host(self, exp: StoredExperiment) -> bool:
        """A PostgreSQL store's experiment whose process is on another machine (which only its heartbeat
        can say is alive)."""
        return self.postgres and bool(exp.host) and exp.host != host_id()

    def experiment_owner_alive(self, exp: StoredExperiment) -> bool:
        """Whether another live process is running this experiment now. In a PostgreSQL store, one of
        another host is alive while its heartbeat is younger than limits.EXPERIMENT_DEAD_S."""
        if exp.state != "running":
            return False
        if self.of_another_host(exp):
            age = self.heartbeat_age(exp.id)
            return age is not None and age < limits.EXPERIMENT_DEAD_S
        return exp.pid != os.getpid() and exp.boot_id == boot_id() and pid_alive(exp.pid)

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
