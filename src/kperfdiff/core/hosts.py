"""This host, this boot and its live processes: who owns a run, an experiment, or knobs left to put back."""
from __future__ import annotations

import functools
import os
import socket
from pathlib import Path


@functools.cache
def host_id() -> str:
    """This machine in a shared store: its host name and (where there is one) its machine id, so two
    machines of one name (cloned boards) are still two hosts."""
    mid = ""
    for p in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            mid = Path(p).read_text().strip()[:12]
        except OSError:
            continue
        if mid:
            break
    name = socket.gethostname()
    return f"{name}/{mid}" if mid else name


def pid_alive(pid: int | None) -> bool:
    """Whether a process of that id lives on this machine (now, this boot)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def boot_id() -> str:
    """This boot of this machine ("" where the kernel does not say): a pid of another boot is no process."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""
