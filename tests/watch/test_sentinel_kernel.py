"""`kperfdiff watch` on a real kernel tree (make test-sentinel): Debian's linux-source-6.1 as a git
repository (tests/support/kernel_tree.py:sentinel_tree), a branch that starts where getppid mixes the
parent's pid in a loop and then receives 12 commits, pushed one by one, a look after each push. Commit 4
adds a loop to copy_process (proc.fork slower), commit 8 takes getppid's loop out (syscall.null faster);
the rest are comments and documentation. Each commit is built for the x86_64 guest (kbuild, in the
watch's own work tree: the first build full, the rest incremental) and booted in a deterministic guest,
exact kernel instructions per operation of both benchmarks, profiled. The watch must report exactly those
two commits, verified and explained by the functions they touched, and nothing else; the site opens in
Chromium with both. Prints the wall time of each look and of the whole.

KPERFDIFF_KERNEL_TREE keeps the unpacked tree between runs (make test-sentinel sets it)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from schemas.test_schemas import validate
from support import run_cli
from support.chromium import CHROMIUM, Chrome, Page
from support.kernel_tree import SOURCE, sentinel_tree

pytestmark = [pytest.mark.slow, pytest.mark.sentinel,
              pytest.mark.skipif(not SOURCE.is_file() or shutil.which("qemu-system-x86_64") is None,
                                 reason=f"{SOURCE} (Debian's linux-source-6.1) or qemu-system-x86_64 is missing: "
                                        f"make test-sentinel installs them")]
SUITE = """name = "kernel-sentinel"
benchmarks = ["proc.fork", "syscall.null"]
targets = ["qemu:x86_64,deterministic"]
metric = "instructions"
reps = 1
improvements = true
profile = true
"""
BRANCH = "pushed"


def test_a_kernel_branch_pushed_commit_by_commit_gets_its_two_culprits_verified_and_explained(tmp_path):
    t0 = time.monotonic()
    tree = sentinel_tree(Path(os.environ.get("KPERFDIFF_KERNEL_TREE") or tmp_path / "kernel-tree"))
    repo, store, suite = tree.repo, tmp_path / "k.db", tmp_path / "suite.toml"
    suite.write_text(SUITE)
    print(f"\nkernel tree {repo}: start {tree.start[:12]} and {len(tree.commits)} commits to push, ready in "
          f"{time.monotonic() - t0:.0f} s")
    mails = tmp_path / "mails.txt"
    for i, commit in enumerate([tree.start, *tree.commits]):
        subprocess.run(["git", "-C", str(repo), "update-ref", f"refs/heads/{BRANCH}", commit], check=True)
        t = time.monotonic()
        p = run_cli("--store", store, "watch", suite, "--repo", repo, "--branch", BRANCH, "--no-progress",
                    "--format", "json", "--notify", f"cat >> {mails}", timeout=3600, check=0)
        assert p.returncode == 0, p.stderr
        [w] = validate("watch", p.stdout)["watches"]
        assert sorted(m["commit"] for m in w["measured"]) == [commit, commit], p.stderr    # both benchmarks
        assert all(m["state"] == "done" for m in w["measured"]), w["measured"]
        print(f"look {i:2d} after pushing {commit[:12]} ({([''] + tree.subjects)[i][:50] or 'the start'}): "
              f"{time.monotonic() - t:.0f} s" + "".join(f"; bisected {b['benchmark']}: {b['outcome']}"
                                                        for b in w["bisected"]))
    current = [c for c in w["changes"] if c["state"] == "current"]
    assert sorted((c["benchmark"], c["direction"], c["culprit"]["hash"]) for c in current) == [
        ("proc.fork@1", "regression", tree.slower), ("syscall.null@1", "improvement", tree.faster)], \
        json.dumps(w["changes"], indent=1)
    assert all(c["state"] == "current" for c in w["changes"]), json.dumps(w["changes"], indent=1)
    touched = {"proc.fork@1": "copy_process", "syscall.null@1": "getppid"}
    for c in current:
        assert c["culprit"]["verified"] is True and c["bisection"]["state"] == "done", c
        assert c["culprit"]["author"] == "Sentinel Pusher <pusher@example.org>", c["culprit"]
        first = c["explanation"]["functions"][0]
        assert touched[c["benchmark"]] in first["symbol"], c["explanation"]["functions"][:3]
        assert (first["change"] > 0) == (c["direction"] == "regression"), first
        print(f"{c['direction']} {c['percent']:+.2f}% in {c['benchmark']}: culprit {c['culprit']['hash'][:12]} "
              f"\"{c['culprit']['subject']}\", verified at {c['culprit']['percent']:+.2f}% against its parent, "
              f"first function {first['symbol']} {first['parent']:.0f} -> {first['culprit']:.0f} per operation")
    assert mails.read_text().count("top functions") == 2
    site = tmp_path / "site"
    status = run_cli("--store", store, "watch", "--status", "--publish", site, check=0).stdout
    print(status)
    if CHROMIUM:
        ch = Chrome(tmp_path / "chrome")
        try:
            index = Page(ch, site / "index.html", width=1200)
            assert index.eval("document.querySelectorAll('svg line.change').length") == 2
            text = index.eval("document.body.innerText")
            assert tree.slower[:12] in text and tree.faster[:12] in text
            for c in current:
                page = Page(ch, site / f"change-{c['id']}.html", width=1200)
                assert c["culprit"]["hash"] in page.eval("document.body.innerText") and page.errors() == []
            assert index.errors() == []
        finally:
            ch.close()
    print(f"make test-sentinel: {len(tree.commits)} pushes, wall time {time.monotonic() - t0:.0f} s")
