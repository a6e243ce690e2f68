"""The queue's side of a watch process: who it is (its owner id in the leases), and the lease on the
item it works on, renewed from a thread of its own while the work goes on (a kernel build and its
measurement, or a whole bisection, take many minutes). The table and its compare-and-set claims are
the store's (:mod:`kperfdiff.store.watch`)."""
from __future__ import annotations

import os
import secrets

from kperfdiff.core.hosts import host_id
from kperfdiff.store import Store
from kperfdiff.store.keepalive import KeepAlive

LEASE_S = 300.0      # how long a claim holds an item without being renewed
RENEWALS = 3         # renewals per lease: a renewal that is late by two thirds of a lease still holds it


def owner_id() -> str:
    """This process in the queue's leases: its host, its pid and a random part (a pid is used again)."""
    return f"{host_id()}/{os.getpid()}/{secrets.token_hex(4)}"


class Lease(KeepAlive):
    """Renew the lease on one item every ``lease_s / RENEWALS`` seconds while the ``with`` block runs.
    ``lost``: the item was taken over by another process (the renewals did not reach the store in
    time); what this process then stores of it is not counted."""

    def __init__(self, store: Store, item_id: int, owner: str, lease_s: float):
        super().__init__(store, lease_s / RENEWALS, lambda own: own.renew_item(item_id, owner, lease_s),
                         "kperfdiff-lease")

    def __enter__(self) -> "Lease":
        self.start()
        return self

    def __exit__(self, et, ev, tb) -> bool:
        self.stop()
        return False
