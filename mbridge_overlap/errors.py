"""Errors the user can fix. The CLI prints them as one line and exits with status 2."""


class UsageError(Exception):
    """Bad input: an unknown key, a wrong size, a malformed file. The message names the field."""

    exit_code = 2
