"""The native core (Rust, in native/, built by maturin into ``kperfdiff.native``): kperfdiff's
one reader of perf.data, ELF and kallsyms/System.map. :func:`core` returns it, or says in one
sentence that the build is missing or stale."""
from __future__ import annotations

from kperfdiff.core.errors import InputError

try:
    from kperfdiff import native as _module
    _problem = None
except ImportError as e:  # a broken install: every command but these readers still works
    _module, _problem = None, f"is not built ({e})"

NEEDED = ("read_perf_data", "elf_info", "elf_functions", "symbol_map", "SymbolShare")


def available():
    """The native core, or None when it is missing or stale (for what can go on without it)."""
    return _module if _problem is None and all(hasattr(_module, f) for f in NEEDED) else None


def core():
    if _problem:
        raise InputError(f"kperfdiff's native core {_problem}; run `make setup`")
    if available() is None:
        raise InputError("kperfdiff's native core is out of date; run `make setup` to rebuild it")
    return _module
