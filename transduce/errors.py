"""Errors a user can cause and fix: the command line prints their message as one line."""


class UserError(ValueError):
    """A problem with the user's input (a file, a setting, a missing model), not a bug."""


class DataError(UserError):
    """Unreadable, inconsistent or missing corpus data; the message names the file and line."""
