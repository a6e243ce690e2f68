"""The LAVA client against the responses of a real server (recorded in tests/data/lava/, replayed by
tests/support/lava_fake.py): a token refused, a job that waits in the queue past its timeout (canceled, its
cells failed), an incomplete and a canceled job (failed with LAVA's reason), a complete one (its
results decoded from the log), several jobs in flight within the bound and the same results as one
at a time; and where the token may come from, and where it never goes."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support.lava_fake import COMPLETE, DATA, FakeLava
from kperfdiff.core.errors import KperfdiffError
from kperfdiff.targets.base import Invocation
from kperfdiff.targets.lava.api import LavaAuthError, LavaClient, LavaError, find_token
from kperfdiff.targets.lava.target import LavaTarget, PlannedJob, run_lava_jobs
from kperfdiff.targets.qemu import Kernel

TOKEN = "kpd-test-token-7f3a9c21e5d04b6e"


OPEN: list[LavaTarget] = []


class StubTarget(LavaTarget):
    """A LavaTarget whose job definition is a placeholder (nothing to build or publish): the client,
    the jobs in flight and the decoding are the real ones."""

    def __init__(self, spec: str):
        super().__init__(spec)
        OPEN.append(self)
        self._kernel = Kernel(Path("/boot/vmlinuz-test"), None, "6.1.0-test", "path:/boot/vmlinuz-test")
        self.poll_s = 0.02

    def definition(self, invocations, *, name, metadata):
        return {"timeouts": {"job": {"minutes": 30}}}, f"job_name: {name}\n"


def recorded_invocations() -> list[Invocation]:
    """The two invocations of the recorded complete job (tests/data/lava/job-complete.log)."""
    return [Invocation(["kpd-fault", "fault.anon.4k"], 1, 120, profile="fault.anon.4k.P1.r0",
                       label="fault.anon.4k.P1.r0"),
            Invocation(["kpd-syscall", "syscall.null"], 1, 60, label="syscall.null.P1.r0")]


@pytest.fixture(autouse=True)
def close_targets():
    yield
    while OPEN:
        OPEN.pop().close()


@pytest.fixture
def token(monkeypatch, tmp_path):
    monkeypatch.setenv("KPERFDIFF_LAVA_TOKEN", TOKEN)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return TOKEN


def fake(**kw) -> FakeLava:
    return FakeLava(TOKEN, **kw)


def run(server: FakeLava, n: int = 1, options: str = "", note=None):
    t = StubTarget(f"lava://{server.host}/qemu,http{options}")
    planned = [PlannedJob(i, t, recorded_invocations(), f"job {i}") for i in range(n)]
    return list(run_lava_jobs(planned, note=note)), t


def test_a_complete_job_gives_the_results_of_its_log(token):
    server = fake()
    try:
        (out,), _ = run(server)
    finally:
        server.close()
    assert out.error is None
    r0, r1 = out.results
    o0, o1 = r0.outputs()[0], r1.outputs()[0]
    assert o0.status == o1.status == "ok" and o0.unit == "ns/op" and len(o0.values) == 3
    assert "fault.anon.4k.P1.r0.c0.perf.data" in r0.files and "kallsyms" in r0.files
    assert r0.files["fault.anon.4k.P1.r0.c0.perf.data"].stat().st_size > 1000
    assert out.facts["arch"] == "x86_64" and out.facts["emulated"] and out.facts["lava_device"] == "qemu-01"
    assert out.labels == {"lava_job": 1, "lava_device": "qemu-01", "lava_device_type": "qemu",
                          "lava_server": server.host}
    # the measurements LAVA recorded (lava-test-case) are the medians of what kperfdiff read
    tests = {r["name"]: r for r in json.loads((DATA / "job-complete-tests.json").read_text())["body"]["results"]}
    for label, o in (("fault.anon.4k.P1.r0", o0), ("syscall.null.P1.r0", o1)):
        assert float(tests[label]["measurement"]) == pytest.approx(sorted(o.values)[1], rel=1e-5)
        assert tests[label]["unit"] == "ns/op"


def test_a_refused_token_is_one_sentence_that_never_shows_it(token):
    server = FakeLava("another-token")
    try:
        with pytest.raises(LavaAuthError) as e:
            run(server)
    finally:
        server.close()
    msg = str(e.value)
    assert "refused the token" in msg and "HTTP 403: Invalid token." in msg and TOKEN not in msg
    assert "\n" not in msg


def test_no_token_anywhere_is_one_sentence(monkeypatch, tmp_path):
    monkeypatch.delenv("KPERFDIFF_LAVA_TOKEN", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    server = fake()
    try:
        with pytest.raises(LavaAuthError, match="no token for the LAVA server .*KPERFDIFF_LAVA_TOKEN"):
            run(server)
    finally:
        server.close()
    assert server.requests == []


def test_a_job_queued_past_the_queue_timeout_is_canceled_and_fails(token):
    server = fake(scripts=[{"states": ["job-submitted"]}])
    notes = []
    try:
        (out,), _ = run(server, options=",queue_timeout=1", note=notes.append)
    finally:
        server.close()
    assert server.canceled == [1]
    assert out.error == "LAVA queue timeout after 1 s (job 1 was canceled)"
    assert all(r.error == out.error for r in out.results)
    assert out.results[0].outputs()[0].error == out.error
    assert any("still queued after 1 s" in n for n in notes)


def test_an_incomplete_job_fails_with_lavas_reason(token):
    server = fake(scripts=[{"states": ["job-submitted", "job-incomplete"], "log": "job-incomplete.log"}])
    try:
        (out,), _ = run(server)
    finally:
        server.close()
    assert out.error.startswith("LAVA job 1 on qemu-02 was incomplete: Invalid job data: ")
    assert "Unable to get 'http://127.0.0.1:9/nothing/vmlinuz'" in out.error
    assert out.facts is None and out.labels["lava_device"] == "qemu-02"


def test_a_canceled_job_fails_with_lavas_reason(token):
    server = fake(scripts=[{"states": ["job-submitted", "job-canceled"]}])
    try:
        (out,), _ = run(server)
    finally:
        server.close()
    assert out.error == "LAVA job 1 was canceled: LAVA gave no reason"


def test_a_complete_job_whose_frame_was_cut_fails_with_the_reason(token, tmp_path):
    lines = (DATA / "job-complete.log").read_text().splitlines(keepends=True)
    end = next(i for i, ln in enumerate(lines) if "KPD-TAR-END" in ln)
    cut = "".join(lines[:end - 5] + lines[end + 1:]).encode()
    server = fake(scripts=[{"states": COMPLETE, "log": cut}])
    try:
        (out,), _ = run(server)
    finally:
        server.close()
    assert out.error.startswith("LAVA job 1 on qemu-01 completed but the results frame in the log of LAVA job 1 "
                                "(from line ")
    assert "cut short" in out.error


def test_jobs_in_flight_stay_within_the_bound_and_match_one_at_a_time(token):
    server = fake(default={"states": ["job-submitted", "job-running", "job-running", "job-complete"],
                           "log": "job-complete.log"})
    try:
        parallel, _ = run(server, n=5, options=",jobs=2")
    finally:
        server.close()
    assert server.max_in_flight == 2 and len(server.definitions) == 5
    serial_server = fake()
    try:
        serial, _ = run(serial_server, n=5, options=",jobs=1")
    finally:
        serial_server.close()
    assert serial_server.max_in_flight == 1

    def values(outs):
        return sorted((o.key, tuple(tuple(r.outputs()[0].values) for r in o.results)) for o in outs)
    assert values(parallel) == values(serial) and len(parallel) == 5


def test_interrupting_cancels_the_jobs_in_flight(token):
    server = fake(default={"states": ["job-submitted", "job-running"]})
    seen = []

    def note(msg):        # Ctrl-C once the three jobs run
        seen.append(msg)
        if sum("running on" in m for m in seen) == 3:
            raise KeyboardInterrupt
    try:
        with pytest.raises(KeyboardInterrupt):
            run(server, n=3, options=",jobs=3", note=note)
    finally:
        server.close()
    assert sorted(server.canceled) == [1, 2, 3]


class RefusedTarget(StubTarget):
    def definition(self, invocations, *, name, metadata):
        return {}, "job_name: REFUSE\n"


def test_a_job_the_server_refuses_fails_with_its_reason_and_an_unreachable_server_is_one_sentence(token):
    server = fake()
    t = RefusedTarget(f"lava://{server.host}/qemu,http")
    try:
        (out,) = list(run_lava_jobs([PlannedJob(0, t, recorded_invocations(), "refused")]))
    finally:
        t.close()
        server.close()
    assert out.error == (f"LAVA refused the job: the LAVA server {server.host} refused the job submission: "
                         f"Problem with submitted job data: required key not provided @ data['visibility']")
    c = LavaClient("http://127.0.0.1:9", TOKEN, retries=())
    with pytest.raises(LavaError, match=r"^the LAVA server 127\.0\.0\.1:9 cannot be reached for job 4: "):
        c.job(4)


def test_the_token_comes_from_the_environment_then_kperfdiffs_file_then_lavacli(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("KPERFDIFF_LAVA_TOKEN", raising=False)
    assert find_token("lava.example.org")[0] is None
    (tmp_path / "lavacli.yaml").write_text(
        "default:\n  uri: https://lava.example.org/RPC2\n  username: me\n  token: from-lavacli\n"
        "other:\n  uri: https://me:from-uri@lab.example.com/RPC2\n")
    assert find_token("lava.example.org") == ("from-lavacli", str(tmp_path / "lavacli.yaml"))
    assert find_token("lab.example.com")[0] == "from-uri"
    assert find_token("lava.example.org", identity="other")[0] == "from-uri"
    with pytest.raises(KperfdiffError, match="has no lavacli identity 'nope'"):
        find_token("lava.example.org", identity="nope")
    (tmp_path / "kperfdiff").mkdir()
    (tmp_path / "kperfdiff" / "lava.toml").write_text('[servers."lava.example.org"]\ntoken = "from-kperfdiff"\n')
    assert find_token("lava.example.org")[0] == "from-kperfdiff"
    monkeypatch.setenv("MY_LAVA", "from-env")
    token, where = find_token("lava.example.org", env="MY_LAVA")
    assert (token, where) == ("from-env", "the environment variable MY_LAVA")
    assert repr(LavaClient("https://lava.example.org", token)) == "LavaClient('https://lava.example.org')"


def test_the_recorded_responses_are_lavas_own():
    """The fixtures are what lava-server 2023.01 answered (tests/data/lava/README), not inventions."""
    assert json.loads((DATA / "auth-invalid-token.json").read_text()) == {"status": 403,
                                                                          "body": {"detail": "Invalid token."}}
    job = json.loads((DATA / "job-complete.json").read_text())["body"]
    assert job["health"] == "Complete" and job["requested_device_type"] == "qemu" and job["token"] == "REDACTED"
    assert "kperfdiff" in job["definition"] and os.environ.get("KPERFDIFF_LAVA_TOKEN", "\0") not in job["definition"]
