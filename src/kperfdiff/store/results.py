"""The results of a store's runs and their raw intervals, and the history of a benchmark across runs."""
from __future__ import annotations

import collections
import json
import time

from kperfdiff.core.errors import StoreError
from kperfdiff.core.records import Result
from kperfdiff.store.connection import Connection, sql_int


def _nan_none(v):
    if v is None:
        return None
    try:
        return None if v != v else v
    except TypeError:
        return v


class Results(Connection):
    """The result and interval tables."""

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
        asked = [k for k in keys if k[0] is not None and sql_int(k[0])]
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
