"""The progress model: past the planned repetitions (--precision) the counter says the phase and the
time left rather than "rep 9/5", every step is counted ("[20/20 +3]"), the estimate covers the adaptive
phase as an upper bound (the time left to the deadline plus one round, at most the rounds the repetition
limit leaves), and the bar's fill and count never go back. Driven by a fake clock; the last tests run a
real experiment and a real bench with adaptive repetitions and match their plain progress lines against
the repetitions the store holds."""
import io
import re
import sqlite3
import time

from support import run_cli, two_variant_experiment
from kperfdiff.core.progress import Progress


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


class Tty(io.StringIO):
    def isatty(self):
        return True


def fills(text: str) -> list[tuple[int, int, int]]:
    """(filled, done, total) of every bar drawn."""
    return [(len(m[1]), int(m[2]), int(m[3])) for m in re.finditer(r"\[(#*)\.*\] (\d+)/(\d+)", text)]


def adaptive_experiment(p: Progress, clock: Clock, planned: int, rounds: list[int], step_s: float):
    """``planned`` steps, then a 60 s limit and adaptive rounds of the given sizes, ``step_s`` each."""
    for i in range(planned):
        p.step(f"x {p.rep_words(i, planned)}")
        clock.t += step_s
        p.advance()
    p.set_time_limit(60)
    seen = []
    for r, size in enumerate(rounds):
        p.adaptive_round(size)
        for _ in range(size):
            seen.append((p.rep_words(planned + r, planned), p.eta()))
            p.step(f"x {seen[-1][0]}")
            clock.t += step_s
            p.advance()
    return seen


def test_adaptive_counter_says_the_phase_and_the_time_left():
    clock = Clock()
    p = Progress(5, enabled=True, stream=io.StringIO(), clock=clock)
    assert p.rep_words(2, 5) == "rep 3/5"
    seen = adaptive_experiment(p, clock, 5, [1, 1, 1], step_s=10.0)
    assert [w for w, _ in seen] == ["rep 6 (adaptive, <= 60 s left)", "rep 7 (adaptive, <= 50 s left)",
                                    "rep 8 (adaptive, <= 40 s left)"]
    clock.t += 100
    assert p.rep_words(8, 5) == "rep 9 (adaptive, time limit reached: the last round)"
    assert not re.search(r"rep \d+/5", p.stream.getvalue().split("rep 5/5")[1])


def test_adaptive_eta_is_bounded_by_the_time_left():
    clock = Clock()
    p = Progress(20, enabled=True, stream=io.StringIO(), clock=clock)
    # 20 planned steps of 3 s, then rounds of 4 steps: the time left before the 60 s limit, plus one round
    # (a round started just before the limit is finished), whatever was measured before
    seen = adaptive_experiment(p, clock, 20, [4, 4], step_s=3.0)
    assert [e for _, e in seen] == [72, 69, 66, 63, 60, 57, 54, 51]
    # past the limit, the round in flight is finished (rounds start no new one): 4 steps of 3 s
    clock.t += 100
    p.adaptive_round(4)
    assert p.eta() == 4 * (clock.t - p.t0) / p.done
    assert p.rep_words(30, 20).endswith("time limit reached: the last round)")


