"""kperfdiff.bench.swap: temporary swap is set up for real and always removed."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from kperfdiff.bench.swap import active_swap, temporary_swap
from kperfdiff.core.errors import BenchError

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="setting up swap needs root")
# swap and zram devices are the machine's: one test at a time of all those so marked (tests/conftest.py)
pytestmark = pytest.mark.machine_state


def zram_devices() -> set[str]:
    return {p.name for p in Path("/sys/block").glob("zram*")}


def test_active_swap_matches_proc_swaps():
    lines = Path("/proc/swaps").read_text().splitlines()[1:]
    assert active_swap() == [ln.split()[0] for ln in lines if ln.strip()]


@root_only
def test_temporary_swap_is_set_up_and_removed():
    if active_swap():
        pytest.skip("swap is already active; temporary_swap would do nothing")
    before = zram_devices()
    with temporary_swap(32) as name:
        assert name
        assert active_swap() == [name]
    assert active_swap() == []
    assert zram_devices() == before
    if not name.startswith("/dev/"):
        assert not os.path.exists(name)


@root_only
@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_temporary_swap_is_removed_when_the_body_raises(exc):
    if active_swap():
        pytest.skip("swap is already active")
    before = zram_devices()
    with pytest.raises(exc):
        with temporary_swap(32) as name:
            assert active_swap() == [name]
            raise exc("boom")
    assert active_swap() == []
    assert zram_devices() == before


@root_only
def test_temporary_swap_does_nothing_when_swap_is_active():
    if active_swap():
        with temporary_swap(32) as name:
            assert name is None
        return
    with temporary_swap(32) as outer:
        with temporary_swap(32) as inner:
            assert inner is None
            assert active_swap() == [outer]
        assert active_swap() == [outer]
    assert active_swap() == []


def test_temporary_swap_rejects_a_bad_size():
    with pytest.raises(BenchError):
        with temporary_swap(0):
            pass


@root_only
def test_swap_file_fallback_when_zram_is_unavailable(monkeypatch, tmp_path):
    if active_swap():
        pytest.skip("swap is already active")
    import kperfdiff.bench.swap as swap

    monkeypatch.setattr(swap, "ZRAM_CONTROL", tmp_path / "no-zram-control")
    with pytest.raises(ValueError):
        with temporary_swap(16) as name:
            assert not name.startswith("/dev/")
            assert os.path.isfile(name)
            assert active_swap() == [name]
            raise ValueError("boom")
    assert active_swap() == []
    assert not os.path.exists(name)
