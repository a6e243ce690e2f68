"""The kernel's idle loop per architecture (``idle.toml`` beside this module): which samples
``--exclude-idle`` drops. See the comment at the top of ``idle.toml`` for the rule."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from kperfdiff.core.files import read_toml
from kperfdiff.symbols.normalise import normalise

SHIPPED = Path(__file__).with_name("idle.toml")


@dataclass(frozen=True)
class IdleTable:
    """The idle functions of one architecture (with the generic ones)."""

    leaf: frozenset
    prefixes: tuple[str, ...]
    loop: frozenset

    def is_leaf(self, name: str) -> bool:
        """Whether a kernel function at a sample's leaf means the CPU was idle."""
        name = normalise(name)
        return name in self.leaf or name.startswith(self.prefixes)

    def in_loop(self, name: str) -> bool:
        """Whether a kernel function is part of the idle loop (or the leaf idle functions)."""
        return self.is_leaf(name) or normalise(name) in self.loop


@functools.cache
def _table() -> dict:
    return read_toml(SHIPPED, "idle table")


@functools.cache
def idle_table(arch: str | None) -> IdleTable:
    """The idle functions of ``arch`` (a normalised architecture name; None or an unknown one:
    every architecture's, since a profile that names none may be of any)."""
    t = _table()
    parts = [t["generic"]] + ([t[arch]] if arch in t else [v for k, v in t.items() if k != "generic"])
    return IdleTable(leaf=frozenset(n for p in parts for n in p.get("leaf", ())),
                     prefixes=tuple(n for p in parts for n in p.get("prefixes", ())),
                     loop=frozenset(n for p in parts for n in p.get("loop", ())))


def is_idle(names: list[str], kernel: list[bool], table: IdleTable) -> bool:
    """Whether a sample of this stack (names root first, and which frames are kernel ones) is the
    CPU idling: its leaf is a kernel idle function, or every kernel frame is of the idle loop
    (and it has one)."""
    if not names:
        return False
    if kernel[-1] and table.is_leaf(names[-1]):
        return True
    ks = [n for n, k in zip(names, kernel) if k]
    return bool(ks) and len(ks) == len(names) and all(table.in_loop(n) for n in ks)
