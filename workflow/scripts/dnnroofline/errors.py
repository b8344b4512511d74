"""Errors raised for bad input: the message always names the key, file or value."""


class InputError(ValueError):
    """Bad user input: a config value, a file or a command-line argument."""
