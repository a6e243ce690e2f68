"""diff's output for a reader: a role row's members with their own shares, where the time is."""
from __future__ import annotations

import json

import pytest

from support import DATA, run_cli

XARCH = DATA / "perfdata" / "xarch"
FORK = (XARCH / "x86_64" / "proc.fork.perf.data.gz", XARCH / "arm64" / "proc.fork.perf.data.gz")
GUPS = (DATA / "diff" / "gups.a.folded", DATA / "diff" / "gups.b.folded")


def _rows(doc) -> dict:
    return {r["symbol"]: r for r in doc["common"] + doc["only_a"] + doc["only_b"]}


@pytest.mark.parametrize("children", [False, True])
def test_role_row_shows_its_members_with_their_own_shares(children):
    flags = ["--top", "0"] + (["--children"] if children else [])
    text = run_cli("diff", *FORK, *flags, check=0).stdout.splitlines()
    doc = json.loads(run_cli("diff", *FORK, *flags, "--format", "json", check=0).stdout)
    apart = _rows(json.loads(run_cli("diff", *FORK, *flags, "--no-equivalence", "--format", "json",
                                     check=0).stdout))
    tlb = _rows(doc)["[TLB flush]"]
    # JSON: each member's own value per side; members_a/members_b keep their meaning (names only)
    assert all(isinstance(n, str) for n in tlb["members_a"] + tlb["members_b"])
    for side in ("a", "b"):
        values = {m["name"]: m["value"] for m in tlb[f"member_values_{side}"]}
        # each member's value is its own row's when the names are compared apart (perf report's number)
        for name, v in values.items():
            own = apart.get(name)
            assert v == pytest.approx(own[f"value_{side}"] if own else 0.0, abs=1e-9), (name, side)
        if children:     # inclusive: the role counts a sample once, its members each count it
            assert max(values.values()) <= tlb[f"value_{side}"] + 1e-9 <= sum(values.values()) + 1e-9
        else:            # self: the members add up to the role
            assert sum(values.values()) == pytest.approx(tlb[f"value_{side}"])
    ptep = {m["name"]: m["value"] for m in tlb["member_values_b"]}["ptep_clear_flush"]
    assert ptep > 0
    # text: the role row, then its members indented under it with both shares, the delta and the ratio
    i = next(i for i, ln in enumerate(text) if ln.endswith("  [TLB flush]"))
    under = text[i + 1:i + 1 + len(set(tlb["members_a"]) | set(tlb["members_b"]))]
    line = next(ln for ln in under if ln.endswith("    ptep_clear_flush"))
    a = {m["name"]: m["value"] for m in tlb["member_values_a"]}.get("ptep_clear_flush", 0.0)
    # on A it is under 3 samples' worth (none, or one sample with --children): new on B, not a ratio
    assert a < doc["sides"]["a"]["resolution"] <= ptep
    assert line.split() == [f"{a:.2f}", f"{ptep:.2f}", f"{ptep - a:+.2f}", "new", "ptep_clear_flush"]
    # Markdown: the same as sub-rows marked with an arrow
    md = run_cli("diff", *FORK, *flags, "--format", "markdown", check=0).stdout
    assert f"| {ptep:.2f} | {ptep - a:+.2f} | " in md and "| \u21b3 ptep_clear_flush |" in md


def test_the_same_names_on_both_sides_are_printed_once():
    from kperfdiff.analysis.profile_diff import Row
    from kperfdiff.render.diff import _names
    assert _names(["zap_pte_range"], ["zap_pte_range"], "4k", "huge") == "zap_pte_range"
    assert _names(["clear_page"], ["zap_pte_range"], "4k", "huge") == "4k: clear_page; huge: zap_pte_range"
    # the same names on both sides, several of them: once (a bisection's parent and culprit)
    assert _names(["memset_erms", "memset"], ["memset_erms", "memset"], "parent", "culprit") == "memset_erms, memset"
    assert _names(["memset_erms", "memset"], ["memset"], "parent", "culprit") == \
        "parent: memset_erms, memset; culprit: memset"
    assert Row("x", 0.0, 1.0, [0.0], [1.0]).ratio is None


def test_where_the_time_is_when_user_code_dominates():
    p = run_cli("diff", *GUPS, check=0)
    lines = p.stdout.splitlines()
    assert ", 1,000 samples, 2% kernel, 98% user, " in lines[0]
    note = next(ln for ln in lines if ln.startswith("Note: "))
    assert "the kernel holds 2% of A's samples and 2% of B's" in note and "--scope all" in note
    doc = json.loads(run_cli("diff", *GUPS, "--format", "json", check=0).stdout)
    s = doc["summary"]
    assert s["a"] == {"samples": 1000, "kernel_share": pytest.approx(0.02), "user_share": pytest.approx(0.98)}
    assert "--scope all" in s["note"]
    md = run_cli("diff", *GUPS, "--format", "markdown", check=0).stdout
    assert "**Note:** the kernel holds 2%" in md
    # ranking every function: no note
    assert "Note: " not in run_cli("diff", *GUPS, "--scope", "all", check=0).stdout


