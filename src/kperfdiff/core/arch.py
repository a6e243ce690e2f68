"""Architecture names: one spelling per architecture, whatever uname, ELF or perf.data said."""
from __future__ import annotations

ARCH_NAMES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64",
              "armv7l": "arm", "arm": "arm", "riscv64": "riscv64", "ppc64le": "powerpc", "s390x": "s390"}


def normalise_arch(name: str | None) -> str | None:
    if not name:
        return None
    return ARCH_NAMES.get(name.strip().lower(), name.strip().lower())
