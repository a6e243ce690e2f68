"""The worker protocol: parsing, timeouts, crashes, synchronised copies."""
import stat
import textwrap

from kperfdiff.bench import worker

GOOD = """kpd 1 x.y
unit ns/op lower
overhead 1.5
interval 10.5 100 1050
interval 11 100 1100
info thp 0
end 200 1000 2000
"""


def test_parse_good():
    o = worker.parse_output(GOOD, "x.y")
    assert o.status == "ok"
    assert o.values == [10.5, 11.0]
    assert o.intervals[0] == (10.5, 100, 1050)
    assert o.overhead == 1.5 and o.info == {"thp": "0"}
    assert (o.ops, o.cpu_user_ns, o.cpu_sys_ns) == (200, 1000, 2000)


def test_parse_bad_shapes():
    assert worker.parse_output("", "x").error == "the worker printed no kpd header"
    assert "unknown protocol" in worker.parse_output("kpd 9 x\n").error
    assert "end record" in worker.parse_output(GOOD.replace("end 200 1000 2000\n", ""), "x.y").error
    assert "malformed" in worker.parse_output(GOOD.replace("interval 11", "interval eleven"), "x.y").error
    assert "malformed" in worker.parse_output(GOOD.replace("interval 11", "interval nan"), "x.y").error
    assert "answered for" in worker.parse_output(GOOD, "other").error
    assert "no interval" in worker.parse_output("kpd 1 x.y\nunit ns/op lower\nend 0 0 0\n", "x.y").error
    sk = worker.parse_output("kpd 1 x.y\nskip no swap\n", "x.y")
    assert sk.status == "skipped" and sk.skip == "no swap"


def _script(tmp_path, body: str):
    p = tmp_path / "w.sh"
    p.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return p


def test_timeout_kills_whole_group(tmp_path):
    w = _script(tmp_path, """
        echo "kpd 1 $1"
        sleep 100 &
        echo $! > "%s"
        sleep 100
    """ % (tmp_path / "child.pid"))
    outs = worker.run_copies([str(w), "b.c"], 1, timeout=1.0)
    assert outs[0].status == "failed" and "timed out" in outs[0].error
    child = int((tmp_path / "child.pid").read_text())
    # the background grandchild was in the worker's process group: gone too
    assert _gone_within(child, 5.0)


def _gone_within(pid: int, seconds: float) -> bool:
    import time
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_crash_reports_signal(tmp_path):
    w = _script(tmp_path, 'echo "kpd 1 $1"; kill -SEGV $$\n')
    o = worker.run_copies([str(w), "b.c"], 1, timeout=10)[0]
    assert o.status == "failed" and "SIGSEGV" in o.error


def test_nonzero_exit_names_status(tmp_path):
    w = _script(tmp_path, 'echo "kpd 1 $1"; echo oops >&2; exit 3\n')
    o = worker.run_copies([str(w), "b.c"], 1, timeout=10)[0]
    assert o.status == "failed" and "status 3" in o.error and "oops" in o.error


def test_copies_start_together(tmp_path):
    # each copy records when it was released; all must be released after all were ready
    w = _script(tmp_path, """
        echo "kpd 1 $1"
        echo "unit ns/op lower"
        sleep 0.$(( $$ %% 5 ))
        date +%%s%%N >> "%s"
        echo ready
        head -c 1 >/dev/null
        date +%%s%%N >> "%s"
        echo "interval 1 1 1"
        echo "end 1 0 0"
    """ % (tmp_path / "ready", tmp_path / "go"))
    outs = worker.run_copies([str(w), "b.c"], 3, timeout=20)
    assert [o.status for o in outs] == ["ok"] * 3
    ready = [int(x) for x in (tmp_path / "ready").read_text().split()]
    go = [int(x) for x in (tmp_path / "go").read_text().split()]
    assert len(ready) == len(go) == 3
    assert min(go) >= max(ready)
