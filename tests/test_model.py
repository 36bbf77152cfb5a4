"""mtx.model.transformer.Transformer: causality, padding invariance, hybridization, parameter counts,
incremental decoding, tied embeddings, the order of attention layers and head gates."""
import dataclasses
import warnings

import numpy as onp
import pytest
from mxnet import np, npx

from mtx.config import ConfigError
from mtx.model.transformer import Transformer
from tests.conftest import model_config

SRC_LENS, TGT_LENS = [5, 3], [4, 2]  # valid lengths of the two sentences of `_batch`
S, T = max(SRC_LENS), max(TGT_LENS)


def _tokens(cfg, *shape):
    return np.array(onp.random.randint(0, cfg.vocab_size, size=shape), dtype="int32")


def _batch(cfg):
    """Source (B, S) whose second row is padded, its lengths (B,), target input (B, T)."""
    return _tokens(cfg, 2, S), np.array(SRC_LENS, dtype="int32"), _tokens(cfg, 2, T)


def _model(cfg):
    net = Transformer(cfg)
    net.initialize()
    return net


def _num_params(net):
    """Trainable parameters (the positional tables are constants and not counted)."""
    return sum(int(onp.prod(p.shape)) for p in net.collect_params().values()
               if p.grad_req != "null")


# -- configuration and parameters ---------------------------------------------------------------

def test_indivisible_width_is_a_config_error():
    with pytest.raises(ConfigError, match=r"num_hiddens=10\b.*num_heads=3\b"):
        model_config(num_hiddens=10, num_heads=3)


def test_parameter_count_does_not_depend_on_heads(tiny_cfg):
    counts = {h: _num_params(_model(dataclasses.replace(tiny_cfg, num_heads=h)))
              for h in (1, 2, 4, 8)}
    assert len(set(counts.values())) == 1, counts
    D = tiny_cfg.num_hiddens
    attention_blocks = tiny_cfg.num_attention_layers
    assert counts[1] > attention_blocks * 4 * D * D  # the attention weights are in the count


def test_tied_embeddings_share_one_parameter(tiny_cfg):
    tied = _model(dataclasses.replace(tiny_cfg, tie_embeddings=True))
    untied = _model(dataclasses.replace(tiny_cfg, tie_embeddings=False))
    assert tied.output.weight is tied.src_embed.embedding.weight
    assert tied.tgt_embed.embedding.weight is tied.src_embed.embedding.weight
    assert untied.output.weight is not untied.src_embed.embedding.weight
    assert untied.tgt_embed.embedding.weight is not untied.src_embed.embedding.weight
    # Untied has its own target embedding and its own output matrix: one V*D for each.
    V, D = tiny_cfg.vocab_size, tiny_cfg.num_hiddens
    assert _num_params(untied) - _num_params(tied) == 2 * V * D


# -- hybridization ------------------------------------------------------------------------------

@pytest.mark.parametrize("gates", [False, True])
@pytest.mark.parametrize("pre_norm", [False, True])
@pytest.mark.parametrize("num_heads", [1, 2, 4])
def test_hybridized_equals_imperative(tiny_cfg, num_heads, pre_norm, gates):
    cfg = dataclasses.replace(tiny_cfg, num_heads=num_heads, pre_norm=pre_norm)
    net = _model(cfg)
    args = _batch(cfg)
    if gates:
        head_gates = onp.ones((cfg.num_attention_layers, num_heads), dtype="float32")
        head_gates[1, 0] = head_gates[-1, -1] = 0.0
        args += (np.array(head_gates),)
    want = net(*args).asnumpy()
    net.hybridize()
    got = net(*args).asnumpy()
    assert net._cached_graph  # the symbolic path really ran
    onp.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# -- attention layers and head gates ------------------------------------------------------------

