"""JSON Schemas (draft 2020-12) of every ``--format json`` output, shipped with the package: one
file per kind of document, ``<kind>.schema.json`` beside this module, each field described.

:data:`OUTPUTS` says which schema each command's JSON follows (commands that print the same
document share one); tests/schemas/test_schemas.py validates real outputs against them and fails when a
command gains a JSON output that is not listed here.
"""
from __future__ import annotations

from pathlib import Path

DIR = Path(__file__).resolve().parent

# command (as typed after `kperfdiff`, with the option that selects the document) -> schema kind
OUTPUTS = {
    "bench": "results",
    "bench --list": "catalogue",
    "show": "results",
    "target boot": "results",
    "target check": "target-check",
    "runs": "runs",
    "history": "history",
    "changes": "changes",
    "run": "compare",
    "compare": "compare",
    "diff": "diff",
    "bisect": "bisect",
    "watch": "watch",
    "watch --publish": "watch-feed",
    "place plan": "place-plan",
    "place sweep": "place-sweep",
    "place model": "place-model",
    "place simulate": "place-simulate",
    "place groups": "place-groups",
    "system show": "system",
}


def schema_path(kind: str) -> Path:
    """The file of one kind of document (a value of :data:`OUTPUTS`)."""
    return DIR / f"{kind}.schema.json"
