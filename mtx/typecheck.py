"""The type check of typed configs: a mapping (Hydra's config as a dict) -> a dataclass, with
one-line errors that name the key.

A field is set by the key of its name, unless its metadata names the key users type
(``field(metadata={"key": ...})``): the Hydra key ``data.max_len`` sets
`DataConfig.max_pair_len`, so that in code ``max_len`` means only the model's positions. The
run files that keep a config (data.json) use the keys too (`to_keys`, `from_keys`).

Values within bounds: a field made with `setting` names what to give and its bounds, and
`check_settings` (called from the dataclass's ``__post_init__``) refuses a value of another type
or outside them in one line."""
import dataclasses
import math
import typing
from dataclasses import field

from .errors import ConfigError


def is_whole(value):
    """An int of a config (YAML reads ``true`` as a bool, which Python counts as the int 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value):
    """An int or float of a config, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def key_of(config_field):
    """The key users type for a dataclass field."""
    return config_field.metadata.get("key", config_field.name)


def to_keys(config):
    """A config dataclass -> {key: value} (`dataclasses.asdict` under the keys users type)."""
    return {key_of(f): value for f, value in zip(dataclasses.fields(config),
                                                 dataclasses.astuple(config))}


def from_keys(cls, values):
    """{key: value} -> {field name: value} of dataclass ``cls`` (unknown keys stay as they are,
    for ``cls`` to refuse)."""
    names = {key_of(f): f.name for f in dataclasses.fields(cls)}
    return {names.get(key, key): value for key, value in values.items()}


def setting(default, hint, *, low=None, above=None, high=None):
    """A field of a settings dataclass: its default, and what to give (``hint``) when a value
    does not have the field's type (int: whole; float: finite; Optional: or null) or is not
    within the bounds ``low <= value``, ``above < value``, ``value <= high``."""
    return field(default=default, metadata={"hint": hint, "low": low, "above": above,
                                            "high": high})


def shown(value):
    """A setting as it is typed on the command line (null, not None)."""
    return "null" if value is None else value


def _within(value, hint, bounds):
    """Whether ``value`` has the type ``hint`` (a float also finite) and, unless it is None or a
    bool, is within ``bounds`` (`setting`)."""
    if not _fits(value, hint):
        return False
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, float) and not math.isfinite(value):
        return False
    low, above, high = bounds["low"], bounds["above"], bounds["high"]
    return ((low is None or value >= low) and (above is None or value > above)
            and (high is None or value <= high))


def check_settings(settings, prefix=""):
    """Every `setting` field of the dataclass ``settings`` fits, else a ConfigError for the first
    that does not: ``<prefix><name>=<value>: give <hint>``."""
    hints = typing.get_type_hints(type(settings))
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if "hint" in f.metadata and not _within(value, hints[f.name], f.metadata):
            raise ConfigError(f"{prefix}{f.name}={shown(value)}: give {f.metadata['hint']}")


def _fits(value, hint):
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        return any(_fits(value, arg) for arg in args)
    if origin is list:
        return isinstance(value, list) and all(_fits(item, args[0]) for item in value)
    if hint in (int, float):  # True is an int to Python, not to a config
        return is_whole(value) if hint is int else is_number(value)
    return isinstance(value, hint) if isinstance(hint, type) else True


def _spell(hint):
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        return " or ".join(_spell(arg) for arg in args)
    if origin is list:
        return f"a list of {_spell(args[0])}"
    return "null" if hint is type(None) else getattr(hint, "__name__", str(hint))


def from_dict(cls, values, section):
    """Build dataclass ``cls`` from a mapping. ConfigError names ``section.key`` for an unknown
    key, and for a value whose type does not fit the field's (int; float, which takes an int
    too; bool; str; Optional[...]; List[...]; other annotations are not checked)."""
    fields = {key_of(f): f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(section + '.' + k for k in unknown)}; "
                          f"valid keys of {section}: {', '.join(sorted(fields))}")
    hints = typing.get_type_hints(cls)
    for key, value in values.items():
        if not _fits(value, hints[fields[key]]):
            raise ConfigError(f"{section}.{key}={value!r} has type {_spell(type(value))}; "
                              f"expected {_spell(hints[fields[key]])}")
    return cls(**from_keys(cls, values))
