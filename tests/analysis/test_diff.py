"""The kperfdiff ranking: numbers checked against perf report text,
equivalence across architectures, significance over repeated runs."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from scipy import stats as sst

from kperfdiff.analysis.profile_diff import DiffOptions, diff_profiles, folded_sides
from kperfdiff.core.errors import InputError
from kperfdiff.ingest.profile import Profile, Symbol
from kperfdiff.ingest.load import load
from kperfdiff.render import diff as render
from kperfdiff.symbols.equivalence import load_roles
from support import DATA

TEXT = DATA / "text"


def perf_report_kernel_shares(path: Path) -> dict[str, float]:
    """Self shares of kernel functions, read from `perf report --stdio` text by a regex."""
    out: dict[str, float] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^\s+(\d+\.\d+)%\s+\[k\]\s+(\S+)\s*$", line)
        if m:
            out[m.group(2)] = out.get(m.group(2), 0.0) + float(m.group(1))
    return out


def test_diff_matches_perf_report():
    a = load(TEXT / "forkexec.script")
    b = load(TEXT / "mixed.script")
    res = diff_profiles([a], [b], DiffOptions(equivalence=False, normalise=False))
    ra = perf_report_kernel_shares(TEXT / "forkexec.report")
    rb = perf_report_kernel_shares(TEXT / "mixed.report")
    ra = {k: v for k, v in ra.items() if not k.startswith("0x")}
    rb = {k: v for k, v in rb.items() if not k.startswith("0x")}
    # Common rows: both shares and |difference| as perf report states them (perf report's flat
    # list leaves out a function with no self samples: its share is 0).
    for row in res.common:
        va, vb = ra.get(row.symbol, 0.0), rb.get(row.symbol, 0.0)
        assert abs(row.value_a - va) <= 0.006 and abs(row.value_b - vb) <= 0.006, row.symbol
        assert abs(row.diff - abs(va - vb)) <= 0.011
    # Every function of both reports is common; one found in one report only is common when the
    # other side's stacks hold it (self time nil there), and side-specific otherwise.
    common = {r.symbol for r in res.common}
    only_a, only_b = {r.symbol for r in res.only_a}, {r.symbol for r in res.only_b}
    assert set(ra) & set(rb) <= common and common <= set(ra) | set(rb)
    assert only_a | (common - set(rb)) == set(ra) - set(rb) and not only_a & common
    assert only_b | (common - set(ra)) == set(rb) - set(ra) and not only_b & common
    on_stacks_b = {s.name for s, w in zip(b.symbols, b.children_weight) if w > 0}
    assert common - set(rb) <= on_stacks_b and not only_a & on_stacks_b
    # The top of the ranking, recomputed independently.
    indep = sorted(((abs(ra.get(s, 0.0) - rb.get(s, 0.0)), s) for s in common), reverse=True)
    assert [round(r.diff, 2) for r in res.common[:5]] == pytest.approx([round(d, 2) for d, _ in indep[:5]], abs=0.011)
    assert res.common[0].symbol == indep[0][1] == "_copy_to_iter"
    top_b = sorted(((v, s) for s, v in rb.items() if s in only_b), reverse=True)
    assert [r.symbol for r in res.only_b[:2]] == [s for _, s in top_b[:2]] == ["chacha_permute", "read_zero"]


def test_study_text_layout():
    a = load(TEXT / "forkexec.script")
    b = load(TEXT / "mixed.script")
    out = render.render(diff_profiles([a], [b], DiffOptions(labels=("ARM", "x86"), top=5)), "text")
    lines = out.splitlines()
    # the study's tables come after a line per side (text inputs name their own symbols)
    assert lines[0] == ("A (ARM): forkexec.script, cpu-clock, 274 samples, 78% kernel, 22% user, "
                        "symbols: as named in the file")
    assert lines[1].startswith("B (x86): mixed.script, cpu-clock, 349 samples, 88% kernel, 12% user, symbols: ")
    lines = lines[2:]
    # aligned columns: each side's share, the signed delta B - A, the ratio B/A, then the symbol
    assert lines[1] == "Common kernel functions: top 5 of 75, ranked by the size of the delta (% of all samples)"
    assert re.fullmatch(r" ARM   x86  delta +B/A  symbol", lines[2])
    assert re.fullmatch(r"[- ]+", lines[3])
    # 0.36% of ARM's 274 samples is one sample, 0.29% of x86's 349 too: under 3 samples' worth a side
    # cannot be told from none, so such a row is new or gone rather than 14x or 0.16x
    assert lines[4] == "0.36  5.16  +4.79    new  _copy_to_iter"
    assert lines[6] == "1.82  0.00  -1.82   gone  load_elf_binary"
    assert lines[7] == "2.55  0.86  -1.70  0.34x  _raw_spin_unlock_irqrestore"     # 3 samples: a ratio
    assert lines[8] == "1.82  0.29  -1.54   gone  memcpy"
    assert len({ln.index("  ", 10) for ln in lines[4:9]}) == 1      # the numbers line up
    assert lines[10] == "Kernel functions only in ARM: top 5 of 68 (% of all samples)"
    assert lines[11] == " ARM  symbol"
    assert lines[19] == "Kernel functions only in x86: top 5 of 41 (% of all samples)"
    assert lines[22] == "21.20  chacha_permute"
    # the legend once, at the end; the method only with explain
    assert lines[-1].startswith("columns: ARM (A), x86 (B): share of all samples (%); delta: B - A in points")
    assert "share = weight" not in out
    assert render.render(diff_profiles([a], [b], DiffOptions(labels=("ARM", "x86"), top=5)), "text", explain=True) \
        .splitlines()[-1].startswith("method: share = weight / all samples of the profile")
    assert "~" not in out        # single profiles: no significance, no legend


def test_scope_user_and_all():
    a = load(TEXT / "forkexec.script")
    b = load(TEXT / "mixed.script")
    user = diff_profiles([a], [b], DiffOptions(scope="user"))
    assert all(not r.kernel for r in user.common + user.only_a + user.only_b)
    allr = diff_profiles([a], [b], DiffOptions(scope="all"))
    assert any(r.symbol.startswith("[k] ") for r in allr.common)
    assert any(r.symbol.startswith("[.] ") for r in allr.common + allr.only_a)
    # shares are of all samples whatever the scope
    k = diff_profiles([a], [b], DiffOptions())
    assert {r.symbol: r.value_a for r in k.common}["_copy_to_iter"] == \
        pytest.approx({r.symbol: r.value_a for r in allr.common}["[k] _copy_to_iter"])
    with pytest.raises(InputError):
        diff_profiles([a], [b], DiffOptions(scope="kernal"))


def test_normalisation_merges_rows():
    a = load(TEXT / "forkexec.script")
    b = load(TEXT / "mixed.script")
    res = diff_profiles([a], [b], DiffOptions(children=True))
    names = {r.symbol for r in res.common + res.only_a + res.only_b}
    assert "do_execveat_common" in names and "do_execveat_common.isra.0" not in names
    raw = diff_profiles([a], [b], DiffOptions(children=True, normalise=False))
    assert "do_execveat_common.isra.0" in {r.symbol for r in raw.common + raw.only_a + raw.only_b}


# -- equivalence ---------------------------------------------------------------

def test_equivalence_arm64_vs_x86():
    a = load(DATA / "diff" / "arm64.folded")
    b = load(DATA / "diff" / "x86_64.folded")
    res = diff_profiles([a], [b], DiffOptions(labels=("arm64", "x86_64")))
    rows = {r.symbol: r for r in res.common}
    pf = rows["[page fault entry]"]
    assert pf.members_a == ["do_mem_abort"] and pf.members_b == ["exc_page_fault"]
    assert (pf.value_a, pf.value_b, pf.diff) == pytest.approx((10.0, 15.0, 5.0))
    # A rule (x86's *_erms string routines) makes clear_page_erms clear_page: one row, both names shown.
    cp = rows["clear_page"]
    assert cp.names_a == ["clear_page"] and cp.names_b == ["clear_page_erms"]
    assert cp.rules == ["tuned string routine"] and not cp.role
    assert (cp.value_a, cp.value_b) == pytest.approx((30.0, 20.0))
    # The syscall wrapper rule pairs __arm64_sys_getpid with __x64_sys_getpid.
    sc = rows["sys_getpid"]
    assert (sc.names_a, sc.names_b, sc.rules) == (["__arm64_sys_getpid"], ["__x64_sys_getpid"], ["syscall wrapper"])
    specific = {r.symbol for r in res.only_a + res.only_b}
    assert not specific & {"do_mem_abort", "exc_page_fault", "clear_page", "clear_page_erms", "__arm64_sys_getpid"}
    # handle_mm_fault has self weight on arm64 only, but x86 runs it too (it is on x86's stacks):
    # a common row with a share of 0 on x86, not an arm64-specific function.
    hm = rows["handle_mm_fault"]
    assert (hm.value_a, hm.value_b) == pytest.approx((5.0, 0.0))
    text = render.render(res, "text")
    # the role row, its members under it with their own shares (summing to the role's on each side)
    lines = text.splitlines()
    i = lines.index("10.00   15.00   +5.00   1.5x  [page fault entry]")
    assert lines[i + 1:i + 3] == [" 0.00   15.00  +15.00    new    exc_page_fault",
                                  "10.00    0.00  -10.00   gone    do_mem_abort"]
    assert sum(v for _, v in pf.member_values_a) == pytest.approx(pf.value_a)
    assert sum(v for _, v in pf.member_values_b) == pytest.approx(pf.value_b)
    assert lines[6] == "30.00   20.00  -10.00  0.67x  clear_page (arm64: clear_page; x86_64: clear_page_erms)"
    # Without equivalence the members stay apart.
    off = diff_profiles([a], [b], DiffOptions(equivalence=False))
    assert {"do_mem_abort", "__arm64_sys_getpid"} <= {r.symbol for r in off.only_a}
    assert {"exc_page_fault", "clear_page_erms"} <= {r.symbol for r in off.only_b}


def test_equivalence_children_counts_each_sample_once():
    a = load(DATA / "diff" / "arm64.folded")
    b = load(DATA / "diff" / "x86_64.folded")
    res = diff_profiles([a], [b], DiffOptions(children=True))
    rows = {r.symbol: r for r in res.common}
    pf = rows["[page fault entry]"]
    # arm64: el0_da, do_mem_abort, do_translation_fault, do_page_fault nest on 45 samples
    assert (pf.value_a, pf.value_b) == pytest.approx((45.0, 35.0))
    assert set(pf.members_a) == {"el0_da", "do_mem_abort", "do_translation_fault", "do_page_fault"}
    assert set(pf.members_b) == {"asm_exc_page_fault", "exc_page_fault"}
    sc = rows["[syscall entry]"]
    # el0t_64_sync_handler dispatches faults too, so it is not a syscall-entry member
    assert (sc.value_a, sc.value_b) == pytest.approx((5.0, 5.0))
    assert "el0t_64_sync_handler" in {r.symbol for r in res.only_a}
    assert rows["handle_mm_fault"].value_a == pytest.approx(35.0)
    assert rows["handle_mm_fault"].value_b == pytest.approx(20.0)


def test_user_map_merges_over_shipped(tmp_path):
    m = tmp_path / "mine.toml"
    m.write_text('[[role]]\nname = "getpid"\narm64 = ["invoke_syscall"]\nx86_64 = ["do_syscall_64"]\n'
                 '[[role]]\nname = "clear page"\nx86_64 = ["my_clear"]\n'
                 '[[rule]]\nname = "my prefix"\nprefixes = ["my_"]\nonly = ["clear"]\n')
    t = load_roles([m])
    assert t.role_of("do_syscall_64") == "getpid" and t.role_of("__x64_sys_getpid") is None
    # Role members are matched after the rules: my_clear is "clear" now (the user's rule).
    assert t.role_of("my_clear") == "clear page" and t.role_of("clear_page_erms") == "clear page"
    assert t.rename("my_clear") == ("clear", ("my prefix",)) and t.rename("my_other") == ("my_other", ())
    assert t.rename("__x64_sys_getpid") == ("sys_getpid", ("syscall wrapper",))
    a = load(DATA / "diff" / "arm64.folded")
    b = load(DATA / "diff" / "x86_64.folded")
    res = diff_profiles([a], [b], DiffOptions(maps=(m,), children=True))
    row = {r.symbol: r for r in res.common}["[getpid]"]
    assert (row.value_a, row.value_b) == pytest.approx((5.0, 5.0))
    assert (row.members_a, row.members_b) == (["invoke_syscall"], ["do_syscall_64"])
    for text, what in (('[[rule]]\nname = "r"\n', "neither prefixes nor suffixes"),
                       ('[[rule]]\nname = "r"\nprefixes = ["x"]\npattern = ".*"\n', "unknown key 'pattern'"),
                       ('[[rule]]\nprefixes = ["x"]\n', "no name"),
                       ('[[rule]]\nname = "r"\nsuffixes = [""]\n', "1 to 200 characters")):
        bad = tmp_path / "rule.toml"
        bad.write_text(text)
        with pytest.raises(InputError, match=what):
            load_roles([bad])
    bad = tmp_path / "bad.toml"
    bad.write_text("[[role]]\narm64 = 3\n")
    with pytest.raises(InputError, match="no name"):
        load_roles([bad])
    bad.write_text("[dispatch]\narm64 = \"el0t_64_sync\"\n")
    with pytest.raises(InputError, match="dispatch"):
        load_roles([bad])
    bad.write_text("not toml [")
    with pytest.raises(InputError, match="not valid TOML"):
        load_roles([bad])


def test_shipped_table_is_consistent():
    t = load_roles()
    assert {"page fault entry", "syscall entry", "clear page", "copy page", "spin lock slow path",
            "TLB flush", "set pte", "cache maintenance", "context switch", "user copy",
            "return to user"} <= set(t.roles)
    for role, members in t.roles.items():
        for m in members:
            assert t.role_of(m) == role


def test_equivalence_x86_names_exist_here():
    """The x86_64 names of the table that this kernel has are real kallsyms names."""
    try:
        names = {ln.split()[2] for ln in open("/proc/kallsyms") if len(ln.split()) >= 3}
    except OSError:
        pytest.skip("no /proc/kallsyms")
    for must in ("asm_exc_page_fault", "exc_page_fault", "entry_SYSCALL_64", "do_syscall_64",
                 "clear_page_erms", "native_queued_spin_lock_slowpath", "flush_tlb_mm_range",
                 "__switch_to_asm", "rep_movs_alternative"):
        assert must in names


# -- significance ----------------------------------------------------------------

def synthetic(shares: dict[str, float], total: float = 10000.0, name: str = "p") -> Profile:
    syms = [Symbol(n, "[kernel.kallsyms]", True) for n in shares] + [Symbol("main", "app", False)]
    w = [v / 100 * total for v in shares.values()]
    w.append(total - sum(w))
    return Profile(source=name, event="cpu-clock", symbols=syms, self_weight=w, children_weight=w,
                   total_weight=total, samples=int(total), weight_unit="samples",
                   stacks={(i,): x for i, x in enumerate(w)})


def three_vs_three():
    a = [synthetic({"mover": 10.0, "steady": 5.0, "noise": 2.0}, name="a1"),
         synthetic({"mover": 10.4, "steady": 5.3, "noise": 1.0}, name="a2"),
         synthetic({"mover": 9.7, "steady": 4.8, "noise": 3.1}, name="a3")]
    b = [synthetic({"mover": 20.1, "steady": 5.1, "noise": 2.9}, name="b1"),
         synthetic({"mover": 19.6, "steady": 4.9, "noise": 1.2}, name="b2"),
         synthetic({"mover": 20.4, "steady": 5.2, "noise": 2.4}, name="b3")]
    return a, b


def test_significance_three_vs_three():
    a, b = three_vs_three()
    res = diff_profiles(a, b, DiffOptions(labels=("A", "B")))
    assert res.significance
    rows = {r.symbol: r for r in res.common}
    mover, steady, noise = rows["mover"], rows["steady"], rows["noise"]
    assert mover.significant is True
    assert steady.significant is False and noise.significant is False
    assert mover.ci[0] > 0                      # B - A, clearly positive
    assert steady.ci[0] < 0 < steady.ci[1]
    # p-values: Welch's t-test, computed here by scipy directly
    for r, (xa, xb) in ((mover, ([10.0, 10.4, 9.7], [20.1, 19.6, 20.4])),
                        (steady, ([5.0, 5.3, 4.8], [5.1, 4.9, 5.2])),
                        (noise, ([2.0, 1.0, 3.1], [2.9, 1.2, 2.4]))):
        assert r.values_a == pytest.approx(xa)
        assert r.p == pytest.approx(sst.ttest_ind(xb, xa, equal_var=False).pvalue, rel=1e-9)
    # BH by hand over the three tested rows
    ps = sorted([(r.p, r.symbol) for r in res.common])
    m = len(ps)
    hand = {}
    running = 1.0
    for rank in range(m, 0, -1):
        p, s = ps[rank - 1]
        running = min(running, p * m / rank)
        hand[s] = running
    for r in res.common:
        assert r.q == pytest.approx(hand[r.symbol], rel=1e-12)
    text = render.render(res, "text")
    lines = text.splitlines()
    assert any(re.search(r"\+10\.00 .* mover$", ln) for ln in lines)
    assert any(ln.endswith("  steady ~") for ln in lines)
    assert lines[-1] == "~ not significant (Welch 95% interval contains 0 or BH q >= 0.05)"
    doc = json.loads(render.render(res, "json"))
    assert doc["version"] == 1
    j = {r["symbol"]: r for r in doc["common"]}
    assert j["mover"]["significant"] is True and len(j["mover"]["ci"]) == 2
    assert j["steady"]["q"] == pytest.approx(steady.q)
    assert j["mover"]["shares_a"] == pytest.approx([10.0, 10.4, 9.7])
    md = render.render(res, "markdown")
    assert "steady ~" in md and "ci low" in md
    csv = render.render(res, "csv")
    assert csv.splitlines()[0].endswith("ci_low,ci_high,p,q,significant")


def test_no_significance_with_one_profile_per_side():
    a, b = three_vs_three()
    res = diff_profiles(a, b[:1])
    assert not res.significance
    assert any("at least 2 profiles" in w for w in res.warnings)
    assert all(r.significant is None for r in res.common)


# -- per operation -----------------------------------------------------------------

def test_per_op():
    a = load(TEXT / "forkexec.script")
    b = load(TEXT / "mixed.script")
    with pytest.raises(InputError, match="operations"):
        diff_profiles([a], [b], DiffOptions(per_op=True))
    res = diff_profiles([a], [b], DiffOptions(per_op=True, ops=(22.0, 7.0)))
    row = {r.symbol: r for r in res.common}["do_syscall_64"]
    # share x CPU time (cpu-clock periods, ns) / operations
    assert row.value_a == pytest.approx(row.shares_a[0] / 100 * a.total_weight / 22.0)
    assert row.value_b == pytest.approx(row.shares_b[0] / 100 * b.total_weight / 7.0)
    assert res.unit == "ns/op"
    out = render.render(res, "text")
    assert out.splitlines()[3].startswith("Common kernel functions (ns per operation): top 10 of 75, ranked by the "
                                          "size of the delta (ns/op)")
    b.meta["ops"] = 7
    b.meta["cpu_time_ns"] = 1e9
    res = diff_profiles([a], [b], DiffOptions(per_op=True, ops=(22.0, None)))
    row = {r.symbol: r for r in res.common}["do_syscall_64"]
    assert row.value_b == pytest.approx(row.shares_b[0] / 100 * 1e9 / 7)
    folded = load(DATA / "diff" / "arm64.folded")
    with pytest.raises(InputError, match="CPU time"):
        diff_profiles([folded], [b], DiffOptions(per_op=True, ops=(1.0, 1.0)))


def test_children_needs_children_column():
    a = load(TEXT / "forkexec.report")
    b = load(TEXT / "mixed.report")
    with pytest.raises(InputError, match="Children"):
        diff_profiles([a], [b], DiffOptions(children=True))
    a = load(TEXT / "forkexec.children.report")
    b = load(TEXT / "mixed.children.report")
    res = diff_profiles([a], [b], DiffOptions(children=True, equivalence=False))
    row = {r.symbol: r for r in res.common}["do_syscall_64"]
    assert row.value_a == pytest.approx(51.82)


def test_flat_and_stack_inputs_agree_on_children():
    sa = load(TEXT / "forkexec.script")
    sb = load(TEXT / "mixed.script")
    ra = load(TEXT / "forkexec.children.report")
    rb = load(TEXT / "mixed.children.report")
    opts = DiffOptions(children=True, equivalence=False, top=0)
    x = {r.symbol: r for r in diff_profiles([sa], [sb], opts).common}
    y = {r.symbol: r for r in diff_profiles([ra], [rb], opts).common}
    for s in ("ksys_read", "vfs_read", "do_syscall_64", "handle_mm_fault"):
        assert x[s].value_a == pytest.approx(y[s].value_a, abs=0.006)
        assert x[s].value_b == pytest.approx(y[s].value_b, abs=0.006)


def test_folded_outputs_roundtrip(tmp_path):
    from kperfdiff.render.flamegraph import folded_files
    a = load(DATA / "diff" / "arm64.folded")
    b = load(DATA / "diff" / "x86_64.folded")
    res = diff_profiles([a], [b])
    files = folded_files(*folded_sides(res, [a], [b]))
    # kernel scope: stacks cut to their kernel frames, roles renamed, _[k] kept
    # (arm64's el0t_64_sync dispatch frames are skipped so the paths merge with x86's)
    assert "[page fault entry]_[k];handle_mm_fault_[k];" \
           "__handle_mm_fault_[k];do_anonymous_page_[k];clear_page_[k] 30" in files["a.folded"].splitlines()
    assert "[page fault entry]_[k];handle_mm_fault_[k];__handle_mm_fault_[k];do_anonymous_page_[k];" \
           "clear_page_[k] 30 20" in files["diff.folded"].splitlines()
    assert "[page fault entry]_[k] 15" in files["b.folded"].splitlines()
    for line in files["diff.folded"].splitlines():
        stack, ca, cb = line.rsplit(" ", 2)
        assert ca.isdigit() and cb.isdigit()
    p = tmp_path / "b.folded"
    p.write_text(files["b.folded"])
    again = load(p)
    assert again.total_weight == 40 and all(s.kernel for s in again.symbols)


def test_compute_modes():
    a = load(TEXT / "forkexec.script")
    b = load(TEXT / "mixed.script")
    base = {r.symbol: r for r in diff_profiles([a], [b], DiffOptions(top=0)).common}
    for mode, weights, f in (("delta", (1, 1), lambda x, y: y - x),
                             ("ratio", (1, 1), lambda x, y: y / x if x else math.inf),
                             ("wdiff", (1.0, 2.0), lambda x, y: 2 * y - x)):
        res = diff_profiles([a], [b], DiffOptions(compute=mode, wdiff_weights=weights))
        for r in res.common:
            assert r.score == pytest.approx(f(base[r.symbol].value_a, base[r.symbol].value_b))
        # ratio: ranked by |log ratio|, a share of 0 on either side first
        keys = [(math.inf if r.score <= 0 or math.isinf(r.score) else abs(math.log(r.score))) if mode == "ratio"
                else abs(r.score) for r in res.common]
        assert keys == sorted(keys, reverse=True)
        text = render.render(res, "text").splitlines()
        assert text[3].endswith(f"ranked by {render._RANKED_BY[mode]} (% of all samples)")
        assert text[4].split()[2:4] == ["delta", "B/A"] and text[4].split()[-1] == "symbol"
        assert ("wdiff" in text[4].split()) == (mode == "wdiff")
    d = diff_profiles([a], [b], DiffOptions(compute="delta"))
    assert any(r.score < 0 for r in d.common[:5])


def test_merge_adds_parallel_copies_into_one_replicate():
    """The copies of one repetition become one profile: weights, samples and stacks add up, and a
    symbol found in only one copy keeps its weight."""
    from kperfdiff.ingest.load import load
    from kperfdiff.ingest.profile import merge
    a = load(DATA / "text" / "forkexec.folded")
    b = load(DATA / "text" / "mixed.folded")
    m = merge([a, b], "two copies")
    assert m.total_weight == a.total_weight + b.total_weight and m.samples == a.samples + b.samples
    for prof in (a, b):
        for s, w in zip(prof.symbols, prof.self_weight):
            other = (b if prof is a else a)
            w_other = dict(zip(other.symbols, other.self_weight)).get(s, 0.0)
            assert m.self_weight[m.index()[s]] == pytest.approx(w + w_other)
    assert sum(m.stacks.values()) == pytest.approx(sum(a.stacks.values()) + sum(b.stacks.values()))
    assert merge([a], "one") is a