def test_no_note_when_the_kernel_holds_the_time():
    # the equivalence fixtures: 50% and 40% kernel
    p = run_cli("diff", DATA / "diff" / "arm64.folded", DATA / "diff" / "x86_64.folded", check=0)
    assert "Note: " not in p.stdout and ", 50% kernel, 50% user, " in p.stdout
    doc = json.loads(run_cli("diff", DATA / "diff" / "arm64.folded", DATA / "diff" / "x86_64.folded",
                             "--format", "json", check=0).stdout)
    assert doc["summary"]["note"] is None and doc["summary"]["b"]["kernel_share"] == pytest.approx(0.4)
    # the user side of the rule: user code holds 98% of GUPS, so ranking user functions needs no note
    assert "Note: " not in run_cli("diff", *GUPS, "--scope", "user", check=0).stdout


def test_report_section_expands_a_roles_members():
    from types import SimpleNamespace
    from kperfdiff.analysis.profile_diff import DiffOptions, diff_profiles
    from kperfdiff.ingest.load import load
    from kperfdiff.render.report import diff_tables_html
    res = diff_profiles([load(DATA / "diff" / "arm64.folded")], [load(DATA / "diff" / "x86_64.folded")],
                        DiffOptions(labels=("arm64", "x86_64")))
    html = diff_tables_html(SimpleNamespace(result=res))
    assert "<details><summary>members of [page fault entry]</summary>" in html
    assert '<tr><td class="l">exc_page_fault</td><td>0.00</td><td>15.00</td><td>+15.00</td><td>new</td></tr>' in html
    assert '<tr><td class="l">do_mem_abort</td><td>10.00</td><td>0.00</td><td>-10.00</td><td>gone</td></tr>' in html
    assert ", 50% kernel, 50% user, " in html


def _per_op_sides(tmp_path, scale: int):
    """Two folded profiles of 2000 * ``scale`` samples, 600 ns per operation each: zap_pte_range takes
    1 * ``scale`` samples on A and 1000 * ``scale`` on B, unmap_page_range 400 * ``scale`` on A and
    1 * ``scale`` on B, do_syscall_64 the rest."""
    from kperfdiff.ingest.load import load
    sides = []
    for name, counts in (("a", (1, 400)), ("b", (1000, 1))):
        f = tmp_path / f"{name}{scale}.folded"
        rest = 2000 - sum(counts)
        f.write_text(f"w;do_syscall_64_[k] {rest * scale}\nw;do_syscall_64_[k];zap_pte_range_[k] {counts[0] * scale}\n"
                     f"w;do_syscall_64_[k];unmap_page_range_[k] {counts[1] * scale}\n")
        p = load(f)
        p.meta.update({"cpu_time_ns": 600 * 10_000, "ops": 10_000})
        sides.append([p])
    return sides


def test_a_side_under_the_sampling_resolution_is_new_or_gone(tmp_path):
    """zap_pte_range at 0.3 ns/op on A (one sample of 2000) against 300 on B printed as 1000x: one sample
    cannot be told from none, so it is new; unmap_page_range the other way round is gone. The
    resolution comes from the samples: with ten times the samples, the same shares are ratios."""
    from types import SimpleNamespace
    from kperfdiff.analysis.profile_diff import DiffOptions, diff_profiles
    from kperfdiff.render import diff as render
    from kperfdiff.render.report import diff_tables_html
    from schemas.test_schemas import validate
    res = diff_profiles(*_per_op_sides(tmp_path, 1), DiffOptions(per_op=True, labels=("A", "B")))
    # 3.0 samples' worth (-ln 0.05) of 2000 samples of 600 ns/op, on each side
    assert res.side_a.resolution == pytest.approx(2.9957 * 600 / 2000, rel=1e-4)
    text = render.render(res, "text")
    rows = {ln.split()[-1]: ln.split() for ln in text.splitlines() if ln.endswith(("zap_pte_range",
                                                                                   "unmap_page_range"))}
    assert rows["zap_pte_range"][:2] == ["0.30", "300.00"] and rows["zap_pte_range"][3] == "new"
    assert rows["unmap_page_range"][:2] == ["120.00", "0.30"] and rows["unmap_page_range"][3] == "gone"
    assert "1000x" not in text and "new/gone: A/B under 3.0 samples' worth (0.8987 ns/op on A" in text
    doc = validate("diff", render.render(res, "json"))
    by = {r["symbol"]: r for r in doc["common"]}
    assert by["zap_pte_range"]["ratio"] is None and by["zap_pte_range"]["new_or_gone"] == "new"
    assert by["unmap_page_range"]["ratio"] is None and by["unmap_page_range"]["new_or_gone"] == "gone"
    assert by["do_syscall_64"]["new_or_gone"] is None and by["do_syscall_64"]["ratio"] == pytest.approx(999 / 1599)
    assert doc["sides"]["b"]["resolution"] == pytest.approx(res.side_b.resolution)
    csv = {ln.split(",")[1]: ln.split(",")[-1] for ln in render.render(res, "csv").splitlines()}
    assert (csv["zap_pte_range"], csv["unmap_page_range"]) == ("new", "gone")
    html = diff_tables_html(SimpleNamespace(result=res))
    assert '<td class="">+299.70</td><td class="">new</td>' in html and '<td class="">gone</td>' in html
    # ten times the samples, the same shares: 10 samples on A are resolved, and the ratio is 1000x
    more = diff_profiles(*_per_op_sides(tmp_path, 10), DiffOptions(per_op=True, labels=("A", "B")))
    line = next(ln for ln in render.render(more, "text").splitlines() if ln.endswith("zap_pte_range"))
    assert line.split()[3] == "1000x"
