"""The watch's queue driven by the discrete-event simulation (kperfdiff.watch.simulate) on a real SQLite
store with the simulation's clock: every queued item is claimed once and ends in one state, none lost or
duplicated; with enough workers bisections wait little under the queue's order (bisections first);
when measurements arrive faster than the workers finish them, measurements first would starve
bisections (what docs/watch-scale.md reports, and why the queue claims bisections first), and the
queue's order does not."""
from kperfdiff.watch.simulate import Costs, Scenario, paper, report, simulate

SLOW = Costs(rep=300.0, reps=5, verify_reps=5)       # a run of one benchmark: 1504 s


def accounted(out, workers: int) -> None:
    """Each item claimed at most once (no lease runs out), and every queued item is in the store."""
    assert all(n == 1 for n in out.claims.values())
    assert sum(out.states.values()) == out.queued["measure"] + out.queued["bisect"]
    assert out.states.get("done", 0) == out.done["measure"] + out.done["bisect"]
    assert out.states.get("running", 0) <= workers                # at most one item per worker


def test_enough_workers_measure_everything_and_bisect_soon():
    sc = Scenario(commits_per_day=40, benchmarks=3, targets=1, workers=5, days=1.0, changes_per_day=8, costs=SLOW)
    out = simulate(sc)
    accounted(out, 5)
    assert out.queued["bisect"] >= 3 and out.done["bisect"] >= out.queued["bisect"] - 5
    assert max(out.waits["bisect"]) < 2 * 3600                    # bisections never wait long
    assert out.done["measure"] >= out.queued["measure"] - 3       # the backlog is what arrived last
    assert out.builds <= 5 * 40                                   # each worker builds a commit at most once


def test_overload_starves_bisections_measurements_first_but_not_in_the_queues_order():
    common = dict(commits_per_day=40, benchmarks=3, targets=1, workers=1, days=1.0, changes_per_day=8, costs=SLOW)
    starved = simulate(Scenario(**common, bisect_first=False))
    accounted(starved, 1)
    assert starved.queued["bisect"] >= 2 and starved.done["bisect"] == 0          # measurements first
    assert starved.samples[-1][1] > starved.samples[len(starved.samples) // 2][1]  # the backlog grows
    served = simulate(Scenario(**common))
    accounted(served, 1)
    assert served.queued["bisect"] >= 2 and served.done["bisect"] >= served.queued["bisect"] - 1
    assert served.done["measure"] > 0.5 * starved.done["measure"]                 # measurement goes on


def test_paper_and_report_show_their_arithmetic():
    lines = paper(Costs())
    assert any("100 x 30 x 16.1 s = 13.4 device-h/day" in x for x in lines)
    out = simulate(Scenario(commits_per_day=24, benchmarks=2, targets=1, workers=1, days=0.5, changes_per_day=4))
    text = "\n".join(report(Scenario(commits_per_day=24, benchmarks=2, targets=1, workers=1, days=0.5), out))
    assert "measure: queued 24, started 24" in text and "items claimed twice: 0" in text
