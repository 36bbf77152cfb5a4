"""The decoder's self caches (`mtx.model.incremental`) grow `cache_chunk` positions at a time,
a number that depends on the beam: decoding past several growths, with one hypothesis per
sentence and with several, gives the full forward pass's log-probabilities."""
import dataclasses

import numpy as onp
import pytest
from mxnet import np, npx

from mtx.model.incremental import cache_chunk
from mtx.model.transformer import Transformer

SRC_LENS = [5, 3]  # two sentences, the second padded


@pytest.mark.parametrize("hybridize", [False, True])
@pytest.mark.parametrize("beam_size", [1, 3])
def test_decoding_across_cache_growths_equals_the_full_forward(tiny_cfg, beam_size, hybridize):
    cfg = dataclasses.replace(tiny_cfg, max_len=64)
    net = Transformer(cfg)
    net.initialize()
    if hybridize:
        net.hybridize(static_alloc=True)
    positions = 2 * cache_chunk(beam_size) + 1  # two growths after the first chunk
    assert positions < cfg.max_len
    rng = onp.random.default_rng(0)
    src = np.array(rng.integers(4, cfg.vocab_size, (2, max(SRC_LENS))), dtype="int32")
    src_lens = np.array(SRC_LENS, dtype="int32")
    tgt = np.array(rng.integers(4, cfg.vocab_size, (2, positions)), dtype="int32")
    want = npx.log_softmax(net(src, src_lens, tgt), axis=-1).asnumpy()  # (B, T, V)
    state = net.init_state(src, src_lens, beam_size=beam_size)
    for t in range(positions):
        tokens = np.array(onp.repeat(tgt.asnumpy()[:, t], beam_size), dtype="int32")  # (B*K,)
        log_probs = net.step(tokens, state)[0].asnumpy()  # (B*K, V)
        onp.testing.assert_allclose(log_probs, onp.repeat(want[:, t], beam_size, axis=0),
                                    rtol=1e-5, atol=1e-5)
    assert state["caches"][0]["self"][0].shape[1] == 3 * cache_chunk(beam_size)
