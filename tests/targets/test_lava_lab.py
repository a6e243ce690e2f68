"""`make test-lab`: a real LAVA lab on this machine (tests/support/lava_lab.py: lava-server, its scheduler and a
lava-dispatcher worker with two devices of the standard `qemu` device type, TCG) runs a two-variant
experiment end to end through the REST API: the jobs are submitted, run two at a time on the two
devices, and their results come back through LAVA's logs into the store, with profiles, labelled with
the device; LAVA's own pages hold the benchmarks as test cases with their measurements; the token is
nowhere but in the requests. A bisection runs each commit's measurements as LAVA jobs that deploy that
commit's kernel and command line, and names the culprit."""
from __future__ import annotations

import json
import math
import time

import pytest

from support import run_cli
from support.bisect_repo import make_series
from support.lava_lab import Lab, missing_tools
from kperfdiff.targets.lava.spec import parse_spec
from kperfdiff.targets.qemu import resolve_kernel

pytestmark = [pytest.mark.slow, pytest.mark.lab]

EXPERIMENT = """name = "lab-thp"
description = "transparent huge pages never vs always, as LAVA jobs on the lab's qemu devices"
benchmarks = ["fault.anon.4k", "fault.anon.huge", "syscall.null"]
cores = [1]
reps = 2
tiny = true
profile = true
[[variant]]
label = "thp-never"
target = "lava://127.0.0.1:{port}/qemu,http,arch=x86_64,jobs=2"
cmdline = "transparent_hugepage=never"
[[variant]]
label = "thp-always"
target = "lava://127.0.0.1:{port}/qemu,http,arch=x86_64,jobs=2"
cmdline = "transparent_hugepage=always"
"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    miss = missing_tools()
    assert not miss, f"missing {', '.join(miss)}: run `make test-lab`, which installs lava-server and lava-dispatcher"
    with Lab(tmp_path_factory.mktemp("lava-lab") / "lab") as lab:
        yield lab


def test_a_two_variant_experiment_runs_end_to_end_through_lava(lab, tmp_path, home, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    exp = tmp_path / "lab-thp.toml"
    exp.write_text(EXPERIMENT.format(port=lab.port))
    t0 = time.monotonic()
    p = run_cli("run", exp, "--no-progress", env={"KPERFDIFF_LAVA_TOKEN": lab.token}, timeout=3600)
    took = time.monotonic() - t0
    print(f"lab experiment: {took:.0f} s\n{p.stderr}\n{p.stdout}")
    assert p.returncode == 0, p.stderr
    assert "thp-never: fault.anon.huge skipped: needs transparent huge pages (mode is never)" in p.stderr
    assert "change: thp-always (emulated) vs thp-never (emulated)" in p.stdout
    # four jobs, two at a time on the two devices, all complete
    status, body = lab.api("GET", "jobs/?ordering=id")
    jobs = json.loads(body)["results"]
    assert len(jobs) == 4 and {j["health"] for j in jobs} == {"Complete"}
    assert {j["actual_device"] for j in jobs} == {"qemu-01", "qemu-02"}
    assert all(j["failure_comment"] in (None, "") for j in jobs)
    # LAVA's own pages: every benchmark a test case with its median as the measurement
    # (the variants' order within a repetition is shuffled: the job is found by its name, and
    # repetitions are numbered from 1 wherever a user sees one)
    names = {j["description"]: j for j in jobs}
    assert sorted(names) == [f"kperfdiff lab-thp/{v} rep {r}" for v in ("thp-always", "thp-never") for r in (1, 2)]
    status, body = lab.api("GET", f"jobs/{names['kperfdiff lab-thp/thp-always rep 1']['id']}/tests/?limit=100")
    cases = {t["name"]: t for t in json.loads(body)["results"] if t["name"].startswith(("fault.", "syscall."))}
    assert sorted(cases) == ["fault.anon.4k.P1.r1", "fault.anon.huge.P1.r1", "syscall.null.P1.r1"]
    assert {cases["syscall.null.P1.r1"]["result"], cases["syscall.null.P1.r1"]["unit"]} == {"pass", "ns/op"}
    # the store: every cell, labelled with its job and device, profiles kept
    shown = json.loads(run_cli("show", "lab-thp/thp-always", "--format", "json", check=0).stdout)
    assert [r["status"] for r in shown["results"]] == ["ok"] * 6
    assert {i["lava_device"] for r in shown["results"] for i in r["info"]} <= {"qemu-01", "qemu-02"}
    assert {i["lava_job"] for r in shown["results"] for i in r["info"]} <= {j["id"] for j in jobs}
    assert shown["machine"]["thp_enabled"] == "always" and shown["machine"]["lava_device_type"] == "qemu"
    d = run_cli("diff", "lab-thp/thp-never:fault.anon.4k", "lab-thp/thp-always:fault.anon.4k", "--top", "3",
                check=0)
    assert "Common kernel functions: top 3 of " in d.stdout
    # the token went to the server only
    for f in home.rglob("*"):
        if f.is_file():
            assert lab.token.encode() not in f.read_bytes(), f
    assert lab.token not in p.stdout + p.stderr
    for j in jobs:
        assert lab.token not in j["definition"]


def test_a_wrong_token_is_refused_with_one_sentence(lab, tmp_path, home, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    p = run_cli("bench", "--target", f"lava://127.0.0.1:{lab.port}/qemu,http", "--only", "syscall.null",
                "--no-progress", env={"KPERFDIFF_LAVA_TOKEN": "not-the-token"}, timeout=900)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "refused the token for the job submission (HTTP 403: Invalid token.)" in p.stderr


def test_a_bisection_runs_each_probe_as_a_lava_job_and_names_the_culprit(lab, tmp_path, home, monkeypatch):
    """Six commits after GOOD; the fourth turns on page-table isolation (pti=on: every system call
    switches page tables, which TCG pays for with a flush of its TLB). Each commit's build prints the
    prebuilt Debian kernel and its command line; each probe is a LAVA job that deploys that commit's
    kernel with that command line; the bisection names the fourth commit and verifies it."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    spec = f"lava://127.0.0.1:{lab.port}/qemu,http,arch=x86_64,jobs=2"
    kernel = resolve_kernel(parse_spec(spec))
    image = [f"image={kernel.image}"]
    n = 6
    s = make_series(tmp_path / "repo", n, 4, good=image + ["append=pti=off"], bad=image + ["append=pti=on"],
                    benign={2: ["append=nokaslr"]})
    _, body = lab.api("GET", "jobs/?limit=1")
    before = max([j["id"] for j in json.loads(body)["results"]], default=0)
    t0 = time.monotonic()
    r = run_cli("bisect", "--repo", s.path, "--good", s.commits[0], "--bad", s.commits[-1], "--bench",
                "syscall.null", "--target", f"{spec},modules={kernel.modules}", "--build", "./build.sh",
                "--metric", "time", "--reps", "3", "--no-bracket", "--no-profile", "--format", "json",
                env={"KPERFDIFF_LAVA_TOKEN": lab.token}, timeout=3600)
    took = time.monotonic() - t0
    print(f"lab bisection: {took:.0f} s\n{r.stderr}")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["culprit"]["hash"] == s.culprit
    assert out["verified"] is True and out["verification"]["ratio"] > 1
    assert out["measured_probes"] <= math.ceil(math.log2(n)) + 2
    # every measurement was a LAVA job of its own, deploying the commit's kernel with the commit's command line
    _, body = lab.api("GET", "jobs/?limit=100")
    jobs = [j for j in json.loads(body)["results"] if j["id"] > before]
    assert jobs and {j["health"] for j in jobs} == {"Complete"}
    appended = [j["definition"] for j in jobs]
    assert any("pti=on" in d for d in appended) and any("pti=off" in d for d in appended)
    assert all(("pti=on" in d) != ("pti=off" in d) for d in appended)
    assert any("nokaslr" in d for d in appended)


