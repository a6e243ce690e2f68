"""QEMU guest targets: real boots of Debian kernels under TCG.

Kernel, busybox and perf packages are fetched once with apt into the
kperfdiff cache; a rerun downloads nothing. Skipped when QEMU is missing.
"""
from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from kperfdiff.bench import catalogue
from kperfdiff.measure.session import BenchOptions
from kperfdiff.core.errors import BenchError, InputError, UsageError
from kperfdiff.targets import Invocation, open_target, run_benchmarks
from kperfdiff.targets import base, boot, qemu
from kperfdiff.targets.guest import elf
from kperfdiff.targets.guest.initramfs import modules_needed
from kperfdiff.targets.qemu import QemuTarget, parse_spec, resolve_kernel

HAVE_ARM = shutil.which("qemu-system-aarch64") is not None
HAVE_X86 = shutil.which("qemu-system-x86_64") is not None
HAVE_APT = shutil.which("apt-get") is not None and shutil.which("dpkg-deb") is not None
need_arm = pytest.mark.skipif(not (HAVE_ARM and HAVE_APT and shutil.which("aarch64-linux-gnu-gcc")),
                              reason="qemu-system-aarch64, apt or the aarch64 cross compiler is not installed "
                                     "(Debian qemu-system-arm, gcc-aarch64-linux-gnu)")
need_x86 = pytest.mark.skipif(not (HAVE_X86 and HAVE_APT), reason="qemu-system-x86_64 or apt is not installed "
                                                                  "(Debian qemu-system-x86)")


# -- no boot -----------------------------------------------------------------------

def test_parse_spec():
    s = parse_spec("qemu:arm64,kernel=6.1.0-56,mem=4G,cpus=4,deterministic")
    assert (s.arch, s.kernel, s.mem, s.cpus, s.deterministic) == ("arm64", "6.1.0-56", "4G", 4, True)
    assert parse_spec("qemu:amd64").arch == "x86_64"
    assert parse_spec("qemu:x86_64,kernel=/boot/vmlinuz,modules=/lib/modules/x").modules == "/lib/modules/x"
    assert parse_spec("qemu:arm64,boot_timeout=300").boot_timeout == 300
    for bad in ("qemu:mips", "qemu:arm64,mem=lots", "qemu:arm64,colour=red", "qemu:x86_64,deterministic,cpus=2",
                "qemu:arm64,boot_timeout=0", "qemu:arm64,timeout=nan", "qemu:arm64,boot_timeout=soon"):
        with pytest.raises(UsageError):
            parse_spec(bad)
    with pytest.raises(UsageError):
        open_target("vmware:arm64")
    with open_target("local") as t:
        assert t.kind == "local"


def test_job_script_quotes_every_word(tmp_path):
    nasty = "a b'c;d\"e $(x)"
    inv = Invocation(["kpd-syscall", "syscall.null", f"x={nasty}"], 2, 10, profile=nasty)
    text = base.job_script([inv], "/k p/bin", f"/o;ut/{nasty}", perf=["/usr/bin/perf"])
    for ln in text.splitlines():
        if ln.startswith("#") or not ln.strip():
            continue
        words = shlex.split(ln)
        assert not any(w in (";", "&&", "|") for w in words), ln
    assert shlex.quote(f"x={nasty}") in text


