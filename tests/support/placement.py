"""Helpers for the place tests: Profiles and size tables built directly."""
from collections import defaultdict

import numpy as np

from kperfdiff.place.inputs import SizeTable
from kperfdiff.ingest.profile import Profile, Symbol


def profile_from_folded(folded: dict[str, float], source="test") -> Profile:
    """{"a;b;c": weight} -> Profile (every frame kernel code)."""
    names: list[str] = []
    idx: dict[str, int] = {}
    stacks: dict[tuple, float] = defaultdict(float)
    for st, w in folded.items():
        t = []
        for f in st.split(";"):
            if f not in idx:
                idx[f] = len(names)
                names.append(f)
            t.append(idx[f])
        stacks[tuple(t)] += w
    n = len(names)
    selfw, childw = np.zeros(n), np.zeros(n)
    edges: dict[tuple, float] = defaultdict(float)
    for st, w in stacks.items():
        selfw[st[-1]] += w
        for k in set(st):
            childw[k] += w
        for e in set(zip(st, st[1:])):
            edges[e] += w
    total = float(sum(stacks.values()))
    return Profile(source, "cpu-clock", [Symbol(x, "[kernel.kallsyms]", True) for x in names], selfw, childw,
                   total, int(total), dict(stacks), dict(edges), "samples")


def sizes_table(sizes: dict[str, int], base=0x1000) -> SizeTable:
    addrs = {}
    a = base
    for n, s in sizes.items():
        addrs[n] = a
        a += s
    return SizeTable("test.map", "vmlinux", dict(sizes), addrs, False)
