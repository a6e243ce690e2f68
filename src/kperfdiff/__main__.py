from kperfdiff.commands import cli

raise SystemExit(cli())
