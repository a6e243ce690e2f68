"""Function name normalisation: one function is one row.

Compilers clone and split functions and give the pieces suffixed names:
GCC's interprocedural scalar replacement (``.isra.N``), constant
propagation (``.constprop.N``), partial inlining (``.part.N``), hot/cold
splitting (``.cold`` and ``.cold.N``) and LTO-private copies
(``.lto_priv.N``); Clang's ThinLTO promotion (``.llvm.<digits>``) and CFI
jump tables (``.cfi_jt``). The kernel's function padding and CFI
(``CONFIG_FUNCTION_PADDING_ALIGNMENT``, kCFI) add ``__pfx_`` and ``__cfi_``
symbols in front of functions, and ``__pi_`` names the position-independent
alias of a function (arm64 ``__pi_clear_page``, x86 ``__pi_memcpy``), which
perf may pick instead of the plain name. :func:`normalise` strips these, repeatedly,
so ``foo.constprop.0.isra.0`` and ``__pfx_foo`` both become ``foo``.
Everything else is kept verbatim: kernel symbol names may contain odd
characters, and a name is never lower-cased, trimmed of other dots, or
demangled.
"""
from __future__ import annotations

import re

# One clone suffix at the end of a name. Applied until nothing changes.
_SUFFIX = re.compile(
    r"(?:\.(?:isra|constprop|part|lto_priv|cold|localalias)\.\d+"
    r"|\.cold"
    r"|\.llvm\.\d+"
    r"|\.cfi_jt)$"
)
_PREFIXES = ("__pfx_", "__cfi_", "__pi_")

_cache: dict[str, str] = {}


def normalise(name: str) -> str:
    """The function a (possibly compiler-suffixed) symbol name belongs to.

    >>> normalise("foo.constprop.0.isra.0")
    'foo'
    >>> normalise("__pfx_handle_mm_fault")
    'handle_mm_fault'

    A name that would become empty is returned unchanged.
    """
    out = _cache.get(name)
    if out is not None:
        return out
    n = name
    for p in _PREFIXES:
        if n.startswith(p) and len(n) > len(p):
            n = n[len(p):]
            break
    while True:
        m = _SUFFIX.search(n)
        if not m or m.start() == 0:
            break
        n = n[:m.start()]
    if len(_cache) < 1_000_000:
        _cache[name] = n
    return n
