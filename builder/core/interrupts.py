"""Ctrl-C for the commands that do not run shards (eval, train): one line and exit status 130, as the
shard runner's `Interrupted` gives extract, compose and scgs, never a `KeyboardInterrupt` traceback;
and the few steps that must not be cut in two (a file renamed into place and its record) finish
before the interrupt is taken."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from builder.core.errors import HsiError

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C


class Stopped(HsiError):
    """The run was stopped with Ctrl-C; what it finished is kept and the message says how to go on."""

    exit_status = EXIT_INTERRUPTED


@contextmanager
def ctrl_c_stops(message: str | Callable[[], str]) -> Iterator[None]:
    """Turn a Ctrl-C inside the block into `Stopped(message)` (a callable: called then, so it can say
    how far the run got): one line for the CLI to print."""
    try:
        yield
    except KeyboardInterrupt:
        raise Stopped(message() if callable(message) else message) from None


@contextmanager
def ctrl_c_deferred() -> Iterator[None]:
    """Hold a Ctrl-C that arrives inside the block until it ends (then raise it as usual), so the
    block's steps are done together or not at all. Python runs signal handlers only in the main
    thread, so elsewhere (where no KeyboardInterrupt can be raised anyway) this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held and callable(previous):
            previous(signal.SIGINT, None)  # the handler that was there: Python's raises KeyboardInterrupt
        elif held and previous == signal.SIG_DFL:
            signal.raise_signal(signal.SIGINT)  # no handler: the signal ends the process, as it would have
