"""Each setting declared once (`mtx.commands.declared`): every declared setting is a key of the
composed configs that the command line sets, conf/ holds presets that differ from what they
extend and nothing else, and the commands' help lists the declarations."""
import dataclasses
import secrets
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from mtx.commands.declared import GROUPS, ROOTS, compose
from mtx.commands.entry import typed, typed_keys
from mtx.typecheck import declared, key_of
from tests.conftest import ROOT, run_command

CONF = ROOT / "conf"
COMMAND_OF = {"limits": "serve", "access": "serve", "batching": "serve"}  # else train
ROOT_COMMAND = {"train_declared": "train", "device_declared": "translate", "heads_declared": "heads"}
# values a setting only takes beside others (its bounds are checked against them)
WITH = {"data.train": ["data=files", "data.src_lang=en", "data.tgt_lang=xx", "data.valid=v"],
        "data.valid": ["data=files", "data.src_lang=en", "data.tgt_lang=xx", "data.train=t"],
        "data.test": ["data=files", "data.src_lang=en", "data.tgt_lang=xx", "data.train=t",
                      "data.valid=v"],
        "data.prepared": ["data=files", "data.src_lang=en", "data.tgt_lang=xx", "data.valid=v"],
        "data.subword_dropout_from": ["data.subword_dropout=0.1"],
        "data.train_weights": ["data=files", "data.src_lang=en", "data.tgt_lang=xx",
                               "data.train=t", "data.valid=v"],
        "data.train_tags": ["data=files", "data.src_lang=en", "data.tgt_lang=xx", "data.train=t",
                            "data.valid=v"],
        "data.name": ["data.src_lang=en", "data.tgt_lang=xx", "data.train=t", "data.valid=v"],
        "target_heads": ["method=l0"], "method": ["prune_fraction=0.5"]}
EXAMPLE = {"model.heads_per_layer": [2] * 9, "access.token": secrets.token_urlsafe(),
           "train.devices": ["cpu:0"], "access.allowed_hosts": ["example.org"],
           "access.trusted_proxies": ["10.0.0.0/8"], "data.name": "files", "target_heads": 9,
           "data.bleu_tokenize": "char", "data.train_weights": [2.0], "data.train_tags": ["<bt>"],
           "access.session_key": secrets.token_urlsafe()}


def _another_value(f, default):
    """A value of setting ``f`` other than its default that its declaration allows."""
    meta = f.metadata
    if meta.get("choices"):
        return next(choice for choice in meta["choices"] if choice != default)
    if isinstance(default, bool):
        return not default
    if isinstance(default, list):
        return [item * 2 for item in default] if default else ["x"]
    if isinstance(default, str):
        return default + "x"
    top = meta.get("below") if meta.get("below") is not None else meta.get("high")
    if default is None:
        kind = f.type.__args__[0] if hasattr(f.type, "__args__") else f.type
        if kind is str:
            return "x"
        if kind is bool:
            return True
        return 1 if kind is int or (meta.get("low") or 0) >= 1 else 0.5
    if isinstance(default, float) and top is not None:
        return (default + top) / 2
    return default * 2 or 1


def _settings():
    """(command, prefix, group or None, field) of every declared setting."""
    for group, cls in GROUPS.items():
        for f in dataclasses.fields(cls):
            yield COMMAND_OF.get(group, "train"), f"{group}.", group, f
    for root, cls in ROOTS.items():
        for f in dataclasses.fields(cls):
            if not dataclasses.is_dataclass(f.default_factory()
                                            if f.default is dataclasses.MISSING else f.default):
                yield ROOT_COMMAND[root], "", root, f


