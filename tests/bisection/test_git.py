"""The git side of a bisection: revisions resolved, the commits between, verdicts marked one at a
time, and the end when skipped commits hide the culprit (git's 'cannot bisect more')."""
from support.bisect_repo import make_series
from kperfdiff.bisect import git


def test_skips_that_hide_the_culprit_end_with_its_candidates(tmp_path):
    s = make_series(tmp_path / "repo", 4, 2, good=["a"], bad=["b"])
    r = git.Repo(s.path)
    said = r.bisect_start(s.commits[0], s.commits[-1])
    seen = []
    while git.first_bad(said) is None and git.only_skipped(said) is None:
        h = git.next_probe(said)
        seen.append(h)
        said = r.bisect_mark("skip" if h != s.commits[1] else "good", h)
    left = git.only_skipped(said)
    assert left and s.culprit in left and s.commits[1] not in left
    r.bisect_reset()
    assert not r.bisecting() and r.original_ref() == "main"


def test_every_probe_is_announced_and_the_first_bad_commit_named(tmp_path):
    s = make_series(tmp_path / "repo", 6, 4, good=["a"], bad=["b"])
    r = git.Repo(s.path)
    assert r.between(s.commits[0], s.commits[-1]) == s.commits[1:]
    said = r.bisect_start(s.commits[0], s.commits[-1])
    while git.first_bad(said) is None:
        h = git.next_probe(said)
        assert h in s.commits
        said = r.bisect_mark("bad" if s.commits.index(h) >= 4 else "good", h)
    assert git.first_bad(said) == s.culprit
    assert r.commit(s.culprit).subject.startswith("change what the probe runs")
    r.bisect_reset()