def test_planned_eta_adds_the_most_the_adaptive_phase_can_take():
    """With an adaptive phase to come, the planned phase's estimate says what it can add at most: its time
    limit plus one round, or fewer rounds when the repetition limit leaves fewer; the bound holds for
    the adaptive steps the rounds then take."""
    clock = Clock()
    out = io.StringIO()
    p = Progress(4, enabled=True, stream=out, clock=clock)
    p.expect_adaptive(2, rounds=45, seconds=60)      # an experiment's: max_time from the phase's start
    for i in range(4):
        p.step(f"x {p.rep_words(i // 2, 2)}{p.eta_words()}")
        clock.t += 3
        p.advance()
    assert p.eta() == 0 + 60 + 2 * 3
    p.set_time_limit(60)
    end_bound = clock.t + p.eta()
    for r in range(11):      # rounds of 2 steps of 3 s until past the limit: the last starts at 60 s
        p.adaptive_round(2)
        for _ in range(2):
            assert clock.t + p.eta() <= end_bound
            p.step(f"x {p.rep_words(2 + r, 2)}{p.eta_words()}")
            clock.t += 3
            p.advance()
    lines = out.getvalue().splitlines()
    assert lines[:4] == ["[1/4] x rep 1/2", "[2/4] x rep 1/2 (ETA 00:09 + <= 01:06 adaptive)",
                         "[3/4] x rep 2/2 (ETA 00:06 + <= 01:06 adaptive)",
                         "[4/4] x rep 2/2 (ETA 00:03 + <= 01:06 adaptive)"]
    assert lines[4] == "[4/4 +1] x rep 3 (adaptive, <= 60 s left) (ETA <= 01:06)"
    assert [ln.split("]")[0] for ln in lines[4:]] == [f"[4/4 +{k}" for k in range(1, 23)]
    # the repetition limit bounds it too: 3 rounds of 2 steps of 3 s at most
    q = Progress(2, enabled=True, stream=io.StringIO(), clock=clock)
    q.expect_adaptive(2, rounds=3, seconds=600)
    q.step("a")
    clock.t += 3
    q.advance()
    assert q.eta() == 3 + 3 * 2 * 3
    # bench's --max-time counts from the first round: past it before the planned steps end, nothing is added
    b = Progress(10, enabled=True, stream=io.StringIO(), clock=clock)
    b.expect_adaptive(1, rounds=45)
    b.set_time_limit(5)
    b.step("a")
    clock.t += 3
    b.advance()
    assert b.eta() == 9 * 3


def test_bar_total_and_fill_never_go_back():
    clock = Clock()
    tty = Tty()
    p = Progress(20, enabled=True, stream=tty, clock=clock)
    adaptive_experiment(p, clock, 20, [4, 4, 4], step_s=1.0)
    drawn = fills(tty.getvalue())
    assert len(drawn) == 32
    for (f0, d0, t0), (f1, d1, t1) in zip(drawn, drawn[1:]):
        assert f1 >= f0 and d1 >= d0 and t1 == t0 == 20       # "20/20" never goes back to "20/24"
    assert "20/20 +11 ETA <=" in tty.getvalue()            # the adaptive steps are counted on


def test_quiet_when_disabled_and_plain_lines_off_a_terminal():
    quiet = io.StringIO()
    p = Progress(3, enabled=False, stream=quiet)
    p.step("a")
    p.advance()
    assert quiet.getvalue() == ""
    plain = io.StringIO()
    clock = Clock()
    p = Progress(1, enabled=True, stream=plain, clock=clock)
    adaptive_experiment(p, clock, 1, [1], step_s=1.0)
    assert plain.getvalue().splitlines() == ["[1/1] x rep 1/1", "[1/1 +1] x rep 2 (adaptive, <= 60 s left)"]
    # a guest's batch of cells is one line that counts them all
    batch = io.StringIO()
    p = Progress(8, enabled=True, stream=batch, clock=clock)
    p.step("A: 4 cells on qemu:arm64", steps=4)
    p.advance(4)
    p.step("B: 4 cells on qemu:arm64", steps=4)
    p.advance(4)
    p.adaptive_round(2)
    p.step("A: 2 cells on qemu:arm64", steps=2)
    assert batch.getvalue().splitlines() == ["[1..4/8] A: 4 cells on qemu:arm64", "[5..8/8] B: 4 cells on qemu:arm64",
                                             "[8/8 +1..2] A: 2 cells on qemu:arm64"]


def test_experiment_precision_phase_progress_lines(tmp_path, home):
    """A real experiment whose precision cannot be reached in 3 s: its adaptive repetitions read
    "rep N (adaptive, <= S s left)" with S at most 3, never "rep N/3", and no ETA beyond 3 s."""
    exp = two_variant_experiment(tmp_path / "e.toml", "prog", reps=3, precision=0.0001, max_time=3)
    r = run_cli("run", exp, check=0)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("[")]
    planned = [ln for ln in lines if re.search(r"rep \d/3", ln)]
    adaptive = [ln for ln in lines if "(adaptive" in ln]
    assert len(planned) == 6 and adaptive, r.stderr
    assert not [ln for ln in lines if re.search(r"rep ([4-9]|\d\d+)/3", ln)], r.stderr
    for ln in adaptive:
        m = re.search(r"<= (\d+) s left|time limit reached", ln)
        assert m and (m[1] is None or int(m[1]) <= 3), ln
        eta = re.search(r"ETA <= (\d\d):(\d\d)", ln)
        # the limit, or the round in flight (2 cells) if longer: well under a minute either way
        assert eta is None or int(eta[1]) * 60 + int(eta[2]) <= 30, ln