def test_module_plt_veneers_get_a_symbol_of_their_own(tmp_path, monkeypatch):
    # arm64 modules reach the kernel through PLT veneers after their last function; kallsyms does not
    # list them, so without a symbol their samples went to that function (zram's cleanup_module: 3.5%).
    import bisect
    from kperfdiff.core.nativecore import core
    sysmod = tmp_path / "module"
    (sysmod / "zram/sections").mkdir(parents=True)
    (sysmod / "zram/sections/.plt").write_text("0xffff800001003e70\n")
    (sysmod / "virtio/sections").mkdir(parents=True)          # a module without veneers (x86 has none)
    monkeypatch.setattr(base, "SYS_MODULE", str(sysmod))
    inv = Invocation(["true"], profile="p")
    text = base.job_script([inv], "/b", str(tmp_path / "out"), perf=["true"])
    line = next(ln for ln in text.splitlines() if ln.startswith("for f in") and base.MODULE_PLT in ln)
    (tmp_path / "out").mkdir()
    (tmp_path / "out/kallsyms").write_text("ffff800001000000 t zram_submit_bio\t[zram]\n"
                                           "ffff800001003e54 t cleanup_module\t[zram]\n"
                                           "ffff800001010000 t lzo_compress\t[lzo]\n")
    subprocess.run(["sh", "-c", line], check=True, timeout=10)
    ks = (tmp_path / "out/kallsyms").read_text()
    assert ks.endswith("ffff800001003e70 t module_plt_veneers\t[zram]\n"), ks
    m = core().symbol_map(ks.encode())             # the reader's parser takes the line
    assert m["bad"] == 0 and m["names"][-1] == "module_plt_veneers"
    order = sorted(range(len(m["addrs"])), key=lambda i: m["addrs"][i])
    addrs = [m["addrs"][i] for i in order]
    covering = [m["names"][order[bisect.bisect_right(addrs, a) - 1]] for a in (0xffff800001003e58, 0xffff800001003f00)]
    assert covering == ["cleanup_module", "module_plt_veneers"]
    # this machine's own snapshot (record.snapshot_kallsyms) marks them the same way
    from kperfdiff.targets.perf_record import module_plt_lines
    assert module_plt_lines(sysmod) == "ffff800001003e70 t module_plt_veneers\t[zram]\n"
    assert line in base.kallsyms_commands(str(tmp_path / "out"))


def test_each_boot_keeps_its_own_kallsyms(tmp_path):
    # Modules load at other addresses in every boot: profiles of a later boot read with the first
    # boot's kallsyms put zram's functions on a data symbol (__key.34 took 6% of the page-out loop).
    from kperfdiff import targets
    boots = []
    for i, addr in enumerate(("ffff800001000000", "ffff800001000000", "ffff800009000000")):
        f = tmp_path / f"boot{i}"
        f.write_text(f"{addr} t zram_submit_bio\t[zram]\nffff800010000000 T _text\n")
        boots.append(targets._keep_kallsyms(f, tmp_path / "run"))
    assert boots[0] == boots[1] == tmp_path / "run/kallsyms"
    assert boots[2] != boots[0] and "ffff800009000000" in boots[2].read_text()
    assert "ffff800001000000" in boots[0].read_text()


@pytest.mark.parametrize("source, waits", [("tsc-early", True), ("tsc", False)])
def test_job_waits_for_the_boot_clocksource_to_be_replaced(tmp_path, monkeypatch, source, waits):
    # A guest that measured on "tsc-early" would time across the switch to "tsc".
    cs = tmp_path / "current_clocksource"
    cs.write_text(source + "\n")
    monkeypatch.setitem(base.FACT_FILES, "clocksource", str(cs))
    monkeypatch.setattr(base, "EARLY_CLOCKSOURCE_WAIT", 2)
    script = tmp_path / "job.sh"
    script.write_text(base.job_script([], str(tmp_path / "bin"), str(tmp_path / "out")))
    t0 = time.monotonic()
    subprocess.run(["sh", str(script)], check=True, timeout=30)
    took = time.monotonic() - t0
    assert (took >= 2) == waits, took
    assert (tmp_path / "out" / "facts" / "clocksource").read_text().strip() == source
    assert (tmp_path / "out" / "complete").exists()


def test_elf_and_modinfo_reader():
    e = elf.read(Path("/bin/sh").resolve())
    assert e.machine in ("x86_64", "aarch64") and e.needed


# -- Debian kernels (downloads once) ----------------------------------------------------

@need_arm
def test_missing_kernel_package_is_one_clear_error():
    with pytest.raises(InputError, match="no Debian cloud kernel package for arm64 matches kernel=9.9.9-99"):
        resolve_kernel(parse_spec("qemu:arm64,kernel=9.9.9-99"))
    with pytest.raises(InputError, match="does not exist"):
        resolve_kernel(parse_spec("qemu:arm64,kernel=/nonexistent/vmlinuz"))


@need_arm
def test_virtio_modules_in_dependency_order():
    k = resolve_kernel(parse_spec("qemu:arm64"))
    order, missing = modules_needed(k.modules, ["virtio_pci", "virtio_blk"])
    names = [n for n, _ in order]
    assert not missing and "virtio_blk" in names
    for name, path in order:
        deps = elf.modinfo(elf.decompress_module(path)).get("depends", "")
        for d in filter(None, deps.split(",")):
            assert names.index(d) < names.index(name)


