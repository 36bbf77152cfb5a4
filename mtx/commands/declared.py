"""Every group of settings declared once, in its dataclass, and given to Hydra from there.

Hydra gets each group's declared defaults (`mtx.typecheck.declared`) as the config
``<group>/declared``, which every preset of the group extends (``defaults: [declared]``), so that
conf/ holds only what a preset changes. A command's own keys are root configs (`ROOTS`) that its
YAML lists first: ``train_declared`` (mtx-train's seed, device, init_from), ``device_declared``
(the device of the other commands that run a model) and ``heads_declared`` (the head study's
settings: top-level keys of conf/heads.yaml, and its groups finetune and l0). The
help of the commands lists the declarations (``${mtx.settings:<group>}``, `settings_help`) and
the presets of conf/ (``${mtx.presets:<group>,...}``, `presets_help`).
"""
import dataclasses

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
        store.store(group=group, name="declared", node=declared(cls))
    for name, cls in ROOTS.items():
        store.store(name=name, node=declared(cls))
    if not OmegaConf.has_resolver("mtx.settings"):
        OmegaConf.register_new_resolver("mtx.settings", settings_help)
        OmegaConf.register_new_resolver("mtx.presets", presets_help)


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
        return hydra_compose(config_name=config_name, overrides=list(overrides),
                             return_hydra_config=True)