def test_a_watch_measures_each_push_as_a_lava_job_and_bisects_the_change(lab, tmp_path, home, monkeypatch):
    """`kperfdiff watch` with a LAVA target: a branch receives six pushes, the fourth of three commits
    whose middle one turns on page-table isolation (pti=on, as in the bisection above); with
    commits = "newest" each push's tip is measured as a LAVA job deploying its kernel and command line,
    the change point's bisection runs its probes and verification as LAVA jobs too, and names the middle
    commit of the fourth push, verified. Prints the status report (docs/watch.md quotes it)."""
    from support.bisect_repo import push
    from schemas.test_schemas import validate
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    spec = f"lava://127.0.0.1:{lab.port}/qemu,http,arch=x86_64,jobs=2"
    kernel = resolve_kernel(parse_spec(spec))
    suite = tmp_path / "lab-sentinel.toml"
    suite.write_text(f'name = "lab-sentinel"\nbenchmarks = ["syscall.null"]\n'
                     f'targets = ["{spec},modules={kernel.modules}"]\nreps = 3\nmax_reps = 6\nbuild = "./build.sh"\n'
                     f'commits = "newest"\nbracket = false\n')
    repo, store = tmp_path / "repo", tmp_path / "k.db"
    pushes = [["pti=off"], ["pti=off"], ["pti=off"], ["pti=off", "pti=on", "pti=on"], ["pti=on"], ["pti=on"]]
    commits, t0 = [], time.monotonic()
    for n, push_of in enumerate(pushes):
        for words in push_of:
            subject = "x86/mm: turn on page-table isolation" if words == "pti=on" and "pti=on" not in \
                (commits[-1][1] if commits else "") else f"notes: entry {len(commits)}"
            commits.append((push(repo, [f"image={kernel.image}", f"append={words}"], subject), words))
        t = time.monotonic()
        p = run_cli("--store", store, "watch", suite, "--repo", repo, "--branch", "main", "--no-progress",
                    "--format", "json", env={"KPERFDIFF_LAVA_TOKEN": lab.token}, timeout=3600, check=0)
        assert p.returncode == 0, p.stderr
        [w] = validate("watch", p.stdout)["watches"]
        assert [m["commit"] for m in w["measured"]] == [commits[-1][0]], p.stderr
        print(f"push {n + 1}: look {time.monotonic() - t:.0f} s\n{p.stderr}")
    culprit = next(h for (h, words), (_, before) in zip(commits[1:], commits) if words == "pti=on" and before == "pti=off")
    current = [c for c in w["changes"] if c["state"] == "current"]
    assert [(c["direction"], c["culprit"]["hash"], c["culprit"]["verified"]) for c in current] == \
        [("regression", culprit, True)], json.dumps(w["changes"], indent=1)
    status = run_cli("--store", store, "watch", "--status", check=0).stdout
    print(f"lab watch: {len(pushes)} pushes, {time.monotonic() - t0:.0f} s\n{status}")
    _, body = lab.api("GET", "jobs/?limit=100")
    assert {j["health"] for j in json.loads(body)["results"]} == {"Complete"}
