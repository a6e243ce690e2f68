"""Cross-architecture equivalence: functions that do the same job under
different names on different architectures, grouped into named roles.

The table is data (``equivalence.toml`` next to this module); users add
their own with ``--map FILE`` in the same format. See the comment at the
top of ``equivalence.toml`` for the format and the merge rule.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kperfdiff.core.errors import InputError
from kperfdiff.core.files import read_toml
from kperfdiff.symbols.normalise import normalise

SHIPPED = Path(__file__).with_name("equivalence.toml")
_RESERVED = {"name", "note", "description"}
_RULE_KEYS = {"name", "note", "prefixes", "suffixes", "becomes", "only"}
_MAX_RULE_TEXT = 200      # a prefix, suffix or name in a rule (kernel symbols are shorter)


@dataclass(frozen=True)
class Rule:
    """A generic renaming applied before matching: a name that starts with one of ``prefixes``
    (or ends with one of ``suffixes``) loses it and gains ``becomes`` in front; when ``only`` is
    given, the rule applies only if the result is one of those names. Plain string operations,
    never regular expressions, so a user's map cannot make matching slow."""

    name: str
    prefixes: tuple[str, ...] = ()
    suffixes: tuple[str, ...] = ()
    becomes: str = ""
    only: frozenset = frozenset()
    note: str = ""

    def apply(self, fn: str) -> str | None:
        """The renamed ``fn``, or None when the rule does not apply to it."""
        if fn.startswith(self.prefixes):      # (one test of all of them first: most names have none)
            for p in self.prefixes:
                if fn.startswith(p) and len(fn) > len(p):
                    return self._result(self.becomes + fn[len(p):])
        if fn.endswith(self.suffixes):
            for s in self.suffixes:
                if fn.endswith(s) and len(fn) > len(s):
                    return self._result(self.becomes + fn[:-len(s)])
        return None

    def _result(self, out: str) -> str | None:
        return out if not self.only or out in self.only else None


@dataclass
class RoleTable:
    """Role name -> member names, and member name -> role name."""

    roles: dict[str, set[str]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    by_member: dict[str, str] = field(default_factory=dict)
    # Frames that flame graphs skip so cross-architecture paths merge ([dispatch]).
    dispatch: set[str] = field(default_factory=set)
    rules: list[Rule] = field(default_factory=list)
    _renamed: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)

    def rename(self, name: str) -> tuple[str, tuple[str, ...]]:
        """``name`` (already compiler-normalised) after every rule, in table order, and the rules
        that changed it: ``__x64_sys_clone`` -> (``sys_clone``, ("syscall wrapper",))."""
        hit = self._renamed.get(name)
        if hit is not None:
            return hit
        out, used = name, []
        for r in self.rules:
            new = r.apply(out)
            if new is not None and new != out:
                out = new
                used.append(r.name)
        hit = (out, tuple(used))
        if len(self._renamed) < 1_000_000:
            self._renamed[name] = hit
        return hit

    def canonical(self, name: str) -> str:
        return self.rename(name)[0]

    def role_of(self, name: str) -> str | None:
        """The role of a (compiler-normalised) name, after the rules."""
        return self.by_member.get(self.canonical(name))

    def add(self, role: str, members, note: str = "") -> None:
        self.roles.setdefault(role, set())
        if note:
            self.notes[role] = note
        for m in members:
            m = self.canonical(normalise(m))
            old = self.by_member.get(m)
            if old is not None and old != role:
                self.roles[old].discard(m)
            self.by_member[m] = role
            self.roles[role].add(m)


def _names(value, what: str, path: Path) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(x, str) and 0 < len(x) <= _MAX_RULE_TEXT for x in value):
        raise InputError(f"equivalence map {path}: {what} must be a list of names of 1 to {_MAX_RULE_TEXT} characters")
    return tuple(value)


def _read_rules(data: dict, path: Path) -> list[Rule]:
    rules = data.get("rule", [])
    if not isinstance(rules, list):
        raise InputError(f"equivalence map {path}: rules are [[rule]] tables")
    out = []
    for i, r in enumerate(rules, 1):
        name = r.get("name") if isinstance(r, dict) else None
        if not isinstance(name, str) or not name.strip():
            raise InputError(f"rule {i} in equivalence map {path} has no name")
        unknown = sorted(set(r) - _RULE_KEYS)
        if unknown:
            raise InputError(f"rule {name!r} in equivalence map {path}: unknown key {unknown[0]!r} "
                             f"(known: {', '.join(sorted(_RULE_KEYS))})")
        prefixes = _names(r.get("prefixes", []), f"rule {name!r} prefixes", path)
        suffixes = _names(r.get("suffixes", []), f"rule {name!r} suffixes", path)
        if not prefixes and not suffixes:
            raise InputError(f"rule {name!r} in equivalence map {path} has neither prefixes nor suffixes")
        becomes = r.get("becomes", "")
        if not isinstance(becomes, str) or len(becomes) > _MAX_RULE_TEXT:
            raise InputError(f"rule {name!r} in equivalence map {path}: becomes must be a short string")
        note = r.get("note", "")
        out.append(Rule(name=name.strip(), prefixes=prefixes, suffixes=suffixes, becomes=becomes,
                        only=frozenset(_names(r.get("only", []), f"rule {name!r} only", path)) if r.get("only")
                        else frozenset(), note=note if isinstance(note, str) else ""))
    return out


def _read(path: Path) -> tuple[list[tuple[str, list[str], str]], list[str], list[Rule]]:
    data = read_toml(path, "equivalence map")
    dispatch: list[str] = []
    d = data.get("dispatch", {})
    if not isinstance(d, dict):
        raise InputError(f"equivalence map {path}: [dispatch] must be a table of lists of function names")
    for k, v in d.items():
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise InputError(f"equivalence map {path}: dispatch.{k} must be a list of function names")
        dispatch.extend(v)
    rules = _read_rules(data, path)
    roles = data.get("role", [] if dispatch or rules else None)
    if not isinstance(roles, list):
        raise InputError(f"equivalence map {path} has no [[role]] tables; see the shipped equivalence.toml for the format")
    out = []
    for i, r in enumerate(roles, 1):
        name = r.get("name") if isinstance(r, dict) else None
        if not isinstance(name, str) or not name.strip():
            raise InputError(f"role {i} in equivalence map {path} has no name")
        members: list[str] = []
        for k, v in r.items():
            if k in _RESERVED:
                continue
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise InputError(f"role {name!r} in equivalence map {path}: {k} must be a list of function names")
            members.extend(v)
        note = r.get("note", "")
        out.append((name.strip(), members, note if isinstance(note, str) else ""))
    return out, dispatch, rules


def load_roles(maps=(), shipped: bool = True) -> RoleTable:
    """The shipped table (unless ``shipped`` is false) with each user map merged over it, in order."""
    table = RoleTable()
    paths = ([SHIPPED] if shipped else []) + [Path(p) for p in maps]
    read = [_read(p) for p in paths]
    # Rules first (every file's, in order), so role members are matched by their renamed names.
    for _, _, rules in read:
        table.rules.extend(rules)
    for roles, dispatch, _ in read:
        for name, members, note in roles:
            table.add(name, members, note)
        table.dispatch.update(table.canonical(normalise(x)) for x in dispatch)
    return table
