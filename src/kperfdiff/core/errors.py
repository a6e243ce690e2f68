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
    """The command line is wrong; ``prog`` names the (sub-)command it was given to."""

    def __init__(self, message: str, prog: str = "kperfdiff"):
        super().__init__(message)
        self.prog = prog


class StoreError(KperfdiffError):
    """The results store cannot be opened, read or written."""

    exit_status = 2


class BenchError(KperfdiffError):
    """A benchmark could not be built or run."""
