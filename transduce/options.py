"""Command-line options made from the fields of a config dataclass, so that a setting has one
name and one description, whether in a YAML file or on the command line."""

from __future__ import annotations

import argparse
import dataclasses
import typing

from transduce.config import field_comments


def add_config_options(parser: argparse.ArgumentParser, config_type, *,
                       names: dict | None = None, aliases: dict | None = None,
                       defaults: dict | None = None, default_text: str | None = None,
                       skip: tuple[str, ...] = (), choices: dict | None = None) -> None:
    """One --option per field of a config dataclass (but those in skip): named after it (or as
    `names` says, for flags older than the field), typed like it, its help the comment beside
    the field. `default_text` describes the defaults when they are not the field's ("the run's
    decode.{name}")."""
    hints = typing.get_type_hints(config_type)
    comments = field_comments(config_type)
    for field in dataclasses.fields(config_type):
        if field.name in skip:
            continue
        flags = (names or {}).get(field.name, [f"--{field.name.replace('_', '-')}"])
        flags = [*flags, *(aliases or {}).get(field.name, ())]
        default = (defaults or {}).get(field.name, field.default)
        shown = default_text.format(name=field.name) if default_text else default
        help_text = f"{comments.get(field.name, '')} (default: {shown})".strip()
        kind = hints[field.name]
        if kind is bool:
            parser.add_argument(*flags, dest=field.name, action=argparse.BooleanOptionalAction,
                                default=default, help=comments.get(field.name))
            continue
        base = next((t for t in typing.get_args(kind) if t is not type(None)), kind)
        convert = or_null(base) if type(None) in typing.get_args(kind) else base
        allowed = (choices or {}).get(field.name)
        metavar = ("{" + ",".join("null" if c is None else c for c in allowed) + "}" if allowed
                   else base.__name__.upper())
        parser.add_argument(*flags, dest=field.name, type=convert, default=default,
                            metavar=metavar, help=help_text.replace("%", "%%"), choices=allowed)


def or_null(convert):
    """An optional setting: 'null' (as in YAML) or 'none' unsets it."""
    def parse(text: str):
        return None if text.lower() in ("null", "none") else convert(text)
    parse.__name__ = convert.__name__
    return parse
