"""Configuration: YAML mapped onto one typed dataclass per section, plus dotted overrides.

    model:  {preset: tiny, dropout: 0.3}      # ModelConfig fields (vocabulary sizes come from
    data:   {dataset: multi30k, ...}           #   the tokenizer) on top of a preset
    train:  {max_updates: 8000, lr: 0.005}     # TrainConfig
    decode: {beam_size: 5}                     # DecodeConfig

Unknown keys are rejected with the closest valid key suggested; values are checked against the
field's type; the resolved configuration is written into every run directory.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from transduce.data.config import DataConfig
from transduce.decoding.config import DecodeConfig
from transduce.errors import UserError
from transduce.fields import help_of, setting
from transduce.model.config import PRESETS, ModelConfig, check_model
from transduce.training.config import TrainConfig

_FROM_TOKENIZER = ("src_vocab_size", "tgt_vocab_size", "unk_id", "pad_id", "bos_id", "eos_id")


class _ModelSection:
    """A preset, and any ModelConfig field set to differ from it (None: the preset's value, or
    the field's default); the vocabulary sizes and special ids come from the tokenizer. Its
    fields are ModelConfig's (but those), generated below: one declaration of each."""

    preset: str

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise UserError(f"model.preset: unknown preset {self.preset!r}; choose one of "
                            f"{sorted(PRESETS)}")
        check_model(self.values())

    @property
    def settings(self) -> dict:
        """The fields this section sets itself, by name."""
        return {name: getattr(self, name) for name in _MODEL_FIELDS
                if getattr(self, name) is not None}

    def values(self) -> dict:
        """The preset's values under this section's own."""
        return {**PRESETS[self.preset], **self.settings}

    def get(self, name: str):
        """A ModelConfig field as this section sets it: its own setting, else its preset's,
        else the field's default (no tokenizer needed)."""
        return self.values().get(name, getattr(ModelConfig, name))

    @property
    def max_positions(self) -> int:
        return self.get("max_positions")

    def resolve(self, src_vocab_size: int, tgt_vocab_size: int, *, shared_vocab: bool,
                specials: dict[str, int] | None = None) -> ModelConfig:
        """The model for a tokenizer's vocabulary sizes and special ids (transduce's own unless
        `specials` gives others, as an imported model's tokenizer does)."""
        settings = {"share_embeddings": shared_vocab, **(specials or {}), **self.settings}
        try:
            return ModelConfig.preset(self.preset, src_vocab_size=src_vocab_size,
                                      tgt_vocab_size=tgt_vocab_size, **settings)
        except ValueError as error:
            raise UserError(str(error)) from None

    @classmethod
    def of(cls, model: ModelConfig) -> ModelSection:
        """The section that resolves to `model` over its tokenizer: every field written out."""
        return cls(**{k: v for k, v in dataclasses.asdict(model).items()
                      if k not in _FROM_TOKENIZER})

    def replace(self, **settings) -> ModelSection:
        return dataclasses.replace(self, **settings)

    def to_dict(self) -> dict:
        return {"preset": self.preset, **self.settings}


_MODEL_FIELDS = {f.name: f for f in dataclasses.fields(ModelConfig)
                 if f.name not in _FROM_TOKENIZER}
_MODEL_TYPES = typing.get_type_hints(ModelConfig)
ModelSection = dataclasses.make_dataclass(
    "ModelSection",
    [("preset", str, setting("base", f"a named model: {', '.join(sorted(PRESETS))}; the "
                                     "keys below override its values"))]
    + [(name, _MODEL_TYPES[name] | None, setting(None, f.metadata.get("help", "")))
       for name, f in _MODEL_FIELDS.items()],
    bases=(_ModelSection,), frozen=True)
ModelSection.__doc__, ModelSection.__module__ = _ModelSection.__doc__, __name__


@dataclass(frozen=True)
class Config:
    model: ModelSection = field(default_factory=ModelSection)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def to_dict(self) -> dict:
        return {"model": self.model.to_dict(),
                **{name: _plain(dataclasses.asdict(getattr(self, name)))
                   for name in ("data", "train", "decode")}}

    def save(self, path: Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))


_SECTIONS = {"model": ModelSection, "data": DataConfig, "train": TrainConfig,
             "decode": DecodeConfig}


