"""The type check of typed configs: a mapping (Hydra's config as a dict) -> a dataclass, with
one-line errors that name the key.

A field is set by the key of its name, unless it names the key users type
(``setting(..., key=...)``): the Hydra key ``data.max_len`` sets
`DataConfig.max_pair_len`, so that in code ``max_len`` means only the model's positions. The
run files that keep a config (data.json) use the keys too (`to_keys`, `from_keys`). A setting
renamed is listed in its class's ``RENAMED`` ({old key: key}): files and configs that use the
old key still load (`renamed`).

Each setting is declared once, by `setting`: its type (the annotation), its default, what to
give (a one-line help, also the error's hint) and its bounds or choices. `check_settings` (called
from the dataclass's ``__post_init__``) refuses a value of another type or outside them in one
line, and `declared` gives the defaults to Hydra (`mtx.commands.entry`), so that conf/ holds
only presets that differ from them."""
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


def renamed(cls, values):
    """{key: value} with the keys ``cls`` has renamed (its ``RENAMED``, {old key: key}) under
    their names of today: a run written before a rename still loads and resumes."""
    renames = getattr(cls, "RENAMED", {})
    return {renames.get(key, key): value for key, value in values.items()}


def from_keys(cls, values):
    """{key, or a key before a rename: value} -> {field name: value} of dataclass ``cls``
    (unknown keys stay as they are, for ``cls`` to refuse)."""
    names = {key_of(f): f.name for f in dataclasses.fields(cls)}
    return {names.get(key, key): value for key, value in renamed(cls, values).items()}


def setting(default, hint, *, low=None, above=None, high=None, below=None, choices=None,
            key=None, secret=False):
    """A field of a settings dataclass: its default (a list is copied for each instance), and
    what to give (``hint``) when a value does not have the field's type (int: whole; float:
    finite; Optional: or null), is not one of ``choices`` or is not within the bounds
    ``low <= value``, ``above < value``, ``value <= high``, ``value < below``. ``key``: the key
    users type, when it is not the field's name; ``secret``: its value is never shown."""
    metadata = {"hint": hint, "low": low, "above": above, "high": high, "below": below,
                "choices": choices, "secret": secret}
    if key is not None:
        metadata["key"] = key
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def declared(cls):
    """{key: default} of the settings dataclass ``cls``, nested dataclasses as mappings: what
    Hydra composes the presets of conf/ onto."""
    values = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            value = f.default
        else:
            value = f.default_factory()
        values[key_of(f)] = declared(type(value)) if dataclasses.is_dataclass(value) else value
    return values


SECRET_SHOWN = "<not shown: a secret setting>"


def shown(value, field=None):
    """A setting as it is typed on the command line (null, true, false); the value of a secret
    ``field`` (`setting`'s ``secret``) never."""
    if field is not None and field.metadata.get("secret") and value is not None:
        return SECRET_SHOWN
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else value


def _within(value, hint, bounds):
    """Whether ``value`` has the type ``hint`` (a float also finite) and, unless it is None or a
    bool, is one of the choices and within the bounds (`setting`); a list's every item."""
    if not _fits(value, hint):
        return False
    return all(_bounded(item, bounds) for item in (value if isinstance(value, list) else [value]))


def _bounded(value, bounds):
    """One value within the choices and bounds of `setting` (null and booleans always are)."""
    if value is None or isinstance(value, bool):
        return True
    if bounds["choices"] is not None:
        return value in bounds["choices"]
    if isinstance(value, str):
        return True
    if isinstance(value, float) and not math.isfinite(value):
        return False
    low, above, high, below = bounds["low"], bounds["above"], bounds["high"], bounds["below"]
    return ((low is None or value >= low) and (above is None or value > above)
            and (high is None or value <= high) and (below is None or value < below))


def check_settings(settings, prefix=""):
    """Every `setting` field of the dataclass ``settings`` fits, else a ConfigError for the first
    that does not: ``<prefix><key>=<value>: give <hint>``."""
    hints = typing.get_type_hints(type(settings))
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if "hint" in f.metadata and not _within(value, hints[f.name], f.metadata):
            raise ConfigError(f"{prefix}{key_of(f)}={shown(value, f)}: give {f.metadata['hint']}")


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


def from_dict(cls, values, section=""):
    """Build dataclass ``cls`` from a mapping (a nested dataclass from a nested mapping).
    ConfigError names ``section.key`` (``key`` at the top level, section "") for an unknown key,
    and for a value whose type does not fit the field's (int; float, which takes an int too;
    bool; str; Optional[...]; List[...]; other annotations are not checked)."""
    fields = {key_of(f): f.name for f in dataclasses.fields(cls)}
    dotted = f"{section}." if section else ""
    values = renamed(cls, values)
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(dotted + k for k in unknown)}; "
                          f"valid keys{f' of {section}' if section else ''}: "
                          f"{', '.join(sorted(fields))}")
    hints = typing.get_type_hints(cls)
    for key, value in values.items():
        hint = hints[fields[key]]
        if dataclasses.is_dataclass(hint) and isinstance(value, dict):
            values[key] = from_dict(hint, value, dotted + key)
        elif not _fits(value, hint):
            field = dataclasses.fields(cls)[list(fields).index(key)]
            what = field.metadata.get("hint")
            given = SECRET_SHOWN if field.metadata.get("secret") else repr(value)
            raise ConfigError(f"{dotted}{key}={given} has type {_spell(type(value))}; "
                              f"expected {_spell(hint)}" + (f" ({what})" if what else ""))
    return cls(**from_keys(cls, values))
