"""The progress model: past the planned repetitions (--precision) the counter says the phase and the
time left rather than "rep 9/5", the estimate never exceeds the time limit's remainder (but for the
round in flight), and the bar's fill and count never go back. Driven by a fake clock; the last test
runs a real experiment with precision and reads its plain progress lines."""
import io
import re

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
    assert "/5" not in p.stream.getvalue().split("rep 5/5")[1]


def test_adaptive_eta_is_bounded_by_the_time_left():
    clock = Clock()
    p = Progress(20, enabled=True, stream=io.StringIO(), clock=clock)
    # 20 planned steps of 3 s, then rounds of 4 steps: at most 60 s are left, whatever was measured before
    seen = adaptive_experiment(p, clock, 20, [4, 4], step_s=3.0)
    assert [e for _, e in seen] == [60, 57, 54, 51, 48, 45, 42, 39]
    # past the limit, the round in flight is finished (rounds start no new one): 4 steps of 3 s
    clock.t += 100
    p.adaptive_round(4)
    assert p.eta() == 4 * (clock.t - p.t0) / p.done
    assert p.rep_words(30, 20).endswith("time limit reached: the last round)")


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
    assert plain.getvalue().splitlines() == ["[1/1] x rep 1/1", "[2] x rep 2 (adaptive, <= 60 s left)"]


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
