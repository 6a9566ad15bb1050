"""A setting of a config dataclass with what it means: `name: int = setting(4, "what it is")`.
The one description of each setting, read by the command-line options (transduce.options), the
configuration reference of the docs (docs/hooks/config_reference.py) and the configuration's
error messages (transduce.config)."""

from __future__ import annotations

import dataclasses
import functools

HELP = "help"  # the metadata key


def setting(default=dataclasses.MISSING, help: str = "", *,  # noqa: A002 - argparse's word
            default_factory=dataclasses.MISSING, metavar: str | None = None):
    """A dataclass field with its description (and, for its command-line option, the name of
    its value where the type's would not say it: FILE, N/minute)."""
    metadata = {HELP: help} if metavar is None else {HELP: help, "metavar": metavar}
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata=metadata)


@functools.cache
def help_of(config_type) -> dict[str, str]:
    """Each field's description, by name ("" where it has none)."""
    return {f.name: f.metadata.get(HELP, "") for f in dataclasses.fields(config_type)}
