"""The one error every `zeromem` subcommand raises for bad command-line input."""


class UsageError(Exception):
    """Bad command-line input: exit status 2 with a one-line message."""