def _hydra(value):
    """``value`` as an override writes it."""
    if isinstance(value, list):
        return "[" + ",".join(_hydra(item) for item in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"'{value}'" if isinstance(value, str) else repr(value)


@pytest.mark.parametrize("command, prefix, group, f", list(_settings()),
                         ids=lambda x: getattr(x, "name", None) or str(x))
def test_every_declared_setting_is_set_from_the_command_line(command, prefix, group, f):
    key = prefix + key_of(f)
    cls = ROOTS.get(group) or GROUPS[group]
    default = declared(cls)[key_of(f)]
    value = EXAMPLE.get(key, _another_value(f, default))
    required = [] if command == "train" else ["ckpt=x"]
    cfg = compose(command, [*required, *WITH.get(key, []), f"{key}={_hydra(value)}"])
    settings = typed_keys(cfg, cls) if group in ROOTS else typed(cfg, group)
    got = getattr(settings, f.name)
    assert got != default and got is not None, (key, value, got)


def _extended(group, preset_file):
    """What the preset ``conf/<group>/<name>.yaml`` extends: the declared defaults, or the
    composed values of the preset its defaults list names."""
    base = OmegaConf.load(preset_file).get("defaults", [])
    assert len(base) == 1, f"{preset_file} extends one config: [declared] or another preset"
    if base[0] == "declared":
        return declared(GROUPS[group])
    return OmegaConf.to_container(compose("train", [f"{group}={base[0]}"])[group])


@pytest.mark.parametrize("preset", sorted(p.relative_to(CONF).as_posix()
                                          for group in GROUPS for p in (CONF / group).glob("*.yaml")))
def test_no_preset_repeats_what_it_extends(preset):
    group = preset.split("/")[0]
    raw = OmegaConf.to_container(OmegaConf.load(CONF / preset), resolve=False)
    base = _extended(group, CONF / preset)
    for key, value in raw.items():
        key = getattr(GROUPS[group], "RENAMED", {}).get(key, key)  # an old key: still works
        if key != "defaults":
            assert key in base, f"{preset}: {key} is not a declared setting of {group}"
            assert value != base[key], f"{preset}: {key}: {value} repeats what it extends"
            # merged onto a declared value, ??? leaves that value: it cannot ask the user
            assert value != "???", f"{preset}: {key}: ??? keeps the declared {base[key]}"


@pytest.mark.parametrize("experiment", sorted(p.stem for p in (CONF / "experiment").glob("*.yaml")))
def test_no_experiment_repeats_what_its_presets_give(experiment):
    raw = OmegaConf.to_container(OmegaConf.load(CONF / "experiment" / f"{experiment}.yaml"))
    chosen = [f"{next(iter(entry)).split('/')[-1]}={value}" for entry in raw.pop("defaults", [])
              for value in entry.values()]
    base = OmegaConf.to_container(compose("train", chosen), resolve=False)
    for section, values in raw.items():
        for key, value in (values.items() if isinstance(values, dict) else [(None, values)]):
            key = getattr(GROUPS.get(section), "RENAMED", {}).get(key, key)
            was = base[section] if key is None else base[section][key]
            assert value != was, f"experiment={experiment}: {section}.{key}={value} is a repeat"


@pytest.mark.parametrize("command, groups", [
    ("serve", ["limits", "access", "batching", "device_declared"]),
    ("train", ["model", "data", "train", "decode", "train_declared"])])
def test_the_help_lists_every_declared_setting_with_its_hint(command, groups, tmp_path):
    out = run_command(command, "--help", cwd=tmp_path).stdout.decode()
    for group in groups:
        prefix = "" if group in ROOTS else f"{group}."
        for f in dataclasses.fields(ROOTS.get(group) or GROUPS[group]):
            assert f"  {prefix}{key_of(f)}=" in out and f.metadata["hint"] in out, (group, f.name)
    assert "declared" not in out.split("Config groups")[1]


def test_a_renamed_setting_keeps_the_runs_written_before_it(toy_run, tmp_path, monkeypatch):
    """A run written when model.pre_norm was called norm_before (its model.json, run.json and
    checkpoint manifests say norm_before): with the rename in ModelConfig.RENAMED it loads, its
    checkpoints verify and a resume accepts it; the old key on a config works too."""
    import json
    import shutil

    import mxnet as mx

    from mtx.config import ConfigError, ModelConfig
    from mtx.errors import CheckpointError
    from mtx.runs.resume import check_identity
    from mtx.runs.rundir import RunDir, load_run
    from mtx.typecheck import from_dict

    old = tmp_path / "old"
    shutil.copytree(toy_run, old)
    for path in [old / "model.json", old / "run.json", *(old / "checkpoints").glob("*.json")]:
        text = json.loads(path.read_text())
        model = text.get("model", text.get("config", text))
        if "pre_norm" in model:
            model["norm_before"] = model.pop("pre_norm")
            path.write_text(json.dumps(text))
    with pytest.raises(CheckpointError):  # a key unknown to ModelConfig: refused
        load_run(old, mx.cpu(), "auto")
    monkeypatch.setattr(ModelConfig, "RENAMED", {"norm_before": "pre_norm"})
    model, _, _ = load_run(old, mx.cpu(), "auto")
    assert model.cfg == RunDir(toy_run).model_config()
    run = RunDir(old)
    identity = json.loads((Path(toy_run) / "run.json").read_text())  # what today's mtx writes
    check_identity(run, identity)
    assert from_dict(ModelConfig, {"norm_before": True}, "model").pre_norm is True
    with pytest.raises(ConfigError, match="unknown key"):
        from_dict(ModelConfig, {"norm_after": True}, "model")


def test_the_old_key_of_a_renamed_setting_runs_on_the_command_line_with_one_warning(
        tmp_path, monkeypatch, capsys):
    """With model.pre_norm renamed from norm_before (and the root key seed from start_seed), the
    old keys on a command's line and in a preset compose to the new ones; each old key is one
    warning line naming the new key; a new key given beside a preset's old one wins."""
    import sys

    from mtx.commands.entry import hydra_command
    from mtx.config import ModelConfig, RunKeys
    monkeypatch.setattr(ModelConfig, "RENAMED", {"norm_before": "pre_norm"})
    monkeypatch.setattr(RunKeys, "RENAMED", {"start_seed": "seed"}, raising=False)
    monkeypatch.setattr("mtx.commands.declared._warned", set())
    seen = []
    main = hydra_command("train", lambda cfg: seen.append((typed(cfg, "model"),
                                                           typed_keys(cfg, RunKeys))))
    monkeypatch.setattr(sys, "argv", ["mtx-train", "model.norm_before=true", "start_seed=7",
                                      f"hydra.run.dir={tmp_path}", "hydra.output_subdir=null"])
    import logging
    handlers, level = logging.root.handlers[:], logging.root.level
    try:
        main()
    finally:  # Hydra's job logging (a train.log here) must not outlive this test
        for handler in set(logging.root.handlers) - set(handlers):
            logging.root.removeHandler(handler)
            handler.close()
        logging.root.setLevel(level)
    (model, keys), = seen
    assert model.pre_norm is True and keys.seed == 7
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == ["warning: model.norm_before is now model.pre_norm (the setting was "
                        "renamed; the old key still works for now)",
                        "warning: start_seed is now seed (the setting was renamed; the old key "
                        "still works for now)"]
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "old_keys.yaml").write_text("defaults: [declared]\nnorm_before: true\n")
    user_conf = [f"hydra.searchpath=[file://{tmp_path}]", "model=old_keys"]
    assert typed(compose("train", user_conf), "model").pre_norm is True
    assert typed(compose("train", [*user_conf, "model.pre_norm=false"]), "model").pre_norm is False


def test_every_key_the_docs_set_is_a_setting_or_the_old_key_of_a_renamed_one():
    """The settings README.md and docs/ set (docs/log/'s recorded commands too, which must keep
    running) are keys of today or old keys in their class's RENAMED, which the command line
    still takes: a rename without its RENAMED row fails here."""
    import re
    found = 0
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for group, key in re.findall(rf"(?<![\w./-])({'|'.join(GROUPS)})\.(\w+)=",
                                     path.read_text()):
            found += 1
            cls = GROUPS[group]
            assert key in declared(cls) or key in getattr(cls, "RENAMED", {}), (path.name, key)
    assert found > 100


def test_the_serving_docs_give_the_declared_limits():
    """docs/serving.md's ``limits.<key>`` (N) are the declared defaults (the docs name a default
    beside its key; the declaration is the one place it is set)."""
    import re
    text = (ROOT / "docs" / "serving.md").read_text()
    found = re.findall(r"`limits\.(\w+)` \(([\d,.]+)[;)]", text)
    assert len(found) >= 5
    limits = declared(GROUPS["limits"])
    for key, number in found:
        assert float(number.replace(",", "")) == limits[key], (key, number)
