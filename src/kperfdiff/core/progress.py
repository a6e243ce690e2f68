"""Progress on stderr: a redrawn bar with an estimate on a terminal, one
plain line per step otherwise (CI logs), nothing when disabled.

Two phases. The *planned* steps (a bench's repetitions, an experiment's
matrix) have a known total: the bar fills to it and the estimate is the mean
step time times the steps left. With ``--precision`` or ``--detect`` (an
experiment's ``precision``/``detect``) an *adaptive* phase may follow: rounds
of further repetitions whose number nobody knows, until the intervals are
precise enough, the time limit passes or the repetition limit is reached
(:mod:`kperfdiff.bench.rounds`, which starts no round after its deadline).

Every step is counted, planned or added. A plain line says which step it is:
"[7/20]" in the planned phase, "[20/20 +3]" for the third step added after the
20 planned ones; the bar stays full once the planned work is done (the total
does not shrink back) and counts the added steps on ("20/20 +4"). A repetition
reads "rep 9 (adaptive, <= 47 s left)" rather than "rep 9/5".

The estimate covers the adaptive phase too, as an upper bound with its rounds
priced at the mean step time so far (a round of steps slower than the mean can
outlast it). Once it may follow (:meth:`Progress.expect_adaptive`), the
planned phase's estimate says what the adaptive phase can add at most:
"ETA 00:40 + <= 01:12 adaptive". Inside the adaptive phase it reads
"ETA <= 00:47": the round in flight, and, if that ends before the deadline,
the time left to the deadline plus one more round of the same size (a round
started just before the deadline is finished; rounds never grow), and never
more than the rounds the repetition limit leaves.
"""
from __future__ import annotations

import math
import sys
import time


def _clock_text(seconds: float) -> str:
    s = max(0, int(math.ceil(seconds)))
    return f"{s // 60:02d}:{s % 60:02d}"


