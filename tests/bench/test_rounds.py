"""The repetition scheduler: fixed counts, rotation, precision, limits, failures."""
import math

from kperfdiff.bench import rounds


def test_fixed_count_rotates_the_order():
    seen = []
    why = rounds.run_rounds(["a", "b", "c"], lambda order, r: seen.append((r, order)) or set(),
                            lambda g: {}, rounds.RepetitionPolicy(reps=3))
    assert seen == [(0, ["a", "b", "c"]), (1, ["b", "c", "a"]), (2, ["c", "a", "b"])]
    assert why == {g: "3 repetitions (fixed count)" for g in "abc"}


def test_precision_stops_each_group_on_its_own():
    counts = {"tight": 0, "loose": 0}

    def measure(order, r):
        for g in order:
            counts[g] += 1
        return set()

    def widths(groups):   # tight is precise after 3 reps, loose after 6
        return {g: (1.0 if counts[g] >= (3 if g == "tight" else 6) else 9.0) for g in groups}
    why = rounds.run_rounds(["tight", "loose"], measure, widths, rounds.RepetitionPolicy(reps=2, precision=2))
    assert counts == {"tight": 3, "loose": 6}
    assert why["tight"].startswith("precision reached: +-1.0% <= +-2% after 3")
    assert why["loose"].startswith("precision reached") and "after 6" in why["loose"]


def test_limits_and_failures_are_stated():
    clock = iter(range(0, 10000, 10))
    why = rounds.run_rounds(["g"], lambda o, r: set(), lambda g: {"g": math.nan},
                            rounds.RepetitionPolicy(reps=1, precision=1, max_time=25), clock=lambda: next(clock))
    assert why["g"].startswith("time limit (25 s): no interval yet > +-1%")
    why = rounds.run_rounds(["g"], lambda o, r: set(), lambda g: {"g": 5.0},
                            rounds.RepetitionPolicy(reps=1, precision=1, max_reps=4))
    assert why["g"] == "repetition limit: +-5.0% > +-1% after 4 repetitions"
    why = rounds.run_rounds(["ok", "bad"], lambda o, r: {"bad"}, lambda g: {},
                            rounds.RepetitionPolicy(reps=3))
    assert why["bad"].startswith("stopped after 1 repetitions") and why["ok"].startswith("3 repetitions")


def test_first_round_continues_an_earlier_matrix():
    seen = []
    rounds.run_rounds(["g"], lambda o, r: seen.append(r) or set(),
                      lambda g: {"g": 9.0 if len(seen) < 2 else 0.5},
                      rounds.RepetitionPolicy(reps=3, precision=1), first=3)
    assert seen == [3, 4]
