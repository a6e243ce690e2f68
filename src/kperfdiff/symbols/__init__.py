"""Symbol names: compiler-suffix normalisation (:mod:`.normalise`) and the
cross-architecture equivalence table (:mod:`.equivalence`, data in
``equivalence.toml``)."""
from kperfdiff.symbols.normalise import normalise

__all__ = ["normalise"]
