"""Inferred twins: functions found on one side of a diff only, whose place in the call graph
matches a one-side-only function of the other side.

An architecture (or a kernel version) can do the same work under a name the equivalence table
does not know. Such a pair is found from the call chains both profiles already carry:

* **Context.** For every sample whose stack holds a candidate function, the frame that called
  it is its *caller* context and the frame it called (if it is not the leaf) its *callee*
  context. Only frames both sides run count as evidence (a role, when the diff grouped its
  members, counts as one frame); a one-side-only neighbour is no evidence either way. A
  candidate at the top of the kernel stack has the caller "(kernel entry)". Contexts are
  weighted by the samples' share of their profile and averaged over a side's profiles, then
  normalised to fractions of the candidate's own samples.
* **Similarity** of a candidate pair: the weighted overlap of their caller contexts,
  ``sum(min(fraction in A, fraction in B))``, from 0 (no shared caller) to 1 (the same callers
  in the same proportions; "(kernel entry)" counts half). When either function calls shared
  code (at least 20% of its samples reach a shared callee), the overlap of callee contexts is
  averaged in, which tells apart functions that share a dispatcher but do different work, and a
  leaf from a function that leads somewhere.
* **Pairing.** A pair is accepted as twins when each is the other's best match (reciprocal best
  match, as orthologous genes are paired), its similarity is at least 0.5, it beats each
  function's runner-up by at least 0.1, each function has at least 10 samples, and the evidence
  is specific: two or more shared contexts, or a shared callee (both lead to the same code), or
  a shared caller under which these two are the only one-side-only functions of their sides.
  One shared caller alone is weak: a caller often has several small helpers that one
  architecture inlines and the other does not, and any two of them would match. Other pairs
  scoring 0.5 or more, where at least one is the other's best match, are kept as ambiguous:
  evidence, not a match.

The module is pure: stacks in, :class:`Twin` list out.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable

ENTRY = "(kernel entry)"          # caller context of a candidate at the top of the kernel stack
MIN_SCORE = 0.5
MIN_MARGIN = 0.1
MIN_CALLEE_MASS = 0.2
MIN_SHARE = 0.1                   # percent of the profile: rarer candidates are not considered
MIN_SAMPLES = 10                  # samples of each function of an accepted pair
ENTRY_WEIGHT = 0.5                # what a shared ENTRY caller counts for
GROUP_TOGETHER = 0.8              # candidates adjacent on this much of their samples are one group
EVIDENCE_ROWS = 3


@dataclass
class SideStacks:
    """One profile as inference reads it: its stacks (root-first symbol indices -> weight),
    the context id of each symbol index in the diff's scope (a row key, or a role), and its
    total weight."""

    stacks: dict[tuple[int, ...], float]
    frame: dict[int, Hashable]
    total: float
    samples: int = 0          # to estimate a function's sample count from its weight


@dataclass
class Evidence:
    relation: str         # "caller" or "callee"
    context: Hashable     # the shared function (row key or role), or ENTRY
    fraction_a: float     # of the A function's samples with this context (0..1)
    fraction_b: float


@dataclass
class Twin:
    a: Hashable           # the candidate on side A (a row key)
    b: Hashable
    share_a: float        # % of the profile on whose stacks the function is (mean over profiles)
    share_b: float
    score: float
    caller_score: float
    callee_score: float | None     # None when either function reaches no shared callee
    evidence: list[Evidence] = field(default_factory=list)
    accepted: bool = False
    # The best other match of either function: (side "a" or "b", the function, its score).
    runner_up: tuple[str, Hashable, float] | None = None


@dataclass
class _Context:
    mass: float = 0.0                                   # share of the profile (fraction)
    samples: float = 0.0                                # estimated, over the side's profiles
    up: dict = field(default_factory=dict)              # context -> share
    down: dict = field(default_factory=dict)


def _sequences(side: list[SideStacks], candidates: set) -> list[tuple[list, float, float]]:
    """The stacks of one side that hold a candidate, as context-id sequences (root first, repeats
    merged), each with its share of its profile (averaged over the side) and its sample count."""
    out = []
    n = len(side) or 1
    for prof in side:
        if prof.total <= 0:
            continue
        cand_idx = {i for i, c in prof.frame.items() if c in candidates}
        if not cand_idx:
            continue
        for stack, w in prof.stacks.items():
            if cand_idx.isdisjoint(stack):
                continue
            seq: list = []
            for i in stack:
                c = prof.frame.get(i)
                if c is not None and (not seq or seq[-1] != c):
                    seq.append(c)
            out.append((seq, w / prof.total / n, w * prof.samples / prof.total if prof.samples else 0.0))
    return out


def _groups(seqs, candidates: set) -> dict[Hashable, tuple]:
    """Candidate -> its group: candidates that are called one from the other on nearly all of
    their samples (a chain one architecture has and the other does not, such as arm64's
    ``el0_svc > do_el0_svc > el0_svc_common > invoke_syscall``) form one group, in call order."""
    mass: dict = {}
    adjacent: dict = {}
    depth: dict = {}
    for seq, share, _ in seqs:
        for j, c in enumerate(seq):
            if c in candidates:
                mass[c] = mass.get(c, 0.0) + share
                depth[c] = depth.get(c, 0.0) + share * j
                if j + 1 < len(seq) and seq[j + 1] in candidates:
                    pair = (c, seq[j + 1])
                    adjacent[pair] = adjacent.get(pair, 0.0) + share
    parent = {c: c for c in mass}

    def find(c):
        while parent[c] != c:
            parent[c] = parent[parent[c]]
            c = parent[c]
        return c
    for (x, y), w in adjacent.items():
        if x != y and w >= GROUP_TOGETHER * max(mass[x], mass[y]):
            parent[find(x)] = find(y)
    members: dict = {}
    for c in mass:
        members.setdefault(find(c), []).append(c)
    out = {}
    for ms in members.values():
        group = tuple(sorted(ms, key=lambda c: (depth[c] / mass[c], str(c))))
        for c in ms:
            out[c] = group
    return out


def contexts(side: list[SideStacks], candidates: set, anchors: set) -> dict[tuple, _Context]:
    """Caller and callee contexts of each group of candidates on one side, as fractions of the
    group's own samples (``anchors``: the context ids both sides run; ENTRY is added). The caller is the nearest shared frame above the group's frames (other
    one-side-only frames skipped), ENTRY when there is none (the group is entry code, or called
    only from entry code); the callee the nearest shared frame below."""
    anchors = set(anchors) | {ENTRY}
    seqs = _sequences(side, set(candidates))
    group_of = _groups(seqs, set(candidates))
    out: dict[tuple, _Context] = {}
    for seq, share, count in seqs:
        seen = set()
        for j, c in enumerate(seq):
            g = group_of.get(c)
            if g is None or g in seen:
                continue
            seen.add(g)
            last = j
            while last + 1 < len(seq) and group_of.get(seq[last + 1]) == g:
                last += 1
            up = next((seq[k] for k in range(j - 1, -1, -1) if seq[k] in anchors), ENTRY)
            down = next((seq[k] for k in range(last + 1, len(seq)) if seq[k] in anchors), None)
            ctx = out.setdefault(g, _Context())
            ctx.mass += share
            ctx.samples += count
            if up is not None:
                ctx.up[up] = ctx.up.get(up, 0.0) + share
            if down is not None:
                ctx.down[down] = ctx.down.get(down, 0.0) + share
    for ctx in out.values():
        for d in (ctx.up, ctx.down):
            for k in d:
                d[k] /= ctx.mass
    return out


def _overlap(x: dict, y: dict) -> tuple[float, list[tuple[Hashable, float, float]]]:
    """Weighted overlap of two context distributions; ENTRY counts half (being entry code, or
    called from it, is weak evidence: every architecture-specific entry path shares it)."""
    if len(x) > len(y):
        s, pairs = _overlap(y, x)
        return s, [(k, b, a) for k, a, b in pairs]
    pairs = [(k, v, y[k]) for k, v in x.items() if k in y]
    return sum(min(a, b) * (ENTRY_WEIGHT if k == ENTRY else 1.0) for k, a, b in pairs), pairs


def _similarity(fa: _Context, fb: _Context) -> tuple[float, float, float | None, list[Evidence]]:
    up, up_pairs = _overlap(fa.up, fb.up)
    evidence = [Evidence("caller", k, a, b) for k, a, b in up_pairs]
    callee = None
    # Callees count when either function calls shared code: a leaf against a function that
    # leads to shared code scores 0 on callees.
    if sum(fa.down.values()) >= MIN_CALLEE_MASS or sum(fb.down.values()) >= MIN_CALLEE_MASS:
        callee, down_pairs = _overlap(fa.down, fb.down)
        evidence += [Evidence("callee", k, a, b) for k, a, b in down_pairs]
    score = up if callee is None else (up + callee) / 2
    evidence.sort(key=lambda e: (-min(e.fraction_a, e.fraction_b), e.relation, str(e.context)))
    return score, up, callee, evidence[:EVIDENCE_ROWS]


def _only_candidates(ctxs: dict[Hashable, _Context], min_fraction: float = 0.1) -> dict[Hashable, set]:
    """Caller context -> the candidates it calls (with at least ``min_fraction`` of their samples)."""
    out: dict[Hashable, set] = {}
    for k, c in ctxs.items():
        for ctx, f in c.up.items():
            if f >= min_fraction:
                out.setdefault(ctx, set()).add(k)
    return out


def _specific(evidence_pairs, ka, kb, under_a: dict, under_b: dict) -> bool:
    """Is the shared evidence of a pair specific enough to accept it (see the module text)?"""
    if len(evidence_pairs) >= 2 or any(e.relation == "callee" for e in evidence_pairs):
        return True
    return any(e.relation == "caller" and e.context != ENTRY and under_a.get(e.context) == {ka}
               and under_b.get(e.context) == {kb} for e in evidence_pairs)


def infer_twins(side_a: list[SideStacks], side_b: list[SideStacks], candidates_a: set, candidates_b: set,
                anchors: set, *, min_share: float = MIN_SHARE) -> list[Twin]:
    """Candidate twins between the one-side-only functions ``candidates_a`` and ``candidates_b``,
    best first: accepted pairs, then ambiguous ones (see the module text). ``anchors`` are the
    context ids both sides run (ENTRY is always one)."""
    return pair_twins(contexts(side_a, candidates_a, anchors), contexts(side_b, candidates_b, anchors),
                      min_share=min_share)


def pair_twins(contexts_a: dict, contexts_b: dict, *, min_share: float = MIN_SHARE) -> list[Twin]:
    """infer_twins on the sides' contexts (:func:`contexts`), computed once by a caller that also
    looks for inlined functions."""
    ca = {k: c for k, c in contexts_a.items() if c.mass * 100 >= min_share}
    cb = {k: c for k, c in contexts_b.items() if c.mass * 100 >= min_share}
    # Only pairs that share a context can score above 0: find them through an inverted index.
    by_context: dict[Hashable, list] = {}
    for k, c in cb.items():
        for x in set(c.up) | {("v", d) for d in c.down}:
            by_context.setdefault(x, []).append(k)
    scored: dict[tuple, tuple] = {}
    for ka, c in ca.items():
        partners = set()
        for x in set(c.up) | {("v", d) for d in c.down}:
            partners.update(by_context.get(x, ()))
        for kb in partners:
            sim = _similarity(c, cb[kb])
            if sim[0] > 0:
                scored[(ka, kb)] = sim
    best_a: dict[Hashable, list] = {}
    best_b: dict[Hashable, list] = {}
    for (ka, kb), sim in scored.items():
        best_a.setdefault(ka, []).append((sim[0], kb))
        best_b.setdefault(kb, []).append((sim[0], ka))
    for d in (best_a, best_b):
        for v in d.values():
            v.sort(key=lambda t: (-t[0], str(t[1])))
    under_a, under_b = _only_candidates(ca), _only_candidates(cb)
    twins = []
    for (ka, kb), (score, up, down, evidence) in scored.items():
        # Shown: pairs scoring MIN_SCORE or more where at least one of the two is the other's best.
        if score < MIN_SCORE or best_a[ka][0][1] != kb and best_b[kb][0][1] != ka:
            continue
        others = [(s, "b", k) for s, k in best_a[ka] if k != kb] + [(s, "a", k) for s, k in best_b[kb] if k != ka]
        runner = max(others, key=lambda t: t[0], default=None)
        mutual = best_a[ka][0][1] == kb and best_b[kb][0][1] == ka
        shared = [e for e in evidence if min(e.fraction_a, e.fraction_b) >= 0.1]
        accepted = (mutual and (runner is None or score - runner[0] >= MIN_MARGIN)
                    and min(ca[ka].samples, cb[kb].samples) >= MIN_SAMPLES
                    and _specific(shared, ka, kb, under_a, under_b))
        twins.append(Twin(a=ka, b=kb, share_a=ca[ka].mass * 100, share_b=cb[kb].mass * 100, score=score,
                          caller_score=up, callee_score=down, evidence=evidence, accepted=accepted,
                          runner_up=(runner[1], runner[2], runner[0]) if runner else None))
    twins.sort(key=lambda t: (not t.accepted, -t.score, -(t.share_a + t.share_b), str(t.a), str(t.b)))
    return twins


@dataclass
class Inlined:
    """A one-side-only function (or chain) that the other side most likely compiled into its
    caller: at least 80% of its samples come from one shared caller, and on the other side either
    that caller calls the function's main callee directly, or (for a function that is mostly its
    own time) the caller's own time is larger by at least half of the function's share."""

    function: tuple          # the group, in call order
    side: str                # "a" or "b": where it is a function of its own
    share: float             # % of its side's profile (on whose stacks it is)
    caller: Hashable         # the shared caller it was inlined into on the other side
    caller_fraction: float   # of the function's samples called from there (0..1)
    callee: Hashable | None  # the shared callee the other side calls directly from the caller
    caller_self: tuple[float, float]   # the caller's self share (%) on this side and on the other


def _edge_share(side: list[SideStacks], caller: Hashable, callee: Hashable, skip: set) -> float:
    """Share of a side's samples in which ``caller`` calls ``callee`` directly (the side's own
    one-side-only frames in between skipped), averaged over its profiles."""
    out = 0.0
    n = len(side) or 1
    for prof in side:
        if prof.total <= 0:
            continue
        idx = {i for i, c in prof.frame.items() if c == caller}
        if not idx:
            continue
        for stack, w in prof.stacks.items():
            if idx.isdisjoint(stack):
                continue
            seq = [prof.frame.get(i) for i in stack]
            seq = [c for c in seq if c is not None and c not in skip]
            if any(x == caller and y == callee for x, y in zip(seq, seq[1:])):
                out += w / prof.total / n
    return out


def find_inlined(side_contexts: dict, other: list[SideStacks], other_candidates: set, self_here: dict,
                 self_there: dict, *, which: str, exclude: set = frozenset(),
                 min_share: float = MIN_SHARE) -> list[Inlined]:
    """The one-side-only functions of a side (its :func:`contexts`; not in ``exclude``) that ``other``
    most likely inlined into a shared caller; ``self_here``/``self_there``: self share (%) per
    context id on this side and on the other."""
    out = []
    for group, ctx in side_contexts.items():
        if set(group) & exclude or ctx.mass * 100 < min_share or ctx.samples < MIN_SAMPLES or not ctx.up:
            continue
        caller, frac = max(ctx.up.items(), key=lambda kv: (kv[1], str(kv[0])))
        if caller == ENTRY or frac < 0.8:
            continue
        here, there = self_here.get(caller, 0.0), self_there.get(caller, 0.0)
        callee = None
        if sum(ctx.down.values()) >= MIN_CALLEE_MASS:
            callee, reach = max(ctx.down.items(), key=lambda kv: (kv[1], str(kv[0])))
            if _edge_share(other, caller, callee, other_candidates) < 0.2 * reach * ctx.mass:
                continue
        else:
            # A leaf: mostly its own time, which reappears as the caller's own time over there.
            own, mass = sum(self_here.get(c, 0.0) for c in group), ctx.mass * 100
            if own < 0.5 * mass or there - here < 0.5 * mass:
                continue
        out.append(Inlined(function=group, side=which, share=ctx.mass * 100, caller=caller, caller_fraction=frac,
                           callee=callee, caller_self=(here, there)))
    out.sort(key=lambda i: (-i.share, str(i.function)))
    return out
