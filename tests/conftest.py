"""Shared test setup: numpy mode, fixed seeds, and a tiny model configuration."""
import numpy as onp
import pytest
import mxnet as mx
from mxnet import npx

from mtx.config import ModelConfig

npx.set_np()


@pytest.fixture(autouse=True)
def fixed_seeds():
    """Every test starts from the same random state (MXNet's generator and NumPy's)."""
    mx.random.seed(0)
    onp.random.seed(0)


@pytest.fixture
def tiny_cfg():
    """2 layers each side, D=16, H=2, V=30, no dropout: small enough for exact comparisons."""
    return ModelConfig(num_hiddens=16, num_heads=2, ffn_num_hiddens=32, num_encoder_layers=2,
                       num_decoder_layers=2, dropout=0.0, attention_dropout=0.0, max_len=32,
                       vocab_size=30)
