"""Cross-architecture equivalence: functions that do the same job under
different names on different architectures, grouped into named roles.

The table is data (``equivalence.toml`` next to this module); users add
their own with ``--map FILE`` in the same format. See the comment at the
top of ``equivalence.toml`` for the format and the merge rule.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError
from ..files import read_toml
from .normalise import normalise

SHIPPED = Path(__file__).with_name("equivalence.toml")
_RESERVED = {"name", "note", "description"}


@dataclass
class RoleTable:
    """Role name -> member names, and member name -> role name."""

    roles: dict[str, set[str]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    by_member: dict[str, str] = field(default_factory=dict)
    # Frames that flame graphs skip so cross-architecture paths merge ([dispatch]).
    dispatch: set[str] = field(default_factory=set)

    def role_of(self, name: str) -> str | None:
        return self.by_member.get(name)

    def add(self, role: str, members, note: str = "") -> None:
        self.roles.setdefault(role, set())
        if note:
            self.notes[role] = note
        for m in members:
            m = normalise(m)
            old = self.by_member.get(m)
            if old is not None and old != role:
                self.roles[old].discard(m)
            self.by_member[m] = role
            self.roles[role].add(m)


def _read(path: Path) -> tuple[list[tuple[str, list[str], str]], list[str]]:
    data = read_toml(path, "equivalence map")
    dispatch: list[str] = []
    d = data.get("dispatch", {})
    if not isinstance(d, dict):
        raise InputError(f"equivalence map {path}: [dispatch] must be a table of lists of function names")
    for k, v in d.items():
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise InputError(f"equivalence map {path}: dispatch.{k} must be a list of function names")
        dispatch.extend(v)
    roles = data.get("role", [] if dispatch else None)
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
    return out, dispatch


def load_roles(maps=(), shipped: bool = True) -> RoleTable:
    """The shipped table (unless ``shipped`` is false) with each user map merged over it, in order."""
    table = RoleTable()
    paths = ([SHIPPED] if shipped else []) + [Path(p) for p in maps]
    for p in paths:
        roles, dispatch = _read(p)
        for name, members, note in roles:
            table.add(name, members, note)
        table.dispatch.update(normalise(x) for x in dispatch)
    return table