def test_the_private_apt_configuration_lists_the_neighbouring_releases():
    from kperfdiff.targets.guest.debian import neighbour_releases, with_neighbours
    assert neighbour_releases("bookworm") == ["bullseye", "trixie"]
    assert neighbour_releases("unknown") == []
    host = [{"uri": "http://deb.debian.org/debian", "suites": ["bookworm", "bookworm-updates"],
             "components": ["main"], "signed_by": ""},
            {"uri": "http://example/other", "suites": ["nodistro"], "components": ["main"], "signed_by": ""}]
    suites = [e["suites"] for e in with_neighbours(host, "bookworm")]
    assert suites == [["bookworm", "bookworm-updates"], ["nodistro"], ["bullseye", "bullseye-updates"],
                      ["trixie", "trixie-updates"]]


def test_the_neighbouring_releases_are_listed_only_once_a_kernel_needs_them(tmp_path):
    from kperfdiff.targets.guest.debian import Apt, _host_codename, host_debian_sources
    if _host_codename() != "bookworm" or not host_debian_sources():
        pytest.skip("the host is not Debian bookworm with its archive configured")
    apt = Apt("arm64", root=tmp_path)
    apt._write_config()
    sources = tmp_path / "arm64/etc/sources.list.d/kperfdiff.sources"
    assert "bookworm" in sources.read_text() and "trixie" not in sources.read_text()
    (tmp_path / "arm64/lists/.updated").touch()
    (tmp_path / "arm64/neighbours").touch()          # what list_neighbours() leaves behind
    apt._write_config()
    assert "trixie" in sources.read_text() and "bullseye" in sources.read_text()
    assert not (tmp_path / "arm64/lists/.updated").exists()     # so the next use fetches their lists
    assert "Pin: release n=trixie\nPin-Priority: 100" in (tmp_path / "arm64/etc/preferences.d/"
                                                          "kperfdiff-neighbours.pref").read_text()


@need_arm
def test_a_kernel_series_takes_the_newest_of_any_release_and_defaults_stay_the_hosts():
    from kperfdiff.targets.guest.debian import Apt, _host_codename
    if _host_codename() != "bookworm":
        pytest.skip("the host is not Debian bookworm, whose neighbour trixie has 6.12")
    k = resolve_kernel(parse_spec("qemu:arm64,kernel=6.12"))
    assert k.release.startswith("6.12.") and k.modules is not None and list(k.modules.rglob("virtio_blk.ko*"))
    assert resolve_kernel(parse_spec("qemu:arm64")).release.startswith("6.1.")
    assert Apt("arm64").candidate("busybox-static").split(":")[-1].startswith("1.35.")


# -- boots ---------------------------------------------------------------------------

@need_arm
def test_arm64_guest_runs_a_benchmark_from_a_kernel_image_path():
    k = resolve_kernel(parse_spec("qemu:arm64"))
    t = open_target(f"qemu:arm64,kernel={k.image},modules={k.modules},mem=1G,cpus=2")
    try:
        t0 = time.monotonic()
        opts = BenchOptions(reps=1, intervals=3, tiny=True)
        (m,) = run_benchmarks(t, [(catalogue.get("proc.fork"), 1)], opts)
        elapsed = time.monotonic() - t0
        assert m.status == "ok", m.reason
        assert len(m.raw) == 3 and m.unit == "ns/op"
        f = m.facts
        assert f["arch"] == "arm64" and f["emulated"] is True and f["virtualisation"] == "tcg"
        assert f["kernel_release"] == k.release and f["cpus"] == 2
        assert m.monitors.get("vmstat.pgfault", 0) > 0
        assert t.last_boot.init_s is not None and elapsed < 120
    finally:
        t.close()


@need_x86
def test_x86_64_guest_runs_a_benchmark_from_a_debian_package():
    t = QemuTarget("qemu:x86_64,mem=1G,cpus=2,kvm=off")
    try:
        opts = BenchOptions(reps=2, intervals=3, tiny=True)
        (m,) = run_benchmarks(t, [(catalogue.get("syscall.null"), 1)], opts)
        assert m.status == "ok", m.reason
        assert len(m.raw) == 6
        f = m.facts
        assert f["arch"] == "x86_64" and f["emulated"] is True and f["clocksource"] == "tsc"
        assert f["kernel_source"].startswith("debian:linux-image-")
    finally:
        t.close()


