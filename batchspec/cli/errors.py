"""The one exception a command raises for a user's mistake."""


class UsageError(Exception):
    """A mistake in the command line or its input files: printed as one line,
    exit status 2 (:func:`batchspec.cli.main`)."""
