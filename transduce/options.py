"""Command-line options made from the fields of a config dataclass, so that a setting has one
name and one description, whether in a YAML file or on the command line."""

from __future__ import annotations

import argparse
import dataclasses
import typing

import yaml

from transduce.fields import help_of


def add_config_options(parser: argparse.ArgumentParser, config_type, *,
                       names: dict | None = None, aliases: dict | None = None,
                       defaults: dict | None = None, default_text: str | None = None,
                       skip: tuple[str, ...] = (), choices: dict | None = None,
                       help_prefix: str = "") -> None:
    """One --option per field of a config dataclass (but those in skip): named after it (or as
    `names` says), with `aliases` (the flags' older names), typed like it, its help the
    comment beside the field. `default_text` describes the defaults when they are not the
    field's ("the run's decode.{name}"; "{default}" is the field's)."""
    hints = typing.get_type_hints(config_type)
    comments = help_of(config_type)
    for field in dataclasses.fields(config_type):
        if field.name in skip:
            continue
        flags = (names or {}).get(field.name, [f"--{field.name.replace('_', '-')}"])
        flags = [*flags, *(aliases or {}).get(field.name, ())]
        default = (defaults or {}).get(field.name, field.default)
        shown = (default_text.format(name=field.name, default=field.default) if default_text
                 else default)
        help_text = f"{help_prefix}{comments.get(field.name, '')} (default: {shown})".strip()
        kind = hints[field.name]
        if kind is bool:
            parser.add_argument(*flags, dest=field.name, action=argparse.BooleanOptionalAction,
                                default=default, help=comments.get(field.name))
            continue
        base = next((t for t in typing.get_args(kind) if t is not type(None)), kind)
        convert = or_null(base) if type(None) in typing.get_args(kind) else base
        metavar = field.metadata.get("metavar", base.__name__.upper())
        if base is bool:  # optional: true, false or null
            convert, metavar = yaml_value, "{true,false,null}"
        elif base not in (int, float, str):  # a list (data.corpora): as in the YAML file
            convert, metavar = yaml_value, "YAML"
        allowed = (choices or {}).get(field.name)
        if allowed:
            metavar = "{" + ",".join("null" if c is None else c for c in allowed) + "}"
        parser.add_argument(*flags, dest=field.name, type=convert, default=default,
                            metavar=metavar, help=help_text.replace("%", "%%"), choices=allowed)


def yaml_value(text: str):
    """A value written as in a YAML file ([{tsv: a.tsv, weight: 2}], true, null); the
    configuration checks it."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise argparse.ArgumentTypeError(f"not valid YAML: {text!r} "
                                         f"({getattr(error, 'problem', None) or error})") from None


def or_null(convert):
    """An optional setting: 'null' (as in YAML) or 'none' unsets it."""
    def parse(text: str):
        return None if text.lower() in ("null", "none") else convert(text)
    parse.__name__ = convert.__name__
    return parse


def from_environment(parser: argparse.ArgumentParser, args: argparse.Namespace,
                     prefix: str) -> None:
    """Options not on the command line (`args.argv`) take the value of the variable `prefix` +
    their name (TRANSDUCE_SERVE_MAX_CHARS for --max-chars) when it is set, read as the option
    reads its value (true/false for a switch, commas between the values of a repeatable one);
    a bad value is a UserError naming the variable."""
    import os

    from transduce.errors import UserError

    given = {word.split("=", 1)[0] for word in getattr(args, "argv", ()) if word.startswith("-")}
    for action in parser._actions:
        variable = prefix + action.dest.upper()
        if (not action.option_strings or variable not in os.environ
                or given & set(action.option_strings)):
            continue
        text = os.environ[variable]
        try:
            if isinstance(action, argparse.BooleanOptionalAction | argparse._StoreTrueAction):
                if text.lower() not in ("1", "0", "true", "false", "yes", "no"):
                    raise ValueError("expected true or false")
                value = text.lower() in ("1", "true", "yes")
            elif isinstance(action, argparse._AppendAction):
                value = [(action.type or str)(part.strip()) for part in text.split(",")]
            else:
                value = (action.type or str)(text)
            if action.choices is not None and value not in action.choices:
                raise ValueError(f"expected one of {', '.join(map(str, action.choices))}")
        except (ValueError, TypeError, argparse.ArgumentTypeError) as error:
            raise UserError(f"{variable}={text!r}: {error}") from None
        setattr(args, action.dest, value)