@need_arm
def test_a_kernel_panic_is_one_clear_error():
    t = QemuTarget("qemu:arm64,mem=512M,append=rdinit=/nonexistent,timeout=120")
    try:
        with pytest.raises(BenchError, match=r"guest kernel panicked: VFS: Unable to mount root fs"):
            t.run_job([Invocation(["kpd-syscall", "syscall.null"], 1, 10)])
    finally:
        t.close()


@need_arm
def test_a_hung_guest_is_one_clear_error():
    # busybox sh as init waits forever on a console that never speaks. The limit is short: what is
    # checked is that the guest is stopped at it with one clear error, wherever its boot had got to.
    t = QemuTarget("qemu:arm64,mem=512M,append=rdinit=/bin/sh,timeout=6")
    try:
        t0 = time.monotonic()
        with pytest.raises(BenchError, match=r"did not finish within 6 s \(stopped before reaching /init"):
            t.run_job([Invocation(["kpd-syscall", "syscall.null"], 1, 10)])
        assert time.monotonic() - t0 < 60
    finally:
        t.close()


@need_arm
def test_a_guest_silent_before_init_is_booted_once_more_with_the_kernels_messages(capfd):
    # rdinit=/bin/sh: no /init line ever. Past boot_timeout (below the job's timeout) the guest is
    # booted again, this time with the kernel's messages on the console, and the error quotes its last.
    t = QemuTarget("qemu:arm64,mem=512M,append=rdinit=/bin/sh,timeout=60,boot_timeout=5")
    try:
        t0 = time.monotonic()
        with pytest.raises(BenchError, match=r"did not reach /init within 5 s, twice .*last console line: '\S"):
            t.run_job([Invocation(["kpd-syscall", "syscall.null"], 1, 10)])
        assert time.monotonic() - t0 < 40
        assert "booting it once more, with the kernel's messages" in capfd.readouterr().err
        assert len(t.boot_retries) == 1
    finally:
        t.close()


@need_arm
def test_a_retried_boot_runs_the_job_and_the_facts_say_so(monkeypatch):
    t = QemuTarget("qemu:arm64,mem=512M")
    real = t._run_console
    calls = []

    def stall_first(argv, timeout, boot_timeout=None):
        calls.append(boot_timeout)
        if len(calls) == 1:
            raise qemu.BootStalled("")
        return real(argv, timeout, boot_timeout)
    monkeypatch.setattr(t, "_run_console", stall_first)
    try:
        (r,) = t.run_job([Invocation(["kpd-syscall", "syscall.null", "--intervals", "2"], 1, 30)])
        assert [o.status for o in r.outputs()] == ["ok"]
        assert calls == [qemu.BOOT_TIMEOUT_S] * 2
        facts = t.facts()
        assert facts["boot_retries"].startswith("1: a boot did not reach /init within 150 s")
        # the second boot showed the kernel's messages (its own /proc/cmdline says so)
        assert "loglevel=7" in facts["cmdline"] and "quiet" not in facts["cmdline"].split()
    finally:
        t.close()


@need_arm
def test_a_failing_benchmark_in_the_guest_is_a_failed_result_not_a_crash():
    t = QemuTarget("qemu:arm64,mem=512M")
    try:
        r1, r2 = t.run_job([Invocation(["kpd-syscall", "syscall.nosuch"], 1, 10),
                            Invocation(["kpd-syscall", "syscall.null", "--intervals", "2"], 2, 30)])
        assert r1.outputs()[0].status == "failed"
        assert [o.status for o in r2.outputs()] == ["ok", "ok"]
    finally:
        t.close()


@need_arm
@pytest.mark.slow
def test_arm64_profile_and_boot_timing(tmp_path):
    t = QemuTarget("qemu:arm64,mem=1G")
    try:
        opts = BenchOptions(reps=1, intervals=3, tiny=True, profile=True)
        (m,) = run_benchmarks(t, [(catalogue.get("proc.fork"), 1)], opts)
        assert m.status == "ok", m.reason
        (rep, copy, pd), = m.profiles
        assert Path(pd).stat().st_size > 0 and Path(m.kallsyms).stat().st_size > 100000
        res = boot.measure_boots(t, ["1G", "2G"], boots=2)
        assert {r.benchmark for r in res} == {b.name for b in boot.BOOT_BENCHMARKS}
        for r in res:
            assert r.status == "ok", r.reason
            assert len(r.raw) == 2 and r.facts["emulated"] is True
        init = next(r for r in res if r.benchmark == "boot.initcalls")
        assert init.extra["initcalls"] and init.extra["initcalls"][0][1] > 0
    finally:
        t.close()


