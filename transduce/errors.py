"""Errors a user can cause and fix, and training that cannot go on: the command line prints
their message as one line. Anything else is a bug, and shows its traceback."""


class UserError(ValueError):
    """A problem with the user's input (a file, a setting, a missing model), not a bug."""


class DataError(UserError):
    """Unreadable, inconsistent or missing corpus data; the message names the file and line."""


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss keeps being NaN); the message says why."""