def test_attention_layers_follow_the_config_order_of_a_pruned_model(tiny_cfg):
    heads = [1, 2, 2, 1, 1, 2]  # enc0, enc1, dec0 self, dec0 cross, dec1 self, dec1 cross
    cfg = dataclasses.replace(tiny_cfg, heads_per_layer=heads)
    net = _model(cfg)
    rows = cfg.attention_layers()
    assert [(a.name, a.kind, a.layer) for a in rows] == [
        ("enc0 self", "encoder self", 0), ("enc1 self", "encoder self", 1),
        ("dec0 self", "decoder self", 0), ("dec0 cross", "decoder cross", 0),
        ("dec1 self", "decoder self", 1), ("dec1 cross", "decoder cross", 1)]
    layers = list(net.attention_layers())
    assert [(row, name) for row, name, _ in layers] == [(a.row, a.name) for a in rows]
    assert [block.num_heads for _, _, block in layers] == heads == cfg.heads_by_layer
    assert cfg.total_heads == 9 and tiny_cfg.total_heads == 6 * tiny_cfg.num_heads
    assert layers[3][2] is net.decoder.blocks[0].cross_attention
    assert layers[4][2] is net.decoder.blocks[1].self_attention
    src, src_lens, tgt = _batch(cfg)
    weights = net.attention_weights(src, src_lens, tgt)
    assert [w.shape for w in weights] == [(2 * 1, S, S), (2 * 2, S, S), (2 * 2, T, T),
                                          (2 * 1, T, S), (2 * 1, T, T), (2 * 2, T, S)]


def _gates(cfg, off=((1, 0), (-1, -1))):
    gates = onp.ones((cfg.num_attention_layers, cfg.num_heads), dtype="float32")
    for a, h in off:
        gates[a, h] = 0.0
    return np.array(gates)


def test_one_hybridized_graph_serves_calls_with_and_without_gates(tiny_cfg):
    net = _model(tiny_cfg)
    args = _batch(tiny_cfg)
    want_gated = net(*args, _gates(tiny_cfg)).asnumpy()
    net.hybridize()
    plain = net(*args).asnumpy()
    graph = net._cached_op
    ones = net(*args, np.ones((tiny_cfg.num_attention_layers, tiny_cfg.num_heads))).asnumpy()
    gated = net(*args, _gates(tiny_cfg)).asnumpy()
    assert net._cached_op is graph  # no new trace for the gated calls
    onp.testing.assert_array_equal(ones, plain)
    onp.testing.assert_allclose(gated, want_gated, rtol=1e-5, atol=1e-5)
    assert not onp.allclose(gated, plain, atol=1e-4)
    state = net.init_state(args[0], args[1], _gates(tiny_cfg))  # the hybridized encoder, gated
    log_probs, _ = net.step(args[2][:, 0], state)
    onp.testing.assert_allclose(log_probs.asnumpy(), npx.log_softmax(
        np.array(want_gated), axis=-1).asnumpy()[:, 0], rtol=1e-5, atol=1e-5)


def test_a_pruned_layer_ignores_the_padding_of_its_gate_row(tiny_cfg):
    cfg = dataclasses.replace(tiny_cfg, heads_per_layer=[1, 2, 1, 2, 2, 1])
    net = _model(cfg)
    args = _batch(cfg)
    plain = net(*args).asnumpy()
    padding_off = _gates(cfg, off=((0, 1), (2, 1), (5, 1)))  # the columns those layers lack
    onp.testing.assert_array_equal(net(*args, padding_off).asnumpy(), plain)
    assert not onp.allclose(net(*args, _gates(cfg, off=((1, 1),))).asnumpy(), plain, atol=1e-4)


# -- masking through the whole model ------------------------------------------------------------

@pytest.mark.parametrize("hybridize", [False, True])
def test_decoder_is_causal(tiny_cfg, hybridize):
    net = _model(tiny_cfg)
    if hybridize:
        net.hybridize()
    src, src_lens, tgt = _batch(tiny_cfg)
    logits = net(src, src_lens, tgt).asnumpy()
    for t in range(T - 1):
        later = tgt.asnumpy()
        later[:, t + 1:] = (later[:, t + 1:] + 1) % tiny_cfg.vocab_size
        changed = net(src, src_lens, np.array(later)).asnumpy()
        onp.testing.assert_array_equal(changed[:, :t + 1], logits[:, :t + 1])
        assert not onp.allclose(changed[:, t + 1:], logits[:, t + 1:], atol=1e-4)


