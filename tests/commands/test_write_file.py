"""An output file (-o, --flamegraph, a report) is written whole through a temporary beside it; but a
path that is not a regular file (/dev/stdout, /dev/null, a FIFO) is written into, never replaced:
as root, replacing it would turn the machine's /dev/stdout or /dev/null into a regular file."""
import os

from kperfdiff.commands.common import write_file


def test_a_regular_file_is_written_whole(tmp_path):
    out = tmp_path / "r.txt"
    out.write_text("old")
    assert write_file(out, "new") == out
    assert out.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["r.txt"]


def test_a_fifo_is_written_into_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)    # a reader waits, so the writer's open returns
    try:
        write_file(fifo, "through the pipe")
        assert fifo.is_fifo()           # still the FIFO, not a regular file put in its place
        assert os.read(reader, 100) == b"through the pipe"
    finally:
        os.close(reader)
    assert not (tmp_path / "pipe.tmp").exists()


def test_a_link_to_a_device_stays_a_link(tmp_path):
    """`-o /dev/stdout` is a link to /proc/self/fd/1; here a link to /dev/null stands in for it."""
    link = tmp_path / "stdout"
    link.symlink_to("/dev/null")
    write_file(link, "discarded")
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    assert not (tmp_path / "stdout.tmp").exists()
