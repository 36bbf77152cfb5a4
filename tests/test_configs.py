"""Hydra configs: every group and experiment composes, typed configs reject bad values, and the
scripts turn bad overrides into one clear line."""

import re

import pytest
from omegaconf import OmegaConf

from mtx.commands.declared import compose
from mtx.commands.entry import typed
from mtx.config import ConfigError, DecodeConfig
from mtx.hardware.devices import parse_device
from tests.conftest import model_config, ROOT, run_script

CONF = ROOT / "conf"


def _compose(primary, overrides=()):
    return compose(primary, overrides)


def _options(group):
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


# what an option leaves to the user (???): given here as a user would
REQUIRED = {("data", "files"): ["data.src_lang=en", "data.tgt_lang=xx", "data.train=corpus/train",
                                "data.valid=corpus/dev"]}


@pytest.mark.parametrize("group", ["model", "data", "train", "decode"])
def test_every_group_option_composes_and_types(group):
    for option in _options(group):
        cfg = _compose("train", [f"{group}={option}", *REQUIRED.get((group, option), [])])
        cfg.hydra.runtime.cwd = str(ROOT)  # what @hydra.main sets
        typed(cfg, group)


@pytest.mark.parametrize("experiment", _options("experiment"))
def test_every_experiment_composes(experiment):
    cfg = _compose("train", [f"experiment={experiment}"])
    for group in ("model", "data", "train", "decode"):
        typed(cfg, group)


def test_head_sweep_is_a_multirun_over_heads_and_two_seeds():
    cfg = _compose("train", ["sweep=heads"])
    assert cfg.hydra.mode.name == "MULTIRUN"
    assert cfg.hydra.sweeper.params["model.num_heads"] == "1,2,4,8,16"
    assert cfg.hydra.sweeper.params["seed"] == "1,2"
    # a killed sweep resumed with train.resume=true writes into the same run folders
    assert "train.resume" in cfg.hydra.job.config.override_dirname.exclude_keys


@pytest.mark.parametrize("primary", ["translate", "evaluate"])
def test_inference_configs_compose(primary):
    cfg = _compose(primary, ["ckpt=somewhere", "decode=greedy"])
    assert typed(cfg, "decode").beam_size == 1


def test_overrides_reach_the_typed_config():
    cfg = _compose("train", ["model.num_heads=8", "model.num_hiddens=128", "data=multi30k_en_fr"])
    model, data = typed(cfg, "model"), typed(cfg, "data")
    assert (model.num_heads, model.head_dim, data.tgt_lang) == (8, 16, "fr")


def test_typed_rejects_unknown_keys_and_impossible_sizes():
    cfg = _compose("train")
    OmegaConf.set_struct(cfg, False)
    cfg.model.num_layers = 6
    with pytest.raises(ConfigError, match=r"unknown key\(s\) model\.num_layers"):
        typed(cfg, "model")
    with pytest.raises(ConfigError, match="num_hiddens=256 is not divisible by model.num_heads=3"):
        model_config({}, num_hiddens=256, num_heads=3)


@pytest.mark.slow
def test_bad_override_is_one_line_from_the_script(tmp_path):
    done = run_script("train", "model.num_heads=3", f"hydra.run.dir={tmp_path}")
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2
    assert lines[-1].startswith("error: model.num_hiddens=256 is not divisible by model.num_heads=3")
    assert "Traceback" not in done.stderr.decode()


@pytest.mark.slow
def test_unknown_key_is_refused_without_traceback(tmp_path):
    done = run_script("train", "model.num_layer=6", f"hydra.run.dir={tmp_path}")
    err = done.stderr.decode()
    assert done.returncode != 0 and "num_layer" in err and "Traceback" not in err


def test_greedy_is_the_beam_config_with_one_hypothesis():
    """Validation BLEU and the head study decode with `DecodeConfig.greedy()`: the same limits
    and batches as the config it comes from; conf/decode/greedy.yaml is the beam config's."""
    beam = DecodeConfig(beam_size=5, length_penalty=1.5, nbest=3, max_len_a=2.0, batch_tokens=100)
    assert beam.greedy() == DecodeConfig(beam_size=1, length_penalty=0.0, nbest=1, max_len_a=2.0,
                                         batch_tokens=100)
    from_beam = typed(_compose("translate", ["decode=beam"]), "decode").greedy()
    assert from_beam == typed(_compose("translate", ["decode=greedy"]), "decode")


@pytest.mark.parametrize("name, parsed", [("cpu", ("cpu", 0)), ("cpu:1", ("cpu", 1)),
                                          ("gpu", ("gpu", 0)), ("gpu:3", ("gpu", 3)),
                                          ("auto", ("auto", 0))])
def test_device_names_parse(name, parsed):
    assert parse_device(name) == parsed


@pytest.mark.parametrize("name", ["tpu", "gpu:", "gpu:x", "cpu:-1", "auto:1", "GPU", ""])
def test_a_name_that_is_no_device_is_one_config_error(name):
    """The one parser of device names, for MXNet contexts and the CTranslate2 backend alike."""
    with pytest.raises(ConfigError, match=re.escape(f"device={name} is not a device name: use "
                                                    f"cpu, cpu:N, gpu, gpu:N or auto")):
        parse_device(name)
    from mtx.deploy.backend import ct2_device
    with pytest.raises(ConfigError, match="is not a device name"):
        ct2_device(name)
