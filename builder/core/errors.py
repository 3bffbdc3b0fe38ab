"""The one base of every error the toolkit raises on purpose; the command line catches it and exits
with its status."""


class HsiError(Exception):
    """A refusal the user can act on (bad input, missing backend, changed settings): the command line
    prints its message as `hsi CMD: error: ...` and exits with `exit_status`."""

    exit_status = 2
