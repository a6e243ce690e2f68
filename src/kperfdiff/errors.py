"""Errors that reach the user as one sentence and an exit status.

Input boundaries raise these; the CLI's single handler prints the message
(no traceback unless --debug) and exits with ``exit_status``.
"""


class KperfdiffError(Exception):
    """Base of every error kperfdiff reports to the user."""

    exit_status = 1


class InputError(KperfdiffError):
    """A file, argument or reference the user gave cannot be used."""

    exit_status = 2


class UsageError(InputError):
    """The command line is wrong."""


class StoreError(KperfdiffError):
    """The results store cannot be opened, read or written."""


class BenchError(KperfdiffError):
    """A benchmark could not be built or run."""