class Progress:
    def __init__(self, total: int, *, enabled: bool = True, stream=None, clock=time.monotonic):
        self.total = max(total, 0)            # the planned steps
        self.done = 0
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.clock = clock
        self.t0 = clock()
        self._last_len = 0
        self.deadline: float | None = None    # clock time after which no adaptive round starts
        self.adaptive = False
        self._round_left = 0
        self._round_steps = 0                 # the steps of the adaptive round in flight
        self._rounds_left: int | None = None  # adaptive rounds the repetition limit still allows
        self._expected: tuple[int, int | None, float | None] | None = None   # expect_adaptive's

    def set_time_limit(self, seconds: float | None) -> None:
        """No adaptive round starts after ``seconds`` from now (``--max-time``; None: no limit)."""
        self.deadline = None if seconds is None else self.clock() + seconds

    def expect_adaptive(self, round_steps: int, rounds: int | None = None, seconds: float | None = None) -> None:
        """An adaptive phase may follow the planned steps: rounds of at most ``round_steps`` steps, at most
        ``rounds`` of them (the repetition limit; None: no limit), none started later than ``seconds``
        after the phase begins (an experiment's ``max_time``) or, with ``seconds`` None, than the deadline
        :meth:`set_time_limit` set (bench's ``--max-time`` counts from the first round). The planned phase's
        estimate then adds the most that phase can take."""
        self._expected = (max(0, round_steps), rounds, seconds)

    def adaptive_round(self, steps: int) -> None:
        """A round of the adaptive phase begins, of ``steps`` steps (the planned ones are done)."""
        if not self.adaptive and self._expected is not None:
            self._rounds_left = self._expected[1]
        self.adaptive = True
        self._round_left = self._round_steps = steps
        if self._rounds_left is not None:
            self._rounds_left = max(0, self._rounds_left - 1)

    def time_left(self) -> float | None:
        """Seconds before the deadline (0 once past it), None without one."""
        return None if self.deadline is None else max(0.0, self.deadline - self.clock())

    def _per_step(self) -> float | None:
        return None if self.done == 0 else (self.clock() - self.t0) / self.done

    def eta(self) -> float | None:
        """Seconds the work left should take, the adaptive phase included as its upper bound (see the
        module). None before the first step, or when nothing bounds the adaptive phase."""
        per_step = self._per_step()
        if per_step is None:
            return None
        if not self.adaptive:
            bound = self.adaptive_bound() if self._expected is not None else 0.0
            return None if bound is None else per_step * max(0, self.total - self.done) + bound
        left = self._adaptive_left(per_step)
        return None if math.isinf(left) else left

    def _adaptive_left(self, per_step: float) -> float:
        """Inside the adaptive phase: at most how long it goes on (see the module); inf if nothing bounds it."""
        in_flight = per_step * self._round_left
        one_round = per_step * self._round_steps
        left = self.time_left()
        if left is None:
            by_time = math.inf
        else:
            by_time = in_flight if in_flight >= left else left + one_round
        by_rounds = math.inf if self._rounds_left is None else in_flight + self._rounds_left * one_round
        return min(by_time, by_rounds)

    def adaptive_bound(self) -> float | None:
        """In the planned phase, with an adaptive phase expected: at most how long that phase takes, from the
        mean step time (0 when the deadline passes before the planned steps end); None when nothing bounds it
        or it is not expected (or already begun)."""
        per_step = self._per_step()
        if self.adaptive or self._expected is None or per_step is None:
            return None
        round_steps, rounds, seconds = self._expected
        one_round = per_step * round_steps
        planned_end = self.clock() + per_step * max(0, self.total - self.done)
        deadline = self.deadline if seconds is None else planned_end + seconds
        by_time = math.inf if deadline is None else \
            (0.0 if deadline <= planned_end else deadline - planned_end + one_round)
        by_rounds = math.inf if rounds is None else max(0, rounds) * one_round
        bound = min(by_time, by_rounds)
        return None if math.isinf(bound) else bound

    def _eta_text(self) -> str:
        per_step = self._per_step()
        if per_step is None:
            return "--:--"
        if self.adaptive:
            left = self._adaptive_left(per_step)
            return "--:-- (no limit)" if math.isinf(left) else "<= " + _clock_text(left)
        planned = _clock_text(per_step * max(0, self.total - self.done))
        if self._expected is None:
            return planned
        bound = self.adaptive_bound()
        return planned + (" + <= " + _clock_text(bound) + " adaptive" if bound is not None else " + adaptive")

    def rep_words(self, rep: int, reps: int) -> str:
        """The repetition about to run (0-based ``rep`` of the ``reps`` planned): "rep 3/5", and
        past the planned ones "rep 9 (adaptive, <= 47 s left)"."""
        if rep < reps and not self.adaptive:
            return f"rep {rep + 1}/{reps}"
        left = self.time_left()
        if left is None:
            return f"rep {rep + 1} (adaptive)"
        if left <= 0:
            return f"rep {rep + 1} (adaptive, time limit reached: the last round)"
        return f"rep {rep + 1} (adaptive, <= {math.ceil(left):.0f} s left)"

    def eta_words(self) -> str:
        """`` (ETA mm:ss)`` for the plain per-step lines (the bar shows its own on a terminal);
        empty before the first step."""
        if self.tty or not self.done:
            return ""
        return f" (ETA {self._eta_text()})"

    def count(self, n: int, steps: int = 1) -> str:
        """Step ``n`` (1-based) as counted: "7/20" while planned, "20/20 +3" for the third added one; of
        ``steps`` steps announced at once (a guest's batch of cells), "7..10/20" and "20/20 +3..6"."""
        last = n + max(1, steps) - 1
        if n > self.total or self.adaptive:
            first = max(0, n - self.total)
            return f"{self.total}/{self.total} +{first}" + (f"..{last - self.total}" if last > n else "")
        return f"{n}" + (f"..{last}" if last > n else "") + f"/{self.total}"

    def line(self, what: str) -> str:
        """The bar line of a terminal: it fills to the planned total and never empties again."""
        width = 24
        filled = width if self.done >= self.total else width * self.done // self.total
        return f"[{'#' * filled}{'.' * (width - filled)}] {self.count(self.done)} ETA {self._eta_text()}  {what}"

    def step(self, what: str, steps: int = 1) -> None:
        """Announce the step about to run (or the next ``steps`` steps, run together)."""
        if not self.enabled:
            return
        if self.tty:
            line = self.line(what)
            pad = max(0, self._last_len - len(line))
            self.stream.write("\r" + line + " " * pad)
            self._last_len = len(line)
        else:
            self.stream.write(f"[{self.count(self.done + 1, steps)}] {what}\n")
        self.stream.flush()

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.adaptive:
            self._round_left = max(0, self._round_left - n)

    def note(self, text: str) -> None:
        """A message that must stay visible (a failure, a skip), with or without the bar."""
        if self.enabled and self.tty:
            self.stream.write("\r" + " " * self._last_len + "\r")
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\r" + " " * self._last_len + "\r")
            self.stream.flush()
