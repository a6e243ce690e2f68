"""Process names (comm) of perf.data samples, as perf script names them: the reader's opt-in
``by_process`` fills ``Profile.process_stacks`` from COMM and FORK records (exec, prctl rename,
a fork's inherited name, ``:TID`` for a thread the file never names)."""
from __future__ import annotations

import shutil
import struct
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from kperfdiff.ingest import perfdata
import support

DATA = support.DATA / "perfdata"
COMM = DATA / "comm" / "comm.perf.data"   # sh running seq, a subshell, perl renaming itself, dd (README.md)
# perf script -F comm on COMM, counted (perf 6.1 here; the test below asks perf again when it is installed)
COMM_SAMPLES = {"sh": 41, "renamed": 35, "dd": 25, "seq": 20, "perl": 1}
DD_TID = 15782

needs_perf = pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")


def by_comm(prof) -> Counter:
    out = Counter()
    for (comm, _), (_, n) in prof.process_stacks.items():
        out[comm] += n
    return out


def perf_script_comms(path: Path) -> Counter:
    p = subprocess.run(["perf", "script", "-i", str(path), "-F", "comm"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return Counter(ln.strip() for ln in p.stdout.splitlines() if ln.strip())


def records(b: bytes):
    """(offset, type, size) of each record of a perf.data's data section."""
    off, size = struct.unpack_from("<QQ", b, 40)
    pos = off
    while pos + 8 <= off + size:
        ty, _, sz = struct.unpack_from("<IHH", b, pos)
        if sz < 8:
            return
        yield pos, ty, sz
        pos += sz


def edited(tmp_path: Path, name: str, edit) -> Path:
    b = bytearray(COMM.read_bytes())
    for pos, ty, sz in list(records(b)):
        edit(b, pos, ty, sz)
    out = tmp_path / name
    out.write_bytes(bytes(b))
    return out


def test_the_default_read_names_no_processes():
    """The default path (the tracked ingest speed) does no per-process work."""
    p = perfdata.load(COMM)
    assert p.process_stacks == {} and p.samples == sum(COMM_SAMPLES.values())


def test_each_sample_is_named_by_its_threads_comm():
    p = perfdata.load(COMM, by_process=True)
    # exec (seq, perl, dd), a fork's inherited name (the subshell is sh), a prctl rename (renamed)
    assert by_comm(p) == COMM_SAMPLES
    # every sample in one process's share of its stack: the shares add up to the stacks
    w, n = Counter(), Counter()
    for (_, st), (pw, pn) in p.process_stacks.items():
        w[st] += pw
        n[st] += pn
    assert set(w) == set(p.stacks)
    assert all(w[st] == pytest.approx(p.stacks[st]) and n[st] == p.stack_counts[st] for st in p.stacks)
    # the rest of the profile is the default read's
    d = perfdata.load(COMM)
    assert d.stacks == p.stacks and d.stack_counts == p.stack_counts and d.total_weight == p.total_weight


@needs_perf
def test_comms_agree_with_perf_script():
    assert perf_script_comms(COMM) == COMM_SAMPLES


def test_a_thread_never_named_is_colon_tid(tmp_path):
    """dd's FORK and COMM records moved to another tid: perf names its samples ':15782'."""
    def edit(b, pos, ty, sz):
        if ty == 3 and struct.unpack_from("<ii", b, pos + 8)[1] == DD_TID:     # COMM: pid, tid
            struct.pack_into("<ii", b, pos + 8, 888888, 888888)
        if ty == 7 and struct.unpack_from("<iiii", b, pos + 8)[2] == DD_TID:   # FORK: pid, ppid, tid, ptid
            struct.pack_into("<i", b, pos + 8, 888888)
            struct.pack_into("<i", b, pos + 16, 888888)
    path = edited(tmp_path, "unnamed.perf.data", edit)
    want = {**COMM_SAMPLES, f":{DD_TID}": COMM_SAMPLES["dd"]}
    del want["dd"]
    assert by_comm(perfdata.load(path, by_process=True)) == want
    if shutil.which("perf"):
        assert perf_script_comms(path) == want


@pytest.mark.parametrize("name, fill", [
    ("no-nul", b"x"),            # no terminator: the name runs on into the sample id trailer
    ("non-utf8", b"\xff\xfe"),
    ("control", b"a\nb"),
])
def test_hostile_comm_names_are_read_safely(tmp_path, name, fill):
    """perl's rename rewritten in its COMM record's 8 name bytes (the record's time, after them, is
    kept so it stays in order): read without error, one process for it, printable (no line breaks
    to break folded stacks), at most 256 bytes (longer names: the Rust tests of comms.rs)."""
    def edit(b, pos, ty, sz):
        if ty == 3 and bytes(b[pos + 16:pos + 24]).startswith(b"renamed"):
            b[pos + 16:pos + 24] = (fill * 8)[:8]
    path = edited(tmp_path, f"{name}.perf.data", edit)
    p = perfdata.load(path, by_process=True)
    got = by_comm(p)
    assert sum(got.values()) == p.samples == sum(COMM_SAMPLES.values())
    assert "renamed" not in got and got["sh"] == COMM_SAMPLES["sh"]
    (odd,) = set(got) - set(COMM_SAMPLES)
    assert got[odd] == COMM_SAMPLES["renamed"]
    assert odd.isprintable() and len(odd.encode()) <= 256
    if fill != b"x":
        assert "\ufffd" in odd


def test_group_and_compressed_files_by_process():
    for ev in ("cpu-clock", "task-clock"):
        p = perfdata.load(DATA / "group.perf.data", event=ev, by_process=True)
        assert by_comm(p) == {"dd": p.samples}
    p = perfdata.load(DATA / "compressed" / "tiny.z.perf.data", by_process=True)
    assert by_comm(p) == {"dd": p.samples} and p.samples > 0
