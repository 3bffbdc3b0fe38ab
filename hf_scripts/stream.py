"""Deprecated location of `stream()`: the training reader now lives in `builder.formats.stream`,
below the publishing layer. This re-export stays for one release."""

from builder.formats.stream import *  # noqa: F401,F403
from builder.formats.stream import stream  # noqa: F401