@pytest.mark.parametrize("hybridize", [False, True])
def test_padding_does_not_change_outputs(tiny_cfg, hybridize):
    """Each sentence alone, unpadded, gives the same logits as inside a batch padded with two
    extra junk positions on both sides."""
    net = _model(tiny_cfg)
    if hybridize:
        net.hybridize()
    src, tgt = _tokens(tiny_cfg, 2, S + 2), _tokens(tiny_cfg, 2, T + 2)
    src_lens = np.array(SRC_LENS)
    padded = net(src, src_lens, tgt).asnumpy()
    for b, (n_src, n_tgt) in enumerate(zip(SRC_LENS, TGT_LENS)):
        alone = net(src[b:b + 1, :n_src], src_lens[b:b + 1], tgt[b:b + 1, :n_tgt]).asnumpy()
        onp.testing.assert_allclose(padded[b, :n_tgt], alone[0], rtol=1e-5, atol=1e-5)


# -- incremental decoding -----------------------------------------------------------------------

@pytest.mark.parametrize("hybridize", [False, True])
@pytest.mark.parametrize("pre_norm", [False, True])
@pytest.mark.parametrize("num_heads", [1, 2])
def test_incremental_decoding_equals_full_forward(tiny_cfg, num_heads, pre_norm, hybridize):
    cfg = dataclasses.replace(tiny_cfg, num_heads=num_heads, pre_norm=pre_norm)
    net = _model(cfg)
    if hybridize:
        net.hybridize()
    src, src_lens, tgt = _batch(cfg)
    want = npx.log_softmax(net(src, src_lens, tgt), axis=-1).asnumpy()  # (B, T, V)
    state = net.init_state(src, src_lens)
    for t in range(T):
        log_probs, cross_weights = net.step(tgt[:, t], state)  # (B, V), (B*H, 1, S)
        onp.testing.assert_allclose(log_probs.asnumpy(), want[:, t], rtol=1e-5, atol=1e-5)
        weights = cross_weights.asnumpy().reshape(2, num_heads, S)
        assert (weights[1, :, SRC_LENS[1]:] == 0).all()  # padding gets no attention
    assert state["t"] == T


