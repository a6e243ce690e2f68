"""`kperfdiff system`: what a tune changed and could not change, and the state of each setting."""
from __future__ import annotations

from kperfdiff.render.table import Table, to_json, to_text


def tune_lines(steps: list[tuple[str, str, bool, bool]], cpus: list[int]) -> str:
    """One line per setting: (what, detail, changed, possible)."""
    out = [f"kperfdiff: tuned for benchmarks on CPUs {','.join(map(str, cpus))} (kperfdiff system reset undoes it)"]
    for what, detail, changed, possible in steps:
        tag = "changed" if changed else ("unchanged" if possible else "not tunable")
        out.append(f"  {tag:11} {what}: {detail}")
    return "\n".join(out) + "\n"


def state(rows: list[tuple[str, str, str]], fmt: str = "text", tuned: dict | None = None) -> str:
    if fmt == "json":
        return to_json({"version": 1, "tuned": tuned,
                        "settings": [{"setting": s, "value": v, "state": st} for s, v, st in rows]})
    t = Table(["setting", "now", "state"], [list(r) for r in rows], align=["l", "l", "l"])
    head = "machine: tuned" if tuned else "machine: not tuned (kperfdiff system tune)"
    return head + "\n" + to_text(t)
