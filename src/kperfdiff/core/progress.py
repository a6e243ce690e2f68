"""Progress on stderr: a redrawn bar with an estimate on a terminal, one
plain line per step otherwise (CI logs), nothing when disabled.

Two phases. The *planned* steps (a bench's repetitions, an experiment's
matrix) have a known total: the bar fills to it and the estimate is the mean
step time times the steps left. With ``--precision`` an *adaptive* phase may
follow: rounds of further repetitions whose number nobody knows, until the
intervals are precise enough or the time limit passes (:mod:`kperfdiff.bench.rounds`,
which starts no round after its deadline). There the bar stays full (the
planned work is done and the total does not shrink back), the count says how
many adaptive steps were added ("20/20 +4"), a repetition reads
"rep 9 (adaptive, <= 47 s left)" rather than "rep 9/5", and the estimate is an
upper bound: the time left before the deadline, or the round in flight if that
takes longer (a round started before the deadline is finished).
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
        self.total = max(total, 1)
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

    def set_time_limit(self, seconds: float | None) -> None:
        """No adaptive round starts after ``seconds`` from now (``--max-time``; None: no limit)."""
        self.deadline = None if seconds is None else self.clock() + seconds

    def adaptive_round(self, steps: int) -> None:
        """A round of the adaptive phase begins, of ``steps`` steps (the planned ones are done)."""
        self.adaptive = True
        self._round_left = steps

    def time_left(self) -> float | None:
        """Seconds before the deadline (0 once past it), None without one."""
        return None if self.deadline is None else max(0.0, self.deadline - self.clock())

    def eta(self) -> float | None:
        """Seconds the work left should take; in the adaptive phase an upper bound (see the module).
        None before the first step."""
        if self.done == 0:
            return None
        per_step = (self.clock() - self.t0) / self.done
        if not self.adaptive:
            return per_step * max(0, self.total - self.done)
        round_left = per_step * self._round_left
        left = self.time_left()
        return round_left if left is None else max(left, round_left)

    def _eta_text(self) -> str:
        e = self.eta()
        if e is None:
            return "--:--"
        return ("<= " if self.adaptive else "") + _clock_text(e)

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

    def line(self, what: str) -> str:
        """The bar line of a terminal: it fills to the planned total and never empties again."""
        width = 24
        filled = width * min(self.done, self.total) // self.total
        extra = self.done - self.total if self.done > self.total else 0
        count = f"{min(self.done, self.total)}/{self.total}" + (f" +{extra}" if extra or self.adaptive else "")
        return f"[{'#' * filled}{'.' * (width - filled)}] {count} ETA {self._eta_text()}  {what}"

    def step(self, what: str) -> None:
        """Announce the step about to run."""
        if not self.enabled:
            return
        if self.tty:
            line = self.line(what)
            pad = max(0, self._last_len - len(line))
            self.stream.write("\r" + line + " " * pad)
            self._last_len = len(line)
        else:
            n = f"{self.done + 1}" if self.done >= self.total or self.adaptive else f"{self.done + 1}/{self.total}"
            self.stream.write(f"[{n}] {what}\n")
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
