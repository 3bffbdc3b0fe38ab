"""One error base for the whole toolkit. Every refusal a user can act on is an `HsiError` with the
exit status the CLI returns; the CLI (`hsi.cli`) is the only place that catches it and prints
`hsi COMMAND: error: MESSAGE`. Anything else that escapes is a programming error and surfaces as a
traceback with exit status 1, never dressed up as a usage error."""

from __future__ import annotations

EXIT_FAILED = 1
EXIT_USAGE = 2


class HsiError(Exception):
    """A refusal or failure the user can act on; the message says what is wrong and what to do."""

    exit_status = EXIT_USAGE


class UsageError(HsiError):
    """A flag, value or combination of options that cannot be used."""


class InputError(HsiError):
    """An input (ImageNet root, parts folder, dataset, manifest) that cannot be used as given."""


class SettingsError(HsiError):
    """An output folder was made with other settings, or would be overwritten without --overwrite."""


class RunFailed(HsiError):
    """A run stopped midway (a backend failed on a whole shard); finished shards are kept."""

    exit_status = EXIT_FAILED


SHOWN_CHARACTERS = 60  # of a stranger's string in an error line: enough to recognise it, never 50 MB


def shown(value: object, limit: int = SHOWN_CHARACTERS, quote: bool = True) -> str:
    """A value from someone else's data (a key, a name, a path) as an error line echoes it: its repr
    (`quote=False`: its text), escaped to one line, and when longer than `limit` characters cut there
    with "…" and its full length, so an error line stays short whatever was handed in."""
    if isinstance(value, str):
        head = value[:limit]
        text = repr(head) if quote else printable(head)
        return text if len(value) <= limit else f"{text}… ({len(value)} characters)"
    text = printable(repr(value) if quote else str(value))
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def first_few(names, limit: int = 5) -> str:
    """`names` for an error message: the first `limit`, then how many more there are. A character
    that does not print (a newline in a file name) is shown escaped, so the message stays one line,
    and a name longer than any file name (255 characters) is shortened (`shown`): whole file names
    stay whole, for the user to find and move."""
    names = list(names)
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(shown(str(name), limit=255, quote=False) for name in names[:limit]) + more


def printable(name: str) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)
