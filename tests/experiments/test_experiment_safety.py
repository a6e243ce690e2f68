"""An experiment file or a command line cannot hurt the machine: knobs are an allow-list with an
always-refused list, the benchmarks' environment cannot inject code, and every size is bounded
before anything is expanded (each probe answers in a sentence, fast)."""
import os
import stat

import pytest

from support import assert_one_sentence_error, run_cli
from kperfdiff.measure import knobs


def exp_file(tmp_path, variant="", top="", benches='["syscall.null"]'):
    p = tmp_path / "e.toml"
    p.write_text(f'name = "safe"\nbenchmarks = {benches}\n{top}\n[[variant]]\nlabel = "a"\n{variant}\n')
    return p


# dry runs name the machine's own sysctls (the one tests/experiments/test_experiment.py writes): one test at
# a time of all those so marked (tests/conftest.py)
pytestmark = pytest.mark.machine_state


def dry_run(path, *extra):
    return run_cli("run", path, "--dry-run", *extra, timeout=30)


@pytest.mark.parametrize("path, words", [
    ("/proc/sys/kernel/core_pattern", "run a program as root"),
    ("/proc/sys/kernel/modprobe", "runs that program as root"),
    ("/sys/fs/cgroup/cgroup.procs", "moves processes"),
    ("/sys/kernel/uevent_helper", "runs that program as root"),
    ("/proc/sys/fs/binfmt_misc/register", "registers interpreters"),
    ("/sys/fs/cgroup/../../proc/sys/kernel/core_pattern", "under /sys/ or /proc/sys/"),
    ("/sys/power/state", "powers off"),
    ("/sys/bus/pci/drivers/e1000/unbind", "drivers"),
    ("/etc/passwd", "under /sys/ or /proc/sys/"),
])
def test_dangerous_knob_refused_even_with_allow_knob(tmp_path, path, words):
    p = exp_file(tmp_path, f'knobs = {{ "{path}" = "|/tmp/x %p" }}')
    for extra in ((), ("--allow-knob", path)):
        r = dry_run(p, *extra)
        assert_one_sentence_error(r)
        assert r.returncode == 2 and words in r.stderr, r.stderr


def test_other_knob_needs_allow_knob(tmp_path):
    path = "/proc/sys/kernel/hostname"
    p = exp_file(tmp_path, f'knobs = {{ "{path}" = "x" }}')
    r = dry_run(p)
    assert_one_sentence_error(r)
    assert f"--allow-knob {path}" in r.stderr
    r = dry_run(p, "--allow-knob", path)
    assert r.returncode == 0 and "3 cells" in r.stdout, r.stderr


@pytest.mark.parametrize("path", [
    "/sys/kernel/mm/transparent_hugepage/enabled",
    "/sys/kernel/mm/transparent_hugepage/khugepaged/defrag",
    "/proc/sys/vm/stat_interval",
    "/proc/sys/kernel/numa_balancing",
    "/proc/sys/kernel/printk",
    "/proc/sys/kernel/sched_autogroup_enabled",
    "/sys/devices/system/cpu/cpufreq/policy0/scaling_governor",
    "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
])
def test_performance_knobs_are_allowed(tmp_path, path):
    r = dry_run(exp_file(tmp_path, f'knobs = {{ "{path}" = "1" }}'))
    assert r.returncode == 0, r.stderr


def test_symlink_is_checked_where_it_leads():
    # /sys/dev/block/* are links into /sys/devices: the resolved path is checked as well
    links = [e for e in os.scandir("/sys/class/net") if e.is_symlink()] if os.path.isdir("/sys/class/net") else []
    if not links:
        pytest.skip("no /sys/class/net links here")
    uevent = os.path.join(links[0].path, "uevent")
    assert "never set" in knobs.check_knob_path(uevent)


@pytest.mark.parametrize("var", ["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PATH", "BASH_ENV", "GCONV_PATH"])
def test_code_injecting_env_refused(tmp_path, var):
    r = dry_run(exp_file(tmp_path, f'env = {{ {var} = "/tmp/evil.so" }}'))
    assert_one_sentence_error(r)
    assert f"env key {var!r} is never set" in r.stderr


def test_harmless_env_accepted(tmp_path):
    r = dry_run(exp_file(tmp_path, 'env = { MALLOC_ARENA_MAX = "1", GLIBC_TUNABLES = "glibc.malloc.tcache_count=0" }'))
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("variant, words", [
    ('knobs = { "/proc/sys/vm/stat_interval\\u0000x" = "1" }', "NUL"),
    ('knobs = { "/proc/sys/vm/stat_interval" = "1\\u0000" }', "NUL"),
    ('env = { MALLOC_ARENA_MAX = "1\\u0000" }', "NUL"),
    ('knobs = { "/proc/sys/vm/stat\\ninterval" = "1" }', "line break"),
    ('cpus = "0-99999999999"', "is not a CPU list"),
    ('cpus = "0-9999"', "no machine has more than 8192 CPUs"),
    ('cpus = "3-1"', "runs backwards"),
])
def test_bad_variant_fields(tmp_path, variant, words):
    r = dry_run(exp_file(tmp_path, variant))
    assert_one_sentence_error(r)
    assert words in r.stderr, r.stderr


