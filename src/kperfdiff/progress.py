"""Progress on stderr: a redrawn bar with an estimate on a terminal, one
plain line per step otherwise (CI logs), nothing when disabled."""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, *, enabled: bool = True, stream=None):
        self.total = max(total, 1)
        self.done = 0
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.t0 = time.monotonic()
        self._last_len = 0

    def _eta(self) -> str:
        if self.done == 0:
            return "--:--"
        left = (time.monotonic() - self.t0) / self.done * (self.total - self.done)
        return f"{int(left // 60):02d}:{int(left % 60):02d}"

    def eta_words(self, i: int, total: int) -> str:
        """`` (ETA mm:ss)`` after ``i`` of ``total`` steps, for the plain per-step lines (the bar
        shows its own on a terminal); empty before the first step."""
        if self.tty or not i:
            return ""
        left = (time.monotonic() - self.t0) / i * (total - i)
        return f" (ETA {int(left // 60):02d}:{int(left % 60):02d})"

    def step(self, what: str) -> None:
        """Announce the step about to run."""
        if not self.enabled:
            return
        if self.tty:
            width = 24
            filled = int(width * self.done / self.total)
            line = f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} ETA {self._eta()}  {what}"
            pad = max(0, self._last_len - len(line))
            self.stream.write("\r" + line + " " * pad)
            self._last_len = len(line)
        else:
            self.stream.write(f"[{self.done + 1}/{self.total}] {what}\n")
        self.stream.flush()

    def advance(self, n: int = 1) -> None:
        self.done += n

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
