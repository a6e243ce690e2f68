"""A benchmark's history across runs (`kperfdiff history`, `changes`): its stored results in the
order their runs started, with those runs and the machines they ran on; and what `changes` keeps
of each series it analysed (the ``change_cache`` table), so a series that gained a result is
analysed again only at its tail."""
from __future__ import annotations

import json
import time

from kperfdiff.core.records import Machine, Result, Run
from kperfdiff.store.machines import Machines
from kperfdiff.store.results import Results
from kperfdiff.store.runs import Runs


class History(Runs, Machines, Results):
    """Results across runs, and the change-point cache."""

    def stored_benchmarks(self) -> list[str]:
        """The benchmarks with at least one result measured (status ok), by name."""
        return [r[0] for r in self.conn.execute(
            "SELECT DISTINCT benchmark FROM result WHERE status='ok' ORDER BY benchmark")]

    def history(self, benchmarks: list[str] | None = None, *, copies: int | None = None,
                since: float | None = None) -> tuple[list[Result], dict[int, Run], dict[int, Machine]]:
        """The measured (status ok) results of ``benchmarks`` (every benchmark when None), of runs that
        started at ``since`` or later, with ``copies`` parallel copies when given: (the results with
        their raw intervals, in the order their runs started, then of their ids; the runs by id; the
        machines by id). Bench runs and the variants of experiments alike: each is a run."""
        where, args = ["result.status='ok'"], []
        if benchmarks is not None:
            in_names, arg = self._id_list()
            where.append(f"result.benchmark {in_names}")
            args.append(arg(list(benchmarks)))
        if copies is not None:
            where.append("result.copies=?")
            args.append(copies)
        if since is not None:
            where.append("run.started_at>=?")
            args.append(since)
        with self._snapshot():
            results = [self._result(r) for r in self.conn.execute(
                f"SELECT result.* FROM result JOIN run ON run.id = result.run_id WHERE {' AND '.join(where)} "
                f"ORDER BY run.started_at, run.id, result.id", args)]
            if not results:
                return [], {}, {}
            in_ids, arg = self._id_list()
            run_ids = sorted({r.run_id for r in results})
            runs = {r["id"]: self._run(r) for r in self.conn.execute(f"SELECT * FROM run WHERE id {in_ids}",
                                                                      (arg(run_ids),))}
            machine_ids = sorted({r.machine_id for r in runs.values() if r.machine_id is not None})
            machines = {row[0]: Machine(row[0], row[1], json.loads(row[2])) for row in self.conn.execute(
                f"SELECT id, fingerprint, facts FROM machine WHERE id {in_ids}", (arg(machine_ids),))}
            ids = [r.id for r in results]
            cur = self._plain()
            raw = cur.execute(f"SELECT result_id, rep, copy, seq, value, ops, ns FROM interval "
                              f"WHERE result_id {in_ids} ORDER BY result_id, rep, copy, seq", (arg(ids),)).fetchall()
        by_id = {r.id: r for r in results}
        for row in raw:
            by_id[row[0]].raw.append(row[1:])
        for r in results:
            r.values = [x[3] for x in r.raw]
        return results, runs, machines

    # -- the change-point cache ------------------------------------------------------------
    def change_cache(self, series: str) -> dict | None:
        """What `changes` kept of one series (its key, as JSON), or None."""
        row = self.conn.execute("SELECT settings, points, last_result, digest, weak FROM change_cache WHERE series=?",
                                (series,)).fetchone()
        if row is None:
            return None
        return {"settings": json.loads(row[0]), "points": row[1], "last_result": row[2], "digest": row[3],
                "weak": json.loads(row[4])}

    def save_change_cache(self, series: str, *, settings: dict, points: int, last_result: int, digest: str,
                          weak: list) -> None:
        """Keep (or replace) what `changes` found in one series."""
        self._write(lambda: self.conn.execute(
            "INSERT INTO change_cache (series, settings, points, last_result, digest, weak, updated) "
            "VALUES (?,?,?,?,?,?,?) ON CONFLICT (series) DO UPDATE SET settings=excluded.settings, "
            "points=excluded.points, last_result=excluded.last_result, digest=excluded.digest, "
            "weak=excluded.weak, updated=excluded.updated",
            (series, json.dumps(settings, sort_keys=True), points, last_result, digest, json.dumps(weak),
             time.time())))