# -- swap and a disk-backed directory in guests ---------------------------------------

def _cpio_names(path: Path) -> dict[str, bytes]:
    """name -> data of a newc archive (the initramfs pieces)."""
    out, data, i = {}, path.read_bytes(), 0
    while i + 110 <= len(data) and data[i:i + 6] == b"070701":
        size, nsize = int(data[i + 54:i + 62], 16), int(data[i + 94:i + 102], 16)
        name = data[i + 110:i + 110 + nsize - 1].decode()
        j = (i + 110 + nsize + 3) & ~3
        out[name] = data[j:j + size]
        i = (j + size + 3) & ~3
        if name == "TRAILER!!!":
            i = len(data) if i >= len(data) else i
    return out


def test_job_script_sets_up_zram_swap_only_when_asked():
    inv = [Invocation(["kpd-pageout", "pageout.anon"], 1, 30.0)]
    assert "zram" not in base.job_script(inv, "/b", "/o")
    s = base.job_script(inv, "/b", "/o", swap_mb=64)
    assert "hot_add" in s and "mkswap" in s and "swapon" in s and "echo 64M > " in s
    # set up before the facts are read (so swap_active says it) and removed when the script exits
    assert s.index("kpd_swap_up >") < s.index("cat /proc/swaps >") and "trap 'kpd_swap_down' EXIT" in s
    f = base.facts_from_files({"swaps": "Filename Type\n/dev/zram1 partition 65532 0 100\n",
                               "swap_setup": "zram /dev/zram1 lz4\n"}, emulated=True, virtualisation="tcg")
    assert f["swap_active"] is True and f["swap_setup"] == "zram /dev/zram1 lz4"


def test_a_failed_swap_set_up_is_the_skip_reason():
    from kperfdiff.targets import unmet_on_target
    b = catalogue.get("pageout.anon")
    assert "allow_swap_setup" in unmet_on_target(b, {"swap_active": False})
    assert "zram is not available" in unmet_on_target(b, {"swap_active": False,
                                                          "swap_setup": "zram is not available (no ...)"})
    assert unmet_on_target(b, {"swap_active": True}) is None


@pytest.mark.parametrize("spec", ["qemu:arm64", "qemu:arm64,kernel=6.12", "qemu:x86_64",
                                  # slow: the only fast test that would fetch x86_64's neighbour lists and 6.12
                                  pytest.param("qemu:x86_64,kernel=6.12", marks=pytest.mark.slow)])
def test_the_initramfs_has_zram_and_the_disk_modules_when_the_job_asks(spec):
    if not HAVE_APT:
        pytest.skip("apt is not installed")
    from kperfdiff.targets.guest.initramfs import modules_piece
    from kperfdiff.targets.qemu import DISK_MODULES, SWAP_MODULES
    t = QemuTarget(spec)
    try:
        k = t.kernel
    except (BenchError, InputError) as e:
        pytest.skip(f"the kernel package cannot be fetched here: {e}")
    finally:
        t.close()
    piece, names, missing = modules_piece(k)
    assert "zram" not in names and "kpd/modules.early" not in _cpio_names(piece)
    piece, names, missing = modules_piece(k, SWAP_MODULES + DISK_MODULES)
    files = _cpio_names(piece)
    early = files["kpd/modules.early"].decode().split()
    # zram (a module in Debian's kernels) and its allocator, in dependency order, before the job
    assert "zram" in early and "zsmalloc" in early and early.index("zsmalloc") < early.index("zram")
    assert "virtio_blk" in early and "kpd/modules/zram.ko" in files
    assert files["kpd/modules/zram.ko"][:4] == b"\x7fELF"        # .ko.xz decompressed on the host
    # the compressor each kernel defaults to: lzo-rle (a crypto module on 6.1; built in on 6.12,
    # whose zram has its own lz4 backend as a dependency)
    assert "lzo_rle" in early or "lzo_rle" not in missing
    assert "zram" not in missing and "ext4" not in missing


