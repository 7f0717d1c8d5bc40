"""Errors the user can fix. The CLI prints them as one line and exits with status 2."""


class UsageError(Exception):
    """Bad input: an unknown key, a wrong size, a malformed file. The message names the field."""

    exit_code = 2


class NotKnown(UsageError):
    """What a budget needs that the inputs do not say (the model's shape, the GPU's rates): the budget verb stops;
    resolve, plan, lint and diff leave the budget out and say why."""