@pytest.mark.parametrize("top, benches, words", [
    ("reps = 1000000000", '["syscall.null"]', "whole number from 1 to 1000"),
    ("cores = [99999999]", '["syscall.null"]', "copy counts from 1 to 1024"),
    ("timeout = nan", '["syscall.null"]', "number above 0"),
    ("min_batch_ms = 1e308", '["syscall.null"]', "number above 0"),
    ("intervals = 100000000", '["syscall.null"]', "whole number from 1 to"),
    ("profile_freq = 99999999", '["syscall.null"]', "whole number from 1 to"),
    ("", '["gups.{pages:>99999999}"]', "malformed {placeholder}"),
    ("", '["gups.{pages!r}"]', "malformed {placeholder}"),
    ("reps = 1000\ncores = [" + ",".join(str(i) for i in range(1, 61)) + "]", '["syscall.*"]', "cells"),
])
def test_unbounded_file_requests_refused_fast(tmp_path, top, benches, words):
    r = dry_run(exp_file(tmp_path, 'vars = { pages = "4k" }', top=top, benches=benches))
    assert_one_sentence_error(r)
    assert r.returncode == 2 and words in r.stderr, r.stderr


@pytest.mark.parametrize("args, words", [
    (["-P", "1-100000000000"], "core counts run from 1 to 1024"),
    (["-P", "99999999999999999999"], "core counts run from 1 to 1024"),
    (["-P", "4-2"], "from low to high"),
    (["-P", ",".join(["1"] * 65)], "more than 64 core counts"),
    (["--timeout", "nan"], "not a number above 0"),
    (["--timeout", "inf"], "not a number above 0"),
    (["--min-batch-ms", "nan"], "not a number above 0"),
    (["--min-batch-ms", "1e308"], "not a number above 0"),
    (["--reps", "99999999999999999999"], "whole number from 1 to 1000"),
    (["--param", "syscall.null:nosuch=1"], "syscall.null has no parameter 'nosuch'"),
    (["--param", "syscall.null:x=\x01" + "y" * 5000], "longer than 4096"),
])
def test_unbounded_or_unknown_flags_refused(args, words):
    r = run_cli("bench", "--only", "syscall.null", *args, timeout=30)
    assert_one_sentence_error(r)
    assert r.returncode == 2 and words in r.stderr, r.stderr


def test_program_parameter_must_be_trusted(tmp_path):
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)                      # anyone may replace what is in it
    prog = loose / "hello"
    prog.write_text("#!/bin/sh\nexit 0\n")
    prog.chmod(0o755)
    r = run_cli("bench", "--only", "proc.exec", "--param", f"proc.exec:hello={prog}", timeout=30)
    assert_one_sentence_error(r)
    assert "can be changed by users other than root" in r.stderr
    r = run_cli("bench", "--only", "proc.exec", "--param", "proc.exec:hello=true", timeout=30)
    assert_one_sentence_error(r)
    assert "must be an absolute path" in r.stderr


def test_unknown_param_key_in_experiment_refused(tmp_path):
    r = dry_run(exp_file(tmp_path, top='params = { "syscall.null:nosuch" = 1 }'))
    assert_one_sentence_error(r)
    assert "params key 'syscall.null:nosuch'" in r.stderr


def test_knob_tables_are_consistent():
    """No default-allowed knob is also always refused (the refusal would win silently)."""
    for pattern, _ in knobs.PERFORMANCE_KNOBS:
        example = pattern.replace("**", "x").replace("*", "x")
        why = knobs.check_knob_path(example)
        assert why is None, f"{pattern}: {why}"
    assert knobs.check_knob_path("/proc/sys/vm/panic_on_oom").startswith("is never set")


def test_damaged_pending_file_is_a_sentence(tmp_path, private_state_dir):
    private_state_dir.mkdir()
    (private_state_dir / "pending-knobs.json").write_text("{not json")
    r = run_cli("bench", "--list", timeout=30)
    assert r.returncode == 0 and "pending-knobs.json is damaged" in r.stderr
    r = dry_run(exp_file(tmp_path))          # a dry run changes nothing, so it does not need it
    assert r.returncode == 0


def test_pending_file_is_not_world_writable(private_state_dir):
    pr = knobs.PendingRestores(private_state_dir)
    pr.remember("/proc/sys/vm/stat_interval", "1")
    try:
        assert not stat.S_IMODE(os.stat(pr.file).st_mode) & 0o022
        assert [e.path for e in pr.entries()] == ["/proc/sys/vm/stat_interval"]
    finally:
        pr.forget("/proc/sys/vm/stat_interval")
    assert not pr.file.exists()
