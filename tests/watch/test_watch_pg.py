"""Two `kperfdiff watch` processes on one PostgreSQL store share its queue: started at once on a branch of
six commits, they measure each commit exactly once between them, each in a measuring tree of its own,
and leave every measurement done."""
import subprocess

from support import KPERFDIFF
from kperfdiff.store import Store
from watch.test_watch_local import SUITE, commit


def test_two_watch_processes_on_one_postgresql_store_measure_each_commit_once(tmp_path, pg_url):
    repo, suite = tmp_path / "repo", tmp_path / "suite.toml"
    suite.write_text(SUITE.replace("reps = 3", "reps = 2"))
    commits = [commit(repo, 100, f"commit {i}") for i in range(6)]
    argv = [str(KPERFDIFF), "--store", pg_url, "watch", str(suite), "--repo", str(repo), "--branch", "main",
            "--since", commits[0], "--no-progress", "--format", "json"]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              stdin=subprocess.DEVNULL) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    s = Store.open(pg_url)
    measured = [r.options["commit"] for r in s.list_runs() if "watch" in r.options and r.state == "complete"]
    assert sorted(measured) == sorted(commits)                    # each commit once, none twice
    # (two processes measuring on one CPU slow each other down, which a change point may see: a bisection
    # may follow; the measurements are what is shared here)
    items = s.watch_items("sentinel", kind="measure")
    assert len(items) == 6 and {i.state for i in items} == {"done"}
    owners = {i.owner for i in items}
    assert 1 <= len(owners) <= 2 and all(o.count("/") >= 2 for o in owners)
    trees = [ln for ln in subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True,
                                         text=True).stdout.splitlines() if "/watch-sentinel/" in ln]
    assert len(trees) == len(owners)                              # one measuring tree per process that measured
