"""`kperfdiff studies run|report`: the five studies, run from their files, in one report."""
from __future__ import annotations

import datetime
import sys
import time

from kperfdiff.targets import machine
from kperfdiff import studies
from kperfdiff.core.errors import InputError
from kperfdiff.render import studies as rstudies
from kperfdiff.commands.common import STDOUT, open_store, write_file
from kperfdiff.commands.parsing import Parser, add_format


def add_studies(s: Parser) -> None:
    s.description = ("Each study file is an experiment file with a [study] table saying what the "
                     "study measured and found. `run` runs (or resumes) each file in turn, then "
                     "writes the report; `report` only writes it from what the store holds. The "
                     "report has one section per study: the study's figures, kperfdiff's here with "
                     "intervals, whether the direction and the mechanism agree, and what differs.")
    ssub = s.add_subparsers(dest="studies_command", metavar="ACTION", required=True)
    for name, text in (("run", "run (or resume) the studies, then write the report"),
                       ("report", "write the report from the store; run nothing")):
        p = ssub.add_parser(name, help=text, description=text)
        p.add_argument("files", nargs="+", metavar="FILE", help="study files (examples/studies/*.toml)")
        add_format(p, "text", "html", help="what goes to stdout: a text summary (default), or the HTML itself")
        p.add_argument("-o", "--output", metavar="HTML", default=None,
                       help="write the HTML report there, - for standard output (instead of the summary) "
                            "(default for run: none; for report: studies.html)")
        if name == "run":
            p.add_argument("--keep-going", action="store_true",
                           help="go on with the next study when one fails (its section says so)")
            p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
            p.add_argument("--restart", action="store_true",
                           help="measure the studies afresh (their stored cells stay in the store, marked "
                                "superseded): needed when their file changed after a partial run, or when their "
                                "cells were measured on another kernel, machine or kperfdiff version")


def run(args) -> int:
    loaded = [studies.load(f) for f in args.files]     # every file checked before anything runs
    names = [e.name for e, _ in loaded]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise InputError(f"two study files name the experiment {dup!r}; each study needs its own name")
    store = open_store(args, create=args.studies_command == "run")
    status = 0
    if args.studies_command == "run":
        log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
        for i, (exp, st) in enumerate(loaded):
            log(f"kperfdiff: study {i + 1}/{len(loaded)}: {st.title} ({exp.path})")
            t0 = time.monotonic()
            try:
                rc = studies.run(store, exp, log, progress=not args.no_progress, restart=args.restart)
            except InputError:
                raise
            except Exception as e:  # noqa: BLE001 - one study's failure is reported in its section
                if not args.keep_going:
                    raise
                log(f"kperfdiff: study {st.title} failed: {e}")
                rc = 1
            log(f"kperfdiff: study {i + 1}/{len(loaded)} {'done' if rc == 0 else 'ended with failures'} "
                f"in {time.monotonic() - t0:.0f} s")
            status = status or rc
    sections = [studies.section(store, exp) for exp, _ in loaded]
    generated = datetime.datetime.now().isoformat(timespec="seconds")
    f = machine.facts(probe_perf=False)
    host = f"{f.get('cpu_model', '?')}, {f.get('cpus', '?')} CPUs, Linux {f.get('kernel_release', '?')}"
    html = rstudies.to_html(sections, generated, host)
    output = args.output or ("studies.html" if args.studies_command == "report" else None)
    if args.format == "html" or output == STDOUT:
        sys.stdout.write(html)
    else:
        sys.stdout.write(rstudies.to_text(sections))
    if output and output != STDOUT:
        out = write_file(output, html, make_folder=True)
        print(f"kperfdiff: studies report written to {out}", file=sys.stderr)
    return status


# the commands this module defines: name -> (fill in its parser, run it)
DEFINES = {"studies": (add_studies, run)}