def _search_step_against_the_log_probs(models, decoder, K=2, steps=3):
    """``decoder`` (a model or an `Ensemble` of ``models``) extends a beam of K per sentence
    with `extend` (one call); the same `BeamStep`, unhybridized, over the top K of the models'
    mean `step` log-probabilities must give the same tokens, scores, lengths, ends and origins
    at every step."""
    from mtx.decoding.beam_step import BeamStep, beam_step
    src, src_lens, _ = _batch(models[0].cfg)
    R = src.shape[0] * K
    full = [m.init_state(src, src_lens, beam_size=K) for m in models]
    fused = decoder.init_state(src, src_lens, beam_size=K)
    reference = BeamStep(K, K)
    reference.initialize()
    beams = (np.full((R,), 1, dtype="int32"), np.array([0.0, -1e30] * (R // K)),
             np.zeros((R,)), np.zeros((R,)), np.array([[2.0]] * R))
    alpha = np.array([0.6])
    for t in range(steps):
        mean = sum(m.step(beams[0], s)[0] for m, s in zip(models, full)) / len(models)
        top_lp, top_ids = npx.topk(mean, k=K, axis=-1, ret_typ="both")
        want = reference(top_lp, top_ids, *beams[1:], alpha, np.full((1,), t, dtype="int32"))
        got = decoder.extend(fused, beam_step(K, models[0].cfg.vocab_size), (*beams, alpha))
        for w, g in zip(want, got):
            onp.testing.assert_allclose(g.asnumpy(), w.asnumpy(), rtol=1e-5, atol=1e-5)
        if t == 2:  # the limit of 2 ends every row
            assert got[3].asnumpy().all()
        beams = (*got[:4], beams[4])
        for model, state in zip(models, full):
            model.reorder_state(state, got[4])
        decoder.reorder_state(fused, got[4])


@pytest.mark.parametrize("gates", [False, True])
@pytest.mark.parametrize("hybridize", [False, True])
def test_extend_is_the_beam_step_over_the_best_next_tokens(tiny_cfg, hybridize, gates):
    """`extend` (the beam search's step: decoder, output layer, top-k and the beam's
    bookkeeping in one call) against `step`'s full distribution and the beam's block alone."""
    net = _model(tiny_cfg)
    if hybridize:
        net.hybridize(static_alloc=True)
    if gates:  # gates that change the distribution, given to both ways
        init_state = net.init_state
        net.init_state = lambda *args, **kwargs: init_state(*args, _gates(tiny_cfg), **kwargs)
    _search_step_against_the_log_probs([net], net)
    with warnings.catch_warnings():  # the decoding steps kept for the model are no container
        warnings.simplefilter("error")  # of Blocks in it (Gluon warns of those)
        net.collect_params()


def test_an_ensembles_step_is_the_beam_step_over_its_models_mean(tiny_cfg):
    """`Ensemble.extend`: the beam's step over the mean of two different models'
    log-probabilities (`step`'s)."""
    from mtx.decoding.ensemble import Ensemble
    models = [_model(tiny_cfg), _model(tiny_cfg)]  # initialised apart
    _search_step_against_the_log_probs(models, Ensemble(models))


# -- bfloat16 matrix multiplies -------------------------------------------------------------------

@pytest.mark.parametrize("hybridize", [False, True])
def test_bfloat16_matmuls_stay_close_and_train_float32_weights(tiny_cfg, hybridize):
    import mxnet as mx
    from mxnet import autograd
    from mtx.model.precision import set_precision
    from mtx.training.precision import bfloat16_unavailable, check_device
    net = _model(tiny_cfg)
    src, src_len, tgt = _batch(tiny_cfg)
    reference = net(src, src_len, tgt).asnumpy()
    if bfloat16_unavailable():  # an AVX2-only CPU, or oneDNN capped: the choice refuses it in
        with pytest.raises(ConfigError, match="train.precision=bfloat16 cannot run on this CPU"):
            check_device("bfloat16", [mx.cpu()])  # one line, before any model is set to it
        assert onp.array_equal(net(src, src_len, tgt).asnumpy(), reference)  # still float32
        return
    set_precision(net, "bfloat16")
    if hybridize:
        net.hybridize()
    with autograd.record():
        logits = net(src, src_len, tgt)
        loss = (logits * logits).mean()
    loss.backward()
    # bfloat16 keeps 8 mantissa bits: outputs within a few per cent of float32, not equal
    assert logits.dtype == onp.float32 and not onp.array_equal(logits.asnumpy(), reference)
    assert onp.abs(logits.asnumpy() - reference).max() < 0.05 * onp.abs(reference).max()
    weight = net.encoder.blocks[0].attention.W_q.weight
    assert weight.data().dtype == onp.float32 and onp.abs(weight.grad().asnumpy()).sum() > 0
    set_precision(net, "float32")
    if hybridize:
        net.hybridize()  # a new trace with float32 products
    assert onp.allclose(net(src, src_len, tgt).asnumpy(), reference, atol=1e-5)


def test_unknown_precision_is_a_config_error():
    from mtx.config import TrainConfig
    with pytest.raises(ConfigError, match="train.precision=float8: give one of float32, "
                                          "bfloat16, bfloat16-mkl, float16"):
        TrainConfig(precision="float8")
    with pytest.raises(ConfigError, match="train.loss_scale=yes: give dynamic loss scaling, "
                                          "one of auto, dynamic"):
        TrainConfig(loss_scale="yes")
    assert TrainConfig(precision="float16").dynamic_loss_scale
    assert not TrainConfig(precision="bfloat16").dynamic_loss_scale
