"""A write repeated from a thread of its own while long work goes on (an experiment's heartbeat, the
lease on a watch's item), on a connection of its own (a connection serves one thread), so it goes on
while a cell or a build is measured for many minutes."""
from __future__ import annotations

import threading
from typing import Callable

from kperfdiff.core.errors import KperfdiffError


class KeepAlive:
    """``beat(store)`` every ``every`` seconds, on another connection to ``store``, from :meth:`start` to
    :meth:`stop`. ``lost``: a beat said False (what it keeps alive is no longer this process's), and
    the beats stopped. A store out of reach is tried again at the next beat, on a new connection."""

    def __init__(self, store, every: float, beat: Callable[[object], bool], name: str):
        self.store, self.every, self.beat = store, every, beat
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        if not self._thread.is_alive():
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)

    def _run(self) -> None:
        own = None
        try:
            while not self._stop.wait(self.every):
                try:
                    own = own or self.store.reopen()
                    if not self.beat(own):
                        self.lost = True
                        return
                except KperfdiffError:
                    if own is not None:
                        own.conn.close()
                    own = None
        finally:
            if own is not None:
                own.conn.close()
