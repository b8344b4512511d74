"""Errors raised for bad input: the message always names the key, file or value."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class InputError(ValueError):
    """Bad user input: a config value, a file or a command-line argument."""


def suggest(value: str, choices: Iterable[str]) -> str:
    """A hint naming the choices close to a misspelt ``value`` (" (did you mean 'x'?)"),
    else an empty string."""
    close = difflib.get_close_matches(value, list(choices), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
