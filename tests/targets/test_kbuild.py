"""Kernel builds for the QEMU guests (targets/kbuild.py).

The fast tests drive build_kernel through a stand-in tree: a Makefile with the targets kbuild
runs (allnoconfig, olddefconfig, bzImage/Image, kernelrelease) and a merge_config.sh that
concatenates its fragments, with stand-in compilers on PATH; they check the order of the
fragments, what reaches the caller's folder, the incremental flag and the error sentences,
without building a kernel. The real build and boot of Debian's linux-source-6.1 is the slow test
of tests/targets/test_kbuild_bisect.py (make test-bisect).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kperfdiff.core.errors import BenchError, InputError, UsageError
from kperfdiff.targets import kbuild

MAKEFILE = """\
IMG_x86_64 := arch/x86/boot/bzImage
IMG_arm64 := arch/arm64/boot/Image
allnoconfig:
\t@printf '# CONFIG_SMP is not set\\nCONFIG_FROM_ALLNO=y\\n' > .config
\t@echo allnoconfig >> calls
olddefconfig:
\t@grep -v '^CONFIG_NEEDS_MISSING_DEPENDENCY' .config > .config.new; mv .config.new .config
\t@echo olddefconfig >> calls
bzImage Image:
\t@if grep -q '^CONFIG_BREAK_THE_BUILD=y' .config; then \\
\t  echo '  CC      kernel/fork.o'; echo 'kernel/fork.c:2600:9: error: expected ; before } token'; \\
\t  echo 'make[2]: *** [scripts/Makefile.build:250: kernel/fork.o] Error 1'; exit 2; fi
\t@mkdir -p $(dir $(IMG_$(ARCH)))
\t@echo "image for $(ARCH) $(CROSS_COMPILE)" > $(IMG_$(ARCH))
\t@echo elf > vmlinux; echo 'ffffffff81000000 T _text' > System.map
\t@echo "build $@" >> calls
kernelrelease:
\t@echo 6.1.192-gfake
"""
MERGE = """#!/bin/sh
# stand-in for scripts/kconfig/merge_config.sh -m -O DIR BASE FRAGMENT...: BASE then each fragment,
# the last value of an option winning (as kbuild.read_fragment reads it)
while [ "${1#-}" != "$1" ]; do case "$1" in -O) shift 2;; *) shift;; esac; done
base=$1; shift
cat "$base" "$@" > "$base.merged" && mv "$base.merged" "$base"
echo "merge $*" >> calls
"""


@pytest.fixture
def tree(tmp_path):
    t = tmp_path / "linux"
    (t / "scripts/kconfig").mkdir(parents=True)
    (t / "Makefile").write_text(MAKEFILE)
    (t / "Kconfig").write_text("")
    m = t / "scripts/kconfig/merge_config.sh"
    m.write_text(MERGE)
    m.chmod(0o755)
    return t


@pytest.fixture
def tools(tmp_path, monkeypatch):
    """Stand-ins for the compilers and generators a kernel build checks for, first on PATH."""
    d = tmp_path / "bin"
    d.mkdir()
    for name in ("bc", "flex", "bison", "perl", "gcc", "aarch64-linux-gnu-gcc"):
        p = d / name
        p.write_text("#!/bin/sh\ncat >/dev/null 2>&1; exit 0\n")
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{d}:{os.environ['PATH']}")
    return d


def test_fragments_merge_in_order_and_the_outputs_reach_the_callers_folder(tree, tools, tmp_path):
    user = tmp_path / "mine.config"
    user.write_text("CONFIG_PREEMPT=y\n# CONFIG_PERF_EVENTS is not set\nCONFIG_NEEDS_MISSING_DEPENDENCY=y\n")
    said = []
    out = tmp_path / "probe-1"
    k = kbuild.build_kernel(tree, "x86_64", fragment=user, jobs=2, progress=said.append, out=out)
    calls = (tree / "calls").read_text().splitlines()
    common, x86 = kbuild.guest_fragments("x86_64")
    assert calls == ["allnoconfig", f"merge {common} {x86} {user}", "olddefconfig", "build bzImage"]
    config = kbuild.read_fragment((tree / ".config").read_text())
    assert config["CONFIG_VIRTIO_BLK"] == "y" and config["CONFIG_SERIAL_8250_CONSOLE"] == "y"
    assert config["CONFIG_PERF_EVENTS"] == "n", "the user's fragment comes last and wins"
    assert config["CONFIG_PREEMPT"] == "y" and config["CONFIG_FROM_ALLNO"] == "y"
    assert any("CONFIG_NEEDS_MISSING_DEPENDENCY=y (unset)" in s for s in said), said
    assert (k.image, k.vmlinux, k.system_map, k.config) == (out / "bzImage", out / "vmlinux", out / "System.map",
                                                            out / ".config")
    assert k.image.read_text() == "image for x86_64 \n" and k.image_bytes == k.image.stat().st_size
    assert k.release == "6.1.192-gfake" and not k.incremental and k.seconds > 0
    assert said[-1].startswith("built x86_64 kernel 6.1.192-gfake in ") and "bzImage 0.0 MB" in said[-1]

    # the same configuration again: only olddefconfig (the commit's own Kconfig), an incremental build
    (tree / "calls").unlink()
    again = kbuild.build_kernel(tree, "x86_64", fragment=user, jobs=2)
    assert (tree / "calls").read_text().splitlines() == ["olddefconfig", "build bzImage"]
    assert again.incremental and again.image == tree / "arch/x86/boot/bzImage"
    # another fragment: the configuration is made again (make rebuilds what it changes)
    (tree / "calls").unlink()
    user.write_text("CONFIG_PREEMPT_NONE=y\n")
    assert kbuild.build_kernel(tree, "x86_64", fragment=user).incremental
    assert (tree / "calls").read_text().splitlines()[0] == "allnoconfig"


def test_arm64_is_cross_compiled_into_an_Image(tree, tools, tmp_path):
    k = kbuild.build_kernel(tree, "aarch64")
    assert k.arch == "arm64" and k.image == tree / "arch/arm64/boot/Image"
    assert k.image.read_text() == "image for arm64 aarch64-linux-gnu-\n"
    merged = (tree / "calls").read_text().splitlines()[1]
    assert merged.endswith("kconfig-arm64")
    assert "CONFIG_SERIAL_AMBA_PL011_CONSOLE" in kbuild.merged_wishes(kbuild.guest_fragments("arm64"))


def test_a_failed_build_is_one_sentence_with_the_error_and_the_log(tree, tools, tmp_path):
    bad = tmp_path / "bad.config"
    bad.write_text("CONFIG_BREAK_THE_BUILD=y\n")
    with pytest.raises(BenchError) as e:
        kbuild.build_kernel(tree, "x86_64", fragment=bad)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"the x86_64 kernel build failed in {tree}")
    assert "kernel/fork.c:2600:9: error: expected ; before } token" in msg
    assert msg.endswith(f"the whole log is {tree / kbuild.LOG}")
    assert "kernel/fork.c:2600:9: error" in (tree / kbuild.LOG).read_text()


@pytest.mark.parametrize("case", ["missing", "no-kconfig", "a-file"])
def test_a_folder_that_is_no_kernel_tree_is_refused(tree, tools, case):
    if case == "missing":
        path = tree.parent / "nowhere"
        want = f"the kernel tree {path} is not a folder"
    elif case == "a-file":
        path = tree / "Makefile"
        want = f"the kernel tree {path} is not a folder"
    else:
        (tree / "Kconfig").unlink()
        path = tree
        want = f"{tree} is not a Linux kernel tree (it needs a Makefile, a Kconfig and scripts/kconfig/merge_config.sh)"
    with pytest.raises(InputError) as e:
        kbuild.build_kernel(path, "x86_64")
    assert str(e.value) == want


def test_bad_arguments_are_one_sentence(tree, tools, tmp_path):
    with pytest.raises(UsageError, match="kperfdiff builds kernels for x86_64 and arm64 guests, not 'riscv64'"):
        kbuild.build_kernel(tree, "riscv64")
    with pytest.raises(InputError, match=r"the configuration fragment .*nope does not exist"):
        kbuild.build_kernel(tree, "x86_64", fragment=tmp_path / "nope")
    junk = tmp_path / "junk"
    junk.write_text("PREEMPT=y\n")
    with pytest.raises(InputError, match="sets no CONFIG_ option"):
        kbuild.build_kernel(tree, "x86_64", fragment=junk)


def test_missing_build_tools_are_named_with_their_packages(tree, tmp_path, monkeypatch):
    only_make = tmp_path / "only-make"
    only_make.mkdir()
    make = next(Path(d) / "make" for d in os.environ["PATH"].split(":") if (Path(d) / "make").is_file())
    (only_make / "make").symlink_to(make)
    monkeypatch.setenv("PATH", str(only_make))
    with pytest.raises(BenchError) as e:
        kbuild.build_kernel(tree, "arm64")
    assert str(e.value) == ("building an arm64 kernel needs bc (bc), flex (flex), bison (bison), perl (perl-base), "
                            "aarch64-linux-gnu-gcc (gcc-aarch64-linux-gnu): install them (make test-bisect's "
                            "set-up does)")


def test_dropped_options_are_those_the_final_config_does_not_hold():
    cfg = "CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C=m\nCONFIG_S=\"x\"\n"
    wishes = {"CONFIG_A": "y", "CONFIG_B": "n", "CONFIG_C": "y", "CONFIG_D": "y", "CONFIG_E": "n",
              "CONFIG_S": "\"x\""}
    assert kbuild.dropped(cfg, wishes) == ["CONFIG_C=y (m)", "CONFIG_D=y (unset)"]


def test_a_built_kernels_system_map_is_kept_with_its_profiles(tmp_path):
    from kperfdiff.bench.measurement import Measurement
    from kperfdiff.targets import _keep_profiles
    from kperfdiff.targets.qemu import QemuTarget
    built = tmp_path / "probe-3"
    built.mkdir()
    (built / "bzImage").write_bytes(b"MZ")
    (built / "System.map").write_text("ffffffff81000000 T _text\n")
    t = QemuTarget(f"qemu:x86_64,kernel={built / 'bzImage'}")
    try:
        assert t.symbol_files() == {"System.map": built / "System.map"}
        pd = tmp_path / "proc.fork.P1.r0.c0.perf.data"
        pd.write_bytes(b"PERFILE2")
        m = Measurement("ok", "proc.fork", "ns/op", "lower", profiles=[(0, 0, str(pd))])
        _keep_profiles(m, tmp_path / "run-1", {}, t.symbol_files())
        assert (tmp_path / "run-1/System.map").read_text() == "ffffffff81000000 T _text\n"
        (built / "System.map").unlink()
        assert t.symbol_files() == {}
    finally:
        t.close()


def test_missing_libelf_headers_are_named_for_x86_64(tree, tools):
    # the stand-in gcc finds no <gelf.h>: objtool, which x86_64 builds run, could not be built
    (tools / "gcc").write_text("#!/bin/sh\ncat >/dev/null; echo 'fatal error: gelf.h: No such file' >&2; exit 1\n")
    with pytest.raises(BenchError, match=r"^building an x86_64 kernel needs libelf's headers, for objtool "
                                         r"\(libelf-dev\): install them"):
        kbuild.build_kernel(tree, "x86_64")
    assert kbuild.build_kernel(tree, "arm64").arch == "arm64", "an arm64 build runs no objtool"
