"""Where this machine's kperfdiff state lives (the pending knob restores of ``measure.knobs``),
kept apart so that every command can look for a pending restore without importing the knobs."""
from __future__ import annotations

import os
from pathlib import Path

PENDING_FILE = "pending-knobs.json"


def state_dir() -> Path:
    """Where this machine's kperfdiff state lives (pending knob restores)."""
    d = os.environ.get("KPERFDIFF_STATE_DIR")
    if d:
        return Path(d)
    if os.geteuid() == 0:
        return Path("/var/lib/kperfdiff")
    xdg = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(xdg) / "kperfdiff"