def load_config(path: Path | None = None, overrides: list[str] = (),
                base: dict | None = None) -> Config:
    """The configuration from a YAML file (or `base`, or defaults) and `section.key=value`
    overrides; a bad key or value is a `UserError` naming it (and the file)."""
    raw: dict = {}
    where = str(path) if path else "config"
    if path is not None:
        try:
            raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except FileNotFoundError:
            raise UserError(f"{path}: no such configuration file") from None
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            line = f":{mark.line + 1}" if mark else ""
            raise UserError(f"{path}{line}: not valid YAML ({getattr(error, 'problem', error)})"
                            ) from None
    elif base is not None:
        raw = base
    if not isinstance(raw, dict):
        raise UserError(f"{where}: expected sections model, data, train, decode")
    raw = {name: dict(values or {}) for name, values in raw.items()}
    for item in overrides:
        key, sep, text = item.partition("=")
        parts = key.strip().split(".")
        if not sep or len(parts) != 2:
            raise UserError(f"override {item!r}: expected section.key=value, e.g. "
                            "train.max_updates=1000")
        raw.setdefault(parts[0], {})[parts[1]] = yaml.safe_load(text) if text.strip() else None
    if overrides:
        where = f"{where} (with overrides)"
    for name in raw:
        if name not in _SECTIONS:
            suggestion = _suggest(name, list(_SECTIONS))
            raise UserError(f"{where}: unknown section {name!r}{suggestion}")
    return Config(**{name: _build(kind, raw.get(name, {}), name, where)
                     for name, kind in _SECTIONS.items()})


def _build(kind, values: dict, section: str, where: str):
    fields = {f.name: f for f in dataclasses.fields(kind)}
    converted = {k: _convert(v, fields, k, section, where) for k, v in values.items()}
    return _checked(where, kind, **converted)


def _checked(where: str, make, *args, **kwargs):
    """make(...), with a UserError's message prefixed by where the configuration came from."""
    try:
        return make(*args, **kwargs)
    except UserError as error:
        raise UserError(f"{where}: {error}") from None


def _convert(value, fields: dict, key: str, section: str, where: str):
    if key not in fields:
        raise UserError(f"{where}: unknown key '{section}.{key}'"
                        f"{_suggest(key, list(fields), prefix=section + '.')}")
    kind = typing.get_type_hints(_SECTIONS[section])[key]
    try:
        return _coerce(value, kind)
    except (TypeError, ValueError):
        meaning = help_of(_SECTIONS[section]).get(key)
        raise UserError(f"{where}: {section}.{key} must be {_describe(kind)}, got {value!r}"
                        f"{f' ({meaning})' if meaning else ''}") from None


_EXPONENT_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _coerce(value, kind):
    args = typing.get_args(kind)
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        if value is None and type(None) in args:
            return None
        return _coerce(value, next(a for a in args if a is not type(None)))
    if typing.get_origin(kind) is tuple and args[1:] == (Ellipsis,):  # any length
        if not isinstance(value, list | tuple):
            raise TypeError
        return tuple(value)  # the items are checked by the section (DataConfig.corpora)
    if typing.get_origin(kind) is tuple:
        if not isinstance(value, list | tuple) or len(value) != len(args):
            raise TypeError
        return tuple(_coerce(v, a) for v, a in zip(value, args, strict=True))
    if kind is bool:
        if not isinstance(value, bool):
            raise TypeError
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError
        return value
    if kind is float:
        if isinstance(value, str) and _EXPONENT_NUMBER.fullmatch(value.strip()):
            return float(value)  # 1e-8: YAML 1.1 (PyYAML) reads a number without a dot as text
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError
        return float(value)
    if kind is str:
        if not isinstance(value, str):
            raise TypeError
        return value
    raise TypeError


def _describe(kind) -> str:
    args = typing.get_args(kind)
    if typing.get_origin(kind) is tuple and args[1:] == (Ellipsis,):
        return "a list"
    if typing.get_origin(kind) is tuple:
        return f"a list of {len(args)} numbers"
    if args:
        return " or ".join(_describe(a) for a in args)
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string",
            type(None): "null"}.get(kind, str(kind))


def _suggest(key: str, valid: list[str], prefix: str = "") -> str:
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    return f"; did you mean '{prefix}{close[0]}'?" if close else ""


def _plain(values: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}
