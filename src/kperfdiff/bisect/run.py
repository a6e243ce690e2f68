"""The bisection itself: GOOD and BAD measured and checked to differ, `git bisect` walked one
decided probe at a time, the culprit verified against its parent with fresh repetitions (and, if
asked, its revert on top of BAD), every measurement an ordinary stored run. Exact counts are the
exception: a deterministic guest counts the same on every boot of a kernel, so a commit counted once
(by a probe, or by a watch: ``Options.known``) is not counted again, for the verification either.

Resuming is re-walking: every measurement is a run tagged with the bisection's key (the plan) and
its commit, so a bisection started again after Ctrl-C or a crash restarts `git bisect` from GOOD
and BAD and replays each step from the stored values, measuring only what is missing. The
verdicts are a function of the stored values, so the replay takes the same path.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from kperfdiff.bisect import decide, git
from kperfdiff.bisect.probe import VALUES, Build, BuildFailed, Plan, build_probe, check_metric, intervals, measure, \
    require_clean, stored_runs, values
from kperfdiff.core import modes, stats
from kperfdiff.core.errors import KperfdiffError, UsageError
from kperfdiff.store import Store


class NothingToBisect(KperfdiffError):
    """GOOD and BAD do not differ: no commit is blamed."""

    exit_status = 3


@dataclass
class Options:
    repo: str
    good: str
    bad: str
    bench: str
    cores: int = 1
    target: str = "local"
    metric: str = "time"
    value: str = VALUES[0]           # what a repetition contributes with --metric time (probe.VALUES)
    detect: float | None = None      # reference and verification: repetitions until this % could be seen
    build: str | None = None
    config: str | None = None
    params: tuple[str, ...] = ()
    reps: int | None = None          # first repetitions per commit (default: 5; 1 for exact counts)
    max_reps: int = 30               # a probe's budget of repetitions
    verify_reps: int | None = None   # fresh repetitions of culprit and parent (default: reps, at least 5)
    verify_revert: bool = False
    bracket: bool = True             # measure GOOD and BAD around each probe (time metric)
    profile: bool = True
    build_timeout: float | None = None
    progress: bool = True
    # exact counts (--metric instructions) of commits measured elsewhere with the same benchmark, target
    # and build (a watch's measurements): commit -> run ids, taken as the commit's values, not measured again
    known: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class Step:
    """One commit measured: where it sits, what it measured and what was decided."""

    commit: git.Commit
    role: str                        # good, bad, probe, parent, culprit, revert
    values: list[float]
    runs: list[int]
    verdict: decide.Verdict | None = None
    reason: str = ""                 # why it was skipped (build failed, no decision)
    measured_now: int = 0            # repetitions measured by this invocation (0: all from the store)


@dataclass
class Outcome:
    plan: Plan
    commits: int                                 # commits between GOOD and BAD (BAD included)
    reference: decide.Difference                 # BAD against GOOD
    steps: list[Step] = field(default_factory=list)
    culprit: git.Commit | None = None
    candidates: list[git.Commit] = field(default_factory=list)   # when skipped commits hide the culprit
    verification: decide.Difference | None = None
    verified: bool = False
    revert: Step | None = None
    parent_runs: list[int] = field(default_factory=list)     # the verification's runs of each
    culprit_runs: list[int] = field(default_factory=list)
    seconds: float = 0.0
    unit: str = ""
    bracketed: bool = False                      # probes judged against GOOD and BAD measured around them
    value: str = VALUES[0]                       # what a repetition contributes (time metric)
    modes: modes.Modes | None = None             # the modes of GOOD's and BAD's intervals, when several

    @property
    def probes(self) -> list[Step]:
        return [s for s in self.steps if s.role == "probe"]

    @property
    def measured_probes(self) -> int:
        return sum(1 for s in self.probes if s.values)


class _Measurer:
    """Values of a commit in a role pool, from the store first, measured when missing."""

    def __init__(self, store: Store, plan: Plan, repo: git.Repo, opts: Options, note):
        self.store, self.plan, self.repo, self.opts, self.note = store, plan, repo, opts, note
        self.builds: dict[tuple, Build] = {}
        self.pool: dict[tuple[str, str], list] = {}     # (commit, pool) -> [(run id, [values])]
        for run in stored_runs(store, plan):
            tag = run.options["bisect"]
            pool = f"for:{tag['for']}" if tag.get("for") else tag["role"] if tag["role"] in ("verify", "revert") \
                else "probe"
            vals = values(store, plan, run, opts.value)
            if vals:
                self.pool.setdefault((tag["commit"], pool), []).append((run.id, vals))
        self.exact = plan.metric == "instructions"
        for commit, ids in (opts.known.items() if self.exact else ()):
            if (commit, "probe") not in self.pool:
                got = [(rid, vals) for rid in ids for vals in [values(store, plan, store.get_run(rid))] if vals]
                if got:
                    self.pool[(commit, "probe")] = got
        # GOOD and BAD measured around every repetition of a probe, one of each in turn (time metric)
        self.bracket = not self.exact and opts.bracket

    def modes(self, commits: list[git.Commit]) -> modes.Modes:
        """The modes of these commits' intervals (the probe pool), each compared within its own
        repetitions (:func:`kperfdiff.core.modes.find_modes_in`)."""
        reps = [r for c in commits for rid in self.have(c.hash, "probe")[1]
                for r in intervals(self.store, self.plan, self.store.get_run(rid))]
        return modes.find_modes_in(reps)

    def have(self, commit: str, pool: str) -> tuple[list[float], list[int]]:
        got = self.pool.get((commit, pool), [])
        return [v for _, vs in got for v in vs], [rid for rid, _ in got]

    def sample(self, commit: str, pool: str = "probe") -> decide.Sample:
        return decide.Sample(tuple(self.have(commit, pool)[0]), exact=self.exact)

    def classify(self, probe: str, good: str, bad: str, pool: str = "probe") -> decide.Verdict:
        """The probe against GOOD and BAD: against its brackets (GOOD and BAD measured around it),
        with the noise pooled over every value of the bisection, when bracketing; else against all
        of GOOD's and BAD's values."""
        p = self.sample(probe, pool)
        if not self.bracket:
            return decide.classify(p, self.sample(good), self.sample(bad))
        around = f"for:{probe}"
        g, b = self.sample(good, around), self.sample(bad, around)
        if p.n >= 2 and g.n == b.n == p.n:        # measured in rounds: each against its own GOOD and BAD
            return decide.classify_in_rounds(p, g, b)
        others = [decide.Sample(tuple(vs)) for (_c, _pool), got in self.pool.items()
                  for vs in [[v for _, values in got for v in values]] if len(vs) > 1]
        return decide.classify(p, self.sample(good, around), self.sample(bad, around), noise=others)

    def in_turn(self, order: list[tuple[git.Commit, str]], n: int) -> dict[str, int]:
        """Repetitions 1 to ``n`` of each (commit, pool) of ``order``, one of each in turn (round i measures
        repetition i of every one), so that a burst of load or a drift of the machine falls on all alike and
        the i-th values can be paired; returns the repetitions measured now, per commit. Every other round
        goes in the reverse order (A B, B A, A B, ...): a cost that falls on whichever runs first or second
        in a round (a cache warmed by the one before, another job's period) falls on each commit alike
        instead of making two equal commits differ."""
        now: dict[str, int] = {}
        for i in range(1, n + 1):
            for c, pool in (order if i % 2 else order[::-1]):
                now[c.hash] = now.get(c.hash, 0) + self.ensure(c, i, pool, checkout=c.hash)
        return now

    def ensure(self, commit: git.Commit, n: int, pool: str = "probe", *, checkout: str | None = None) -> int:
        """At least ``n`` values of ``commit`` in ``pool``; returns how many were measured now. The
        tree is at ``commit`` already unless ``checkout`` says what to check out (or 'revert').
        Pools: "probe" (GOOD, BAD and the probes), "verify", "revert", and "for:HASH" (GOOD's and
        BAD's values measured around the probe HASH: its brackets)."""
        have = len(self.have(commit.hash, pool)[0])
        if have >= n:
            return 0
        if self.exact and pool == "verify" and len(self.have(commit.hash, "probe")[0]) >= n:
            # a deterministic guest counts the same on every boot of a kernel: the count stored is the count
            self.pool[(commit.hash, pool)] = list(self.pool[(commit.hash, "probe")])
            return 0
        build_key = (commit.hash, pool == "revert")
        if build_key not in self.builds:
            if checkout == "revert":
                self.repo.revert_on(self.plan.bad, commit.hash)
            elif checkout:
                self.repo.checkout(checkout)
            out = artefacts(self.store, self.plan) / (f"revert-{commit.short}" if pool == "revert" else commit.short)
            self.note(f"building {commit.short} ({commit.subject[:60]})" + (" with its revert on BAD"
                                                                           if pool == "revert" else ""))
            try:
                self.builds[build_key] = build_probe(self.plan, self.repo.path, out,
                                                     timeout=self.opts.build_timeout, progress=self.note)
            finally:
                if checkout == "revert":
                    self.repo.discard_changes()
            b = self.builds[build_key]
            if b.image:
                size = f", {b.image_bytes / 2**20:.1f} MiB image" if b.image_bytes else ""
                self.note(f"built {commit.short} in {b.seconds:.1f} s{size}")
        role = {"verify": "verify", "revert": "revert"}.get(pool, "bracket" if pool.startswith("for:") else "probe")
        reps = n - have
        run = measure(self.store, self.plan, self.builds[build_key], commit=commit.hash, subject=commit.subject,
                      role=role, reps=reps, profile=self.opts.profile and role != "bracket",
                      progress=self.opts.progress, bracket_for=pool[4:] if role == "bracket" else None)
        vals = values(self.store, self.plan, run, self.opts.value)
        self.pool.setdefault((commit.hash, pool), []).append((run.id, vals))
        return len(vals)


def bisect(store: Store, opts: Options, note=lambda text: None) -> Outcome:
    """Find, verify and return the first commit between GOOD and BAD where the benchmark moved
    the way it moved from GOOD to BAD (see the module docstring). ``note`` gets progress lines."""
    t0 = time.monotonic()
    repo = git.Repo(opts.repo)
    if repo.bisecting():          # a bisection interrupted before it could reset git's state
        repo.bisect_reset()
    require_clean(repo.dirty(), repo.path)
    good, bad = repo.resolve(opts.good, "--good"), repo.resolve(opts.bad, "--bad")
    if good == bad:
        raise NothingToBisect("--good and --bad name the same commit: there is nothing between them to bisect")
    if not repo.is_ancestor(good, bad):
        raise KperfdiffError(f"--good {opts.good} is not an ancestor of --bad {opts.bad}: a bisection walks the "
                             f"history from GOOD to BAD")
    plan = Plan(repo=str(repo.path), good=good, bad=bad, bench=opts.bench, cores=opts.cores, target=opts.target,
                metric=opts.metric, build=opts.build, config=opts.config, params=tuple(opts.params))
    check_metric(plan)
    if opts.value not in VALUES:
        raise UsageError(f"--value {opts.value!r} is not one of {', '.join(VALUES)}")
    exact = plan.metric == "instructions"
    reps = opts.reps or (1 if exact else 5)
    max_reps = reps if exact else max(opts.max_reps, reps)
    verify_reps = opts.verify_reps or (1 if exact else max(reps, 5))
    original = repo.original_ref()
    m = _Measurer(store, plan, repo, opts, note)
    g, b = repo.commit(good), repo.commit(bad)
    commits = repo.between(good, bad)
    try:
        # git bisect first, so that it records the branch to return to (also after a crash)
        said = repo.bisect_start(good, bad)
        measured: dict[str, int] = {}
        reference = _reference(m, g, b, reps, max_reps, note, measured)
        out = Outcome(plan=plan, commits=len(commits), reference=reference, bracketed=bool(m.bracket),
                      value=opts.value)
        if not exact:
            found = m.modes([g, b])
            if found.several:
                out.modes = found
                note(f"{plan.bench} has {modes.describe(found)}" + (
                    "; each repetition's low decile follows the fastest mode while it holds a tenth of the "
                    "repetition" if opts.value == "p10" else "; repetition medians follow the mix of modes"))
        out.steps += [Step(c, role, *m.have(c.hash, "probe"), measured_now=measured.get(c.hash, 0))
                      for c, role in ((g, "good"), (b, "bad"))]
        note(f"BAD is {reference.percent:+.1f}% against GOOD (p={_p(reference.p)}); "
             f"{len(commits)} commits to search, about {math.ceil(math.log2(max(len(commits), 2)))} probes")
        _walk(m, repo, out, said, g, b, reps, max_reps, note)
        if out.culprit:
            _verify(m, repo, out, verify_reps, max_reps, note)
            if opts.verify_revert:
                _verify_revert(m, repo, out, g, b, reps, max_reps, note)
    finally:
        repo.bisect_reset()
        repo.restore(original)
    out.seconds = time.monotonic() - t0
    return out


def _p(p: float) -> str:
    return "n/a" if math.isnan(p) else f"{p:.2g}"


def _reference(m: _Measurer, g: git.Commit, b: git.Commit, reps: int, max_reps: int, note,
               measured: dict) -> decide.Difference:
    """BAD against GOOD, with repetitions added (both alike) until they differ or the budget is spent;
    NothingToBisect when they do not differ. ``measured``: repetitions measured now, per commit.
    The test is made at every look (reps, then more up to max_reps) as a group-sequential test
    (:func:`kperfdiff.core.stats.sequential_levels`): a look before the last stops only at p < 0.001,
    and the last keeps what is left of decide.REFERENCE_ALPHA, so two equal commits go on to a
    bisection with probability at most that, however many looks it took. ``--detect`` makes the look
    where the test could first see its PCT% the last one (a rule on the spread, not the change)."""
    step = max(2, reps // 2)
    looks = tuple(sorted({*range(reps, max_reps, step), max(reps, max_reps)}))
    interim, final = stats.sequential_levels(looks, decide.REFERENCE_ALPHA)
    for n in looks:
        # one repetition of each in turn, as the verification does: a burst of load or a drift of
        # the machine then falls on both alike, not on one side (a whole side measured in one go
        # can come out tens of percent off, or a fraction of a percent off with a tiny spread)
        for h, k in m.in_turn([(g, "probe"), (b, "probe")], n).items():
            measured[h] = measured.get(h, 0) + k
        note(f"GOOD {g.short} and BAD {b.short}: {len(m.have(g.hash, 'probe')[0])} and "
             f"{len(m.have(b.hash, 'probe')[0])} repetitions, one of each in turn")
        d = decide.difference(m.sample(g.hash), m.sample(b.hash), paired=True, alpha=final)
        seen = stats.detectable_change(d.se, d.df, confidence=1 - final)     # at the last look's level
        if n == looks[-1] or (m.opts.detect and seen <= m.opts.detect):
            break
        if d.p < interim:
            d = decide.difference(m.sample(g.hash), m.sample(b.hash), paired=True, alpha=interim)
            break
    if not d.significant:
        sg, sb = m.sample(g.hash), m.sample(b.hash)
        how = (f"{d.percent:+.2f}%, p={_p(d.p)}" if not d.reason else d.reason)
        could = (f"; at this noise the test could have seen a change of {seen:.1f}% or more"
                 if math.isfinite(seen) and seen > 0 else "")
        if m.opts.detect and could:
            could += (f", within --detect {m.opts.detect:g}%" if seen <= m.opts.detect else
                      f", not the {m.opts.detect:g}% of --detect: more repetitions (--max-reps) would be needed")
        raise NothingToBisect(
            f"GOOD {g.short} and BAD {b.short} do not differ significantly in {m.plan.bench} ({how}; "
            f"{sg.n} and {sb.n} repetitions{could}): there is no regression to bisect, so no commit is blamed")
    return d


def _walk(m: _Measurer, repo: git.Repo, out: Outcome, said: str, g: git.Commit, b: git.Commit, reps: int,
          max_reps: int, note) -> None:
    while True:
        culprit = git.first_bad(said)
        if culprit:
            out.culprit = repo.commit(culprit)
            return
        skipped = git.only_skipped(said)
        if skipped is not None:
            out.candidates = [repo.commit(h) for h in skipped]
            return
        c = repo.commit(git.next_probe(said) or repo.head())
        step = Step(c, "probe", [], [])
        try:
            n = reps
            while True:
                if m.bracket:       # rounds: GOOD just before each repetition of the probe, BAD just after
                    around = f"for:{c.hash}"
                    step.measured_now += m.in_turn([(g, around), (c, "probe"), (b, around)], n).get(c.hash, 0)
                else:
                    step.measured_now += m.ensure(c, n, checkout=c.hash)
                sample = m.sample(c.hash)
                step.verdict = m.classify(c.hash, g.hash, b.hash)
                if step.verdict.verdict != decide.UNDECIDED or sample.n >= max_reps:
                    break
                n = min(max_reps, max(n, sample.n) + max(2, reps // 2))
            step.values, step.runs = m.have(c.hash, "probe")
            verdict = step.verdict.verdict
            if verdict == decide.UNDECIDED:
                step.reason = f"undecided after {len(step.values)} repetitions"
        except BuildFailed as e:
            verdict, step.reason = decide.UNDECIDED, str(e)
        out.steps.append(step)
        v = step.verdict
        note(f"probe {c.short} ({c.subject[:50]}): {verdict}" +
             (f", {(v.ratio - 1) * 100:+.1f}% vs GOOD [{(v.low - 1) * 100:+.1f}%, {(v.high - 1) * 100:+.1f}%]"
              if v and not math.isnan(v.low) else "") + (f" ({step.reason})" if step.reason else "") +
             ("" if step.measured_now else " [stored]"))
        said = repo.bisect_mark({decide.GOOD: "good", decide.BAD: "bad"}.get(verdict, "skip"), c.hash)


def _verify(m: _Measurer, repo: git.Repo, out: Outcome, reps: int, max_reps: int, note) -> None:
    """The culprit against its first parent, both measured afresh (interleaved, paired), significant in
    the direction GOOD -> BAD moved. Pairs are added (up to ``max_reps``) while the test could not yet
    detect the change BAD showed against GOOD: the stopping rule looks at its spread only, never at
    the change, so the one test at the end keeps its level."""
    c = out.culprit
    parents = repo.parents(c.hash)
    if not parents:
        return
    p = repo.commit(parents[0])
    # one repetition of each in turn, so drift of the machine falls on both alike
    now = {p.hash: 0, c.hash: 0}
    n, top = reps, max(reps, max_reps)
    while True:
        for h, k in m.in_turn([(p, "verify"), (c, "verify")], n).items():
            now[h] += k
        sp, sc = m.sample(p.hash, "verify"), m.sample(c.hash, "verify")
        out.verification = decide.difference(sp, sc, paired=True)
        wanted = abs(out.reference.percent) if not m.opts.detect else min(abs(out.reference.percent), m.opts.detect)
        if n >= top or out.reference.detectable == 0 or not out.verification.detectable > wanted:
            break
        n = min(top, n + max(2, reps // 2))
    out.verified = out.verification.significant and decide.same_direction(out.reference, out.verification)
    pv, pr = m.have(p.hash, "verify")
    cv, cr = m.have(c.hash, "verify")
    out.steps += [Step(p, "parent", pv, pr, measured_now=now[p.hash]),
                  Step(c, "culprit", cv, cr, measured_now=now[c.hash])]
    out.parent_runs, out.culprit_runs = pr, cr
    note(f"verification: {c.short} against its parent {p.short}: {out.verification.percent:+.1f}% "
         f"(p={_p(out.verification.p)}): {'verified' if out.verified else 'NOT verified'}")


def _verify_revert(m: _Measurer, repo: git.Repo, out: Outcome, g: git.Commit, b: git.Commit, reps: int,
                   max_reps: int, note) -> None:
    """BAD with the culprit reverted: like GOOD when the culprit is the whole regression."""
    c = out.culprit
    step = Step(c, "revert", [], [])
    try:
        n = reps
        while True:
            step.measured_now += m.ensure(c, n, "revert", checkout="revert")
            s = m.sample(c.hash, "revert")
            step.verdict = decide.classify(s, m.sample(g.hash), m.sample(b.hash))     # against every value
            if step.verdict.verdict != decide.UNDECIDED or s.n >= max_reps:
                break
            n = min(max_reps, s.n + max(2, reps // 2))
        step.values, step.runs = m.have(c.hash, "revert")
    except (BuildFailed, KperfdiffError) as e:
        step.reason = str(e)
    out.revert = step
    note(f"revert of {c.short} on BAD: " + (step.verdict.verdict if step.verdict else step.reason))


def artefacts(store: Store, plan: Plan) -> Path:
    """The bisection's folder of builds (one folder per commit, the images and symbols probes boot)."""
    return store.artefact_root() / f"bisect-{plan.key}"