def test_run_benchmarks_asks_the_target_for_swap_and_a_disk_dir(tmp_path):
    class Fake(base.Target):
        kind = "fake"

        def __init__(self):
            self.jobs = []
            self.asked_disk = False

        def prepare(self, families=None, profile=False):
            pass

        def disk_dir(self):
            self.asked_disk = True
            return "/kpd/disk"

        def run_job(self, invocations):
            self.jobs.append((self.swap_mb, [list(i.argv) for i in invocations]))
            return [base.InvocationResult(i, error="not run") for i in invocations]

        def facts(self):
            return {"swap_active": True, "cpus": 2}

    t = Fake()
    cells = [(catalogue.get("pageout.anon"), 1), (catalogue.get("pageout.file"), 1)]
    run_benchmarks(t, cells, BenchOptions(reps=1, intervals=3, tiny=True, allow_swap_setup=True))
    swap_mb, argvs = t.jobs[-1]
    assert swap_mb == base.SWAP_MB and t.asked_disk
    assert "dir=/kpd/disk" in argvs[1] and not any(w.startswith("dir=") for w in argvs[0])
    run_benchmarks(t, cells[:1], BenchOptions(reps=1, intervals=3, tiny=True))
    assert t.jobs[-1][0] is None        # not allowed: no swap set up


@need_arm
@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["", ",kernel=6.12"])
def test_the_study_loop_pages_out_to_zram_in_an_arm64_guest(kernel):
    """pageout.anon (the batched TLB shootdown study's loop) with the guest's own zram swap, and
    pageout.file on the guest's ext4 disk: both ok, the kernel really swapped and wrote back."""
    t = QemuTarget(f"qemu:arm64{kernel},mem=1G")
    try:
        opts = BenchOptions(reps=1, intervals=3, tiny=True, allow_swap_setup=True)
        anon, file = run_benchmarks(t, [(catalogue.get("pageout.anon"), 1), (catalogue.get("pageout.file"), 1)], opts)
        assert anon.status == "ok", anon.reason
        assert anon.facts["swap_active"] is True and anon.facts["swap_setup"].startswith("zram /dev/zram")
        assert anon.monitors.get("vmstat.pswpout", 0) > 0 and anon.monitors.get("vmstat.pswpin", 0) > 0
        assert file.status == "ok", file.reason
        assert file.params["dir"] == "/kpd/disk" and file.monitors.get("vmstat.pgmajfault", 0) > 0
        assert any("KPD-DISK /dev/vd" in ln for _, ln in t.last_boot.lines)
        # without allow_swap_setup the guest has no swap and says how to get it
        (m,) = run_benchmarks(t, [(catalogue.get("pageout.anon"), 1)], BenchOptions(reps=1, intervals=3, tiny=True))
        assert m.status == "skipped" and "allow_swap_setup" in m.reason and m.facts["swap_active"] is False
    finally:
        t.close()


def test_files_are_fetched_from_a_jobs_results_and_never_from_outside_them(tmp_path):
    """Guests and LAVA jobs hand their files over through the folder their results were unpacked
    into: a name the job gave (/kpd/out/x or x) is found there, and a name that climbs out of it
    (or its sibling with the same prefix), a missing file or no finished job is one sentence."""
    out = tmp_path / "out"
    (out / "kpd" / "out").mkdir(parents=True)
    (out / "kpd" / "out" / "perf.data").write_bytes(b"PERFILE2")
    (tmp_path / "out-other").mkdir()
    (tmp_path / "out-other" / "secret").write_text("x")
    got = base.copy_from_results(out, ["/kpd/out/perf.data"], tmp_path / "dest", where="the guest")
    assert got == [tmp_path / "dest" / "perf.data"] and got[0].read_bytes() == b"PERFILE2"
    for bad in ("../out-other/secret", "/kpd/out/missing", "/kpd/out"):
        with pytest.raises(BenchError, match=f"the guest left no file '{bad}' in its results"):
            base.copy_from_results(out, [bad], tmp_path / "dest", where="the guest")
    with pytest.raises(BenchError, match="nothing to fetch: no job has finished yet"):
        base.copy_from_results(None, ["x"], tmp_path / "dest", where="the LAVA job")
