"""The SSH target against a real sshd (Debian's openssh-server) on a loopback port.

The test starts its own sshd with a temporary host key, authorized_keys and
configuration, and connects with a temporary client key: nothing of the
machine's own ssh set-up is used or changed.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from kperfdiff.bench import catalogue
from kperfdiff.measure.session import BenchOptions
from kperfdiff.core.errors import BenchError, UsageError
from kperfdiff.targets import Invocation, open_target, run_benchmarks
from kperfdiff.targets.ssh import SshTarget, parse_spec

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
NASTY = "we ird 'q\"uote; touch pwned $(touch pwned2) `x`"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    if SSHD is None or shutil.which("ssh-keygen") is None:
        pytest.skip("openssh-server is not installed (Debian package openssh-server)")
    d = tmp_path_factory.mktemp("sshd")
    os.chmod(d, 0o700)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "host_key")], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "client_key")], check=True)
    shutil.copy(d / "client_key.pub", d / "authorized_keys")
    os.chmod(d / "authorized_keys", 0o600)
    port = _free_port()
    Path("/run/sshd").mkdir(exist_ok=True)
    cfg = d / "sshd_config"
    cfg.write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {d / 'host_key'}",
        f"AuthorizedKeysFile {d / 'authorized_keys'}", f"PidFile {d / 'sshd.pid'}",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "PubkeyAuthentication yes",
        "PermitRootLogin prohibit-password", "StrictModes no", "UsePAM no", "MaxStartups 50",
        "MaxSessions 50", "Subsystem sftp internal-sftp", ""]))
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(cfg)], stdout=subprocess.DEVNULL,
                            stderr=open(d / "sshd.log", "wb"))
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if proc.poll() is not None:
                pytest.skip(f"sshd could not start: {(d / 'sshd.log').read_text()[-300:]}")
            time.sleep(0.05)
    user = os.environ.get("USER") or "root"
    import pwd
    user = pwd.getpwuid(os.getuid()).pw_name
    opts = ["-o", f"UserKnownHostsFile={d / 'known_hosts'}", "-o", "StrictHostKeyChecking=no"]
    yield {"spec": f"ssh://{user}@127.0.0.1:{port},identity={d / 'client_key'}", "opts": opts, "dir": d,
           "port": port, "user": user}
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_parse_spec():
    a = parse_spec("ssh://pi@board.local:2222,identity=~/.ssh/id,dir=/var/tmp")
    assert a == {"user": "pi", "host": "board.local", "port": 2222, "identity": "~/.ssh/id", "dir": "/var/tmp"}
    assert parse_spec("ssh://host")["user"] is None
    with pytest.raises(UsageError):
        parse_spec("ssh://user@host:port")
    with pytest.raises(UsageError):
        parse_spec("ssh://host,colour=blue")
    t = open_target("ssh://root@127.0.0.1:1")
    assert isinstance(t, SshTarget)
    t.close()


def test_runs_a_benchmark_remotely_and_cleans_up(sshd):
    t = SshTarget(sshd["spec"], ssh_options=sshd["opts"])
    try:
        opts = BenchOptions(reps=2, intervals=3, tiny=True, min_batch_ns=1_000_000)
        b = catalogue.get("syscall.null")
        (m,) = run_benchmarks(t, [(b, 2)], opts)
        assert m.status == "ok", m.reason
        assert {r[0] for r in m.raw} == {0, 1} and {r[1] for r in m.raw} == {0, 1}
        assert len(m.raw) == 2 * 2 * 3
        assert m.unit == "ns/op" and m.summary["n"] == 12
        assert m.facts["emulated"] is False and m.facts["arch"] in ("x86_64", "arm64")
        assert m.monitors  # vmstat/interrupts deltas came back
        remote = t.remote_dir
        assert t.remote(["test", "-d", remote], check=False).returncode == 0
    finally:
        t.close()
    # the remote temp folder is gone
    t2 = SshTarget(sshd["spec"], ssh_options=sshd["opts"])
    try:
        assert t2.remote(["test", "-e", remote], check=False).returncode != 0
    finally:
        t2.close()


def test_profile_comes_back(sshd, tmp_path):
    if shutil.which("perf") is None:
        pytest.skip("perf is not installed here (Debian linux-perf)")
    t = SshTarget(sshd["spec"], ssh_options=sshd["opts"])
    try:
        r = t.run_job([Invocation(["kpd-syscall", "syscall.null", "--intervals", "3", "--min-batch-ns", "1000000"],
                                  1, 60, profile="null")])[0]
        out = r.outputs()[0]
        assert out.status == "ok", (out.error, r.stderr)
        assert "null.c0.perf.data" in r.files and r.files["null.c0.perf.data"].stat().st_size > 0
        assert "kallsyms" in r.files
    finally:
        t.close()


def test_names_with_spaces_quotes_and_semicolons_are_never_interpreted(sshd, tmp_path):
    base = sshd["dir"] / NASTY
    base.mkdir()
    spec = sshd["spec"] + f",dir={base}"
    t = SshTarget(spec, ssh_options=sshd["opts"])
    cwd_markers = [Path.home() / "pwned", Path.home() / "pwned2", base / "pwned", Path("/pwned")]
    try:
        # the remote folder, the profile name and an argument all carry the nasty text
        res = t.run_job([Invocation(["kpd-syscall", "syscall.null", "--intervals", "2", "--min-batch-ns", "1000000"],
                                    1, 60, label=NASTY),
                         Invocation(["kpd-hello", NASTY], 1, 30)])
        assert res[0].outputs()[0].status == "ok", res[0].outputs()[0].error
        assert res[1].exit_status == [0]
        assert t.remote_dir.startswith(str(base))
        # a file whose name has the same characters is written and fetched back intact
        name = f"{NASTY}.txt"
        t.remote(["sh", "-c", 'printf "%s" "$1" > "$2"', "sh", NASTY, f"{t.remote_dir}/{name}"])
        (got,) = t.fetch([name], tmp_path / "fetched")
        assert got.name == name and got.read_text() == NASTY
        with pytest.raises(Exception):
            t.fetch([f"{NASTY}-missing; echo hi"], tmp_path / "f2")
    finally:
        t.close()
    assert not any(p.exists() for p in cwd_markers)
    assert list(base.iterdir()) == []  # cleaned up, nothing created by injection


def test_unreachable_board_is_one_clear_error():
    t = SshTarget(f"ssh://nobody@127.0.0.1:{_free_port()}", ssh_options=["-o", "ConnectTimeout=3"])
    try:
        with pytest.raises(BenchError, match="ssh to 127.0.0.1 failed"):
            t.prepare(["syscall"])
    finally:
        t.close()
