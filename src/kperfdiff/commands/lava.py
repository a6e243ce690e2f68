"""`kperfdiff lava jobs` and `kperfdiff lava template`: LAVA job definitions without submitting them."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kperfdiff.experiments import file as exp_file, matrix as exp_matrix
from kperfdiff.experiments.lava import validate_job_files, write_job_files
from kperfdiff.core.errors import InputError
from kperfdiff.targets.lava.jobs import shipped_template
from kperfdiff.targets.lava.spec import BOOT_METHODS
from kperfdiff.commands.parsing import Parser

TOKEN_HELP = ("The token for a lava:// target is read from KPERFDIFF_LAVA_TOKEN (or the variable named by "
              "token_env=), else from $XDG_CONFIG_HOME/kperfdiff/lava.toml ([servers.\"HOST\"] token = \"...\"), "
              "else from lavacli's $XDG_CONFIG_HOME/lavacli.yaml (the identity named by identity=, or the one "
              "whose uri is that server); it is never stored, logged or written into a job.")


def add_lava(lv: Parser) -> None:
    lv.description = ("Work with LAVA job definitions directly. An experiment whose variants run on "
                      "lava://HOST/DEVICE_TYPE targets submits its jobs itself (kperfdiff run); "
                      "`jobs` writes the same definitions without submitting them, to review or "
                      "to submit with lavacli. " + TOKEN_HELP)
    lsub = lv.add_subparsers(dest="lava_command", metavar="ACTION", parser_class=Parser, required=True)
    j = lsub.add_parser("jobs", help="write one job definition per LAVA variant and repetition into a folder",
                        description="Write the job definition of every LAVA variant and repetition of an "
                                    "experiment file into DIR (EXPERIMENT.VARIANT.rN.yaml), with the kernels and "
                                    "ramdisks they deploy in DIR/artefacts. Submit them with `lavacli jobs "
                                    "submit FILE` once the lab can fetch DIR/artefacts at --artefacts-url.")
    j.add_argument("file", help="experiment file (TOML) with variants on lava:// targets")
    j.add_argument("-o", "--output", required=True, metavar="DIR", help="folder to write the jobs into")
    j.add_argument("--artefacts-url", metavar="URL",
                   help="where the lab will fetch DIR/artefacts (default: file://DIR/artefacts, for dispatchers "
                        "that share this folder)")
    j.add_argument("--validate", action="store_true",
                   help="also check every job with LAVA's own schema (needs Debian's lava-common)")
    t = lsub.add_parser("template", help="print a shipped job template, to copy and change (template=PATH)")
    t.add_argument("boot", choices=BOOT_METHODS, help="the boot method whose template to print")


def run(args: argparse.Namespace) -> int:
    if args.lava_command == "template":
        sys.stdout.write(shipped_template(args.boot))
        return 0
    exp = exp_file.parse(args.file)
    matrix = exp_matrix.matrix(exp)
    out = Path(args.output)
    if out.exists() and not out.is_dir():
        raise InputError(f"{out} is not a folder")
    paths = write_job_files(exp, matrix, out, args.artefacts_url)
    for p in paths:
        print(p)
    print(f"kperfdiff: {len(paths)} LAVA jobs written to {out} (kernels and ramdisks in {out / 'artefacts'})",
          file=sys.stderr)
    if args.validate:
        version, bad = validate_job_files(paths)
        for p, why in bad.items():
            print(f"kperfdiff: {p}: LAVA's schema refuses it: {why}", file=sys.stderr)
        print(f"kperfdiff: {len(paths) - len(bad)} of {len(paths)} jobs valid for LAVA's schema "
              f"(lava-common {version})", file=sys.stderr)
        return 1 if bad else 0
    return 0


# the commands this module defines: name -> (fill in its parser, run it)
DEFINES = {"lava": (add_lava, run)}
