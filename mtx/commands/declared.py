"""Every group of settings declared once, in its dataclass, and given to Hydra from there.

Hydra gets each group's declared defaults (`mtx.typecheck.declared`) as the config
``<group>/declared``, which every preset of the group extends (``defaults: [declared]``), so that
conf/ holds only what a preset changes. A command's own keys are root configs (`ROOTS`) that its
YAML lists first: ``train_declared`` (mtx-train's seed, device, init_from), ``device_declared``
(the device of the other commands that run a model) and ``heads_declared`` (the head study's
settings: top-level keys of conf/heads.yaml, and its groups finetune and l0). The
help of the commands lists the declarations (``${mtx.settings:<group>}``, `settings_help`) and
the presets of conf/ (``${mtx.presets:<group>,...}``, `presets_help`).

A renamed setting (its class's ``RENAMED``, {old key: key}, the one alias table; saved runs
read it through `mtx.typecheck.renamed`) keeps its old key working with one warning line naming
the new one: on the command line, rewritten before Hydra composes (`current_overrides`: Hydra
refuses keys its config lacks), and in a preset or config, where the key's declared value is its
old key's value when one is given (``${mtx.old_key:...}``, `old_key_value`).
"""
import dataclasses
import re
import sys

from ..config import DataConfig, DecodeConfig, ModelConfig, Placement, RunKeys, TrainConfig
from ..config import CONF_DIR
from ..datadir import register_resolver
from ..heads.settings import StudySettings
from ..serving.access import Access
from ..serving.settings import Batching, Limits
from ..typecheck import declared, key_of, shown

SECTIONS = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig,
            "decode": DecodeConfig}  # mtx-train's groups (`mtx.commands.entry.typed`)
GROUPS = {**SECTIONS, "limits": Limits, "batching": Batching, "access": Access}  # + mtx-serve's
# a command's own keys, each root listed first in its command's YAML (`entry.typed_keys`)
ROOTS = {"train_declared": RunKeys, "device_declared": Placement, "heads_declared": StudySettings}


def declare_settings():
    """Give Hydra every group's declared defaults and the ``${mtx.settings:...}`` resolver;
    before any composition."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf
    store = ConfigStore.instance()
    for group, cls in GROUPS.items():
        store.store(group=group, name="declared", node=declared_with_old_keys(group, cls))
    for name, cls in ROOTS.items():
        store.store(name=name, node=declared_with_old_keys(name, cls))
    if not OmegaConf.has_resolver("mtx.settings"):
        OmegaConf.register_new_resolver("mtx.settings", settings_help)
        OmegaConf.register_new_resolver("mtx.presets", presets_help)
        OmegaConf.register_new_resolver("mtx.old_key", old_key_value)


def renamed_keys():
    """{old key: key} of every renamed setting as users type it (``model.norm_before``)."""
    table = {}
    for name, cls in {**GROUPS, **ROOTS}.items():
        prefix = f"{name}." if name in GROUPS else ""
        table.update({prefix + old: prefix + new
                      for old, new in getattr(cls, "RENAMED", {}).items()})
    return table


_warned = set()


def warn_renamed(old, new):
    """One warning line (once a process) that the setting ``old`` is now ``new``."""
    if old not in _warned:
        _warned.add(old)
        print(f"warning: {old} is now {new} (the setting was renamed; the old key still works "
              f"for now)", file=sys.stderr)


def current_overrides(overrides):
    """The command line's ``overrides`` with the old key of a renamed setting replaced by its key
    (``[+~]key[@package]=value``; flags such as ``-m`` and ``--help`` stay as they are), with
    `warn_renamed`'s line for each."""
    table, current = renamed_keys(), []
    for override in overrides:
        parts = re.match(r"([+~]*)([\w.]+)(.*)", override, re.S)
        if parts and parts[2] in table:
            warn_renamed(parts[2], table[parts[2]])
            override = parts[1] + table[parts[2]] + parts[3]
        current.append(override)
    return current


def declared_with_old_keys(name, cls):
    """`declared` of the group or root ``name``, a renamed setting's value its old key's where a
    preset or config gives that (`old_key_value`)."""
    values = declared(cls)
    for old, new in getattr(cls, "RENAMED", {}).items():
        values[new] = f"${{mtx.old_key:{name},{old},{new}}}"
    return values


def old_key_value(name, old, new, *, _parent_):
    """``${mtx.old_key:<group or root>,<old key>,<key>}``: the old key's value where the config
    gives it (one warning line), else the key's declared default."""
    if old in _parent_:
        warn_renamed(f"{name}.{old}" if name in GROUPS else old,
                     f"{name}.{new}" if name in GROUPS else new)
        return _parent_[old]
    return declared({**GROUPS, **ROOTS}[name])[new]


def without_old_keys(cls, values):
    """A composed section's ``values`` without the old keys of renamed settings: their values
    are already their keys' (`old_key_value`), or a key given anew overrides them."""
    return {key: value for key, value in values.items()
            if key not in getattr(cls, "RENAMED", {})}


def presets_of(group):
    """The names of the presets of ``group``: the YAML files of conf/<group>/ (and ``declared``,
    the dataclass's defaults alone)."""
    return ["declared", *sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))]


def presets_help(*groups):
    """``${mtx.presets:decode}`` in a command's help: a line per group, ``group: its presets``
    (but ``declared``)."""
    return "\n".join(f"  {group}: {', '.join(presets_of(group)[1:])}" for group in groups)


def settings_help(name, *, _root_):
    """``${mtx.settings:<group>}`` in a command's help: a line per setting of the group (or of
    a root in `ROOTS`): ``<group>.<key>=<its value now>: <what to give>``."""
    if name in GROUPS:
        return "\n".join(_lines(GROUPS[name], _root_[name], f"{name}."))
    cls = ROOTS[name]
    return "\n".join(_lines(cls, {key: _root_[key] for key in declared(cls)}, ""))


def _lines(cls, values, prefix):
    """``values``: the group's composed values, ??? where the user must give one."""
    from omegaconf import OmegaConf
    values = OmegaConf.to_container(OmegaConf.create(values), resolve=True,
                                    throw_on_missing=False)
    for f in dataclasses.fields(cls):
        key = key_of(f)
        value = values[key]
        if isinstance(value, dict):  # a nested group (the head study's finetune, l0)
            yield from _lines(type(f.default_factory()), value, f"{prefix}{key}.")
            continue
        if f.metadata.get("secret") and value is not None:
            value = "<set>"
        yield f"  {prefix}{key}={shown(value)}: {f.metadata.get('hint', '')}"


def compose(config_name, overrides=()):
    """conf/<config_name>.yaml with ``overrides``, composed as its command composes it (outside
    a command: the bench, the tests)."""
    from hydra import compose as hydra_compose, initialize_config_dir
    register_resolver()
    declare_settings()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name=config_name, overrides=current_overrides(overrides),
                             return_hydra_config=True)
