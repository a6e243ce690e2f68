"""`kperfdiff store init|copy`: make a shared (PostgreSQL) store, and move a store, with its
artefacts, between SQLite and PostgreSQL."""
from __future__ import annotations

import argparse
import sys

from kperfdiff.core import limits
from kperfdiff.core.errors import InputError
from kperfdiff.store import SCHEMA_VERSION, Store, default_location, is_url, transfer
from kperfdiff.store.backend import mask
from kperfdiff.commands.parsing import Parser

STORE_HELP = f"""\
A store is an SQLite file (the default: one machine) or a PostgreSQL database that several
machines write at once (a lab). Name it with --store or $KPERFDIFF_STORE:

  PATH                                  an SQLite file; artefacts go to PATH's NAME.artefacts/
  postgresql://USER[:PASSWORD]@HOST[:PORT]/DB[?PARAM=VALUE&...]
                                        a PostgreSQL database (libpq's URL: sslmode=, host= for a
                                        socket folder, and the others; a password is better kept in
                                        ~/.pgpass or $PGPASSWORD than in the URL, and is never shown)

A PostgreSQL store keeps its artefacts (perf.data, kallsyms) in a folder every machine that
writes the store mounts: `store init URL --artefacts DIR` records it in the store; a machine
that mounts it elsewhere adds ?artefacts=DIR to its URL. DIR is an absolute path or a file://
URL (other URL schemes, such as s3://, are not implemented).

An experiment running on one machine of a shared store is that machine's: `kperfdiff run FILE`
elsewhere refuses it, saying when its heartbeat (every {limits.HEARTBEAT_S:.0f} s) was last seen, until that heartbeat
is {limits.EXPERIMENT_DEAD_S / 60:.0f} minutes old (the machine died or lost the network); then it takes the experiment over and
resumes it, and the first machine, if it comes back, stops.
"""


def add_store(s: Parser) -> None:
    s.description, s.formatter_class = STORE_HELP, argparse.RawDescriptionHelpFormatter
    ssub = s.add_subparsers(dest="store_command", metavar="ACTION", required=True)
    p = ssub.add_parser("init", help="make (or upgrade) a store and say where its artefacts go",
                        description="Make the store at URL (or PATH, or --store) if it has no schema yet, upgrade "
                                    "it if an older kperfdiff made it, and record --artefacts DIR as its artefact "
                                    "folder (PostgreSQL). Run it once per store; running it again changes nothing "
                                    "but the folder given.")
    p.add_argument("location", nargs="?", metavar="URL|PATH", help="the store (default: --store, $KPERFDIFF_STORE, "
                                                                   "or the default file)")
    p.add_argument("--artefacts", metavar="DIR", help="the folder (or file:// URL) of a PostgreSQL store's artefacts, "
                                                      "mounted by every machine that writes the store")
    p = ssub.add_parser("copy", help="copy a whole store, artefacts included, into a new or empty one",
                        description="Copy every run, result, raw interval, profile, experiment and machine of SRC, "
                                    "and the artefact files they name, into DST: SQLite to PostgreSQL, PostgreSQL to "
                                    "SQLite, or either to its own kind. DST must be new or empty, and ids are kept (run 7 "
                                    "is run 7 in both), unless --merge adds SRC to a store that has runs (new ids). "
                                    "Nothing is written to DST unless everything is.")
    p.add_argument("src", metavar="SRC", help="the store to copy (a file or postgresql:// URL)")
    p.add_argument("dst", metavar="DST", help="the new or empty store, or with --merge any store (a file or "
                                              "postgresql:// URL)")
    p.add_argument("--artefacts", metavar="DIR", help="the artefact folder of a PostgreSQL DST made now "
                                                      "(or ?artefacts=DIR in its URL)")
    p.add_argument("--merge", action="store_true",
                   help="add SRC to a DST that has runs already: SRC's runs, results, profiles and experiments "
                        "get new ids (after DST's), its run folders follow (run-N), machines are matched by "
                        "their fingerprint")


def run(args) -> int:
    if args.store_command == "init":
        return _init(args)
    out = transfer.copy(args.src, args.dst, artefacts=args.artefacts, merge=args.merge,
                        log=lambda m: print(m, file=sys.stderr, flush=True))
    rows = ", ".join(f"{out.rows.get(t, 0)} {t}{'' if out.rows.get(t, 0) == 1 else 's'}"
                     for t in ("run", "result", "interval", "profile", "experiment", "machine"))
    if out.matched_machines:
        rows += f" ({out.matched_machines} already there)"
    print(f"kperfdiff: copied {mask(str(args.src))} to {mask(str(args.dst))}: {rows}; "
          f"{out.files} artefact files in {out.artefacts}", file=sys.stderr)
    return 0


def _init(args) -> int:
    location = args.location or getattr(args, "store", None) or default_location()
    if args.artefacts and not is_url(location):
        raise InputError("--artefacts is for a PostgreSQL store; an SQLite store keeps its artefacts beside its "
                         "file (NAME.artefacts)")
    store = Store.open(location, create=True, artefacts=args.artefacts)
    if args.artefacts:
        store.set_artefact_folder(args.artefacts)
    print(f"kperfdiff: store {store.path} ready (schema {SCHEMA_VERSION}, {store.count_runs()} runs); "
          f"artefacts in {store.artefact_root()}", file=sys.stderr)
    return 0


# the commands this module defines: name -> (fill in its parser, run it)
DEFINES = {"store": (add_store, run)}