def progress_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("[")]


def assert_counted(lines: list[str], planned: int) -> None:
    """Line i (1-based) is step i: "[i/N]" while planned, then "[N/N +k]" for the k-th added one."""
    for i, ln in enumerate(lines, 1):
        want = f"[{i}/{planned}]" if i <= planned else f"[{planned}/{planned} +{i - planned}]"
        assert ln.startswith(want + " "), (i, ln)


def test_every_repetition_of_an_adaptive_experiment_has_its_counted_line(tmp_path):
    """A real experiment with a templated column (syscall.{call}: syscall.null in A, syscall.read in B), 2
    planned repetitions and a precision no 2 s can reach: one progress line per cell the store holds,
    each counted ("[4/4 +3]"), the adaptive ones saying so with an estimate that is a bound, the
    planned ones counting the adaptive phase in theirs; the benchmarks by the names the variants run,
    never the template's placeholder."""
    exp = tmp_path / "e.toml"
    exp.write_text("""
name = "progcount"
benchmarks = ["syscall.{call}"]
cores = [1]
reps = 2
intervals = 3
min_batch_ms = 1
precision = 0.0001
max_time = 2
[[variant]]
label = "A"
vars = { call = "null" }
[[variant]]
label = "B"
vars = { call = "read" }
""")
    db = tmp_path / "k.db"
    t0 = time.monotonic()
    r = run_cli("--store", db, "run", exp, check=0)
    took = time.monotonic() - t0
    assert "{" not in r.stderr and "}" not in r.stderr, r.stderr
    lines = progress_lines(r.stderr)
    with sqlite3.connect(db) as c:
        cells = c.execute("SELECT r.cell, r.rep, r.benchmark FROM result r JOIN experiment e ON "
                          "r.experiment_id = e.id WHERE e.name = 'progcount'").fetchall()
    assert len(lines) == len(cells) > 4, (len(cells), r.stderr)
    assert max(rep for _, rep, _ in cells) >= 2, cells          # the adaptive phase measured
    assert_counted(lines, 4)
    for ln in lines:
        assert re.search(r"\] (A: syscall\.null|B: syscall\.read) -P 1 rep \d", ln), ln
    assert all(re.search(r"rep [12]/2", ln) for ln in lines[:4]), lines
    # after the first step, the planned phase's estimate adds what the adaptive phase can take at most
    assert all(re.search(r"\(ETA \d\d:\d\d \+ <= \d\d:\d\d adaptive\)$", ln) for ln in lines[1:4]), lines
    for ln in lines[4:]:
        assert re.search(r"rep \d+ \(adaptive, (<= [0-2] s left|time limit reached: the last round)\) "
                         r"\(ETA <= 00:\d\d\)$", ln), ln
    assert re.search(r"then more rounds until every change is known to \+-0.0001%, for at most 2 s", r.stderr)
    assert re.search(r"^kperfdiff: syscall\.null/syscall\.read -P 1: (time limit \(2 s\)|repetition limit)",
                     r.stderr, re.M), r.stderr
    assert took < 30, took


def test_every_repetition_of_an_adaptive_bench_has_its_counted_line(tmp_path):
    """kperfdiff bench --precision: one counted line per repetition stored, with its estimate."""
    db = tmp_path / "k.db"
    r = run_cli("--store", db, "bench", "--only", "syscall.null", "--reps", "2", "--precision", "0.0001",
                "--max-time", "1", "--intervals", "3", "--min-batch-ms", "1", check=0)
    lines = progress_lines(r.stderr)
    with sqlite3.connect(db) as c:
        reps = c.execute("SELECT count(DISTINCT rep) FROM interval").fetchone()[0]
    assert len(lines) == reps > 2, r.stderr
    assert_counted(lines, 2)
    assert re.search(r"rep 2/2 \(ETA 00:\d\d \+ <= 00:\d\d adaptive\)$", lines[1]), lines
    assert all(re.search(r"syscall\.null -P 1 rep \d+ \(adaptive, .*\) \(ETA <= 00:\d\d\)$", ln)
               for ln in lines[2:]), lines
