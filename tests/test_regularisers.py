"""The training step's regularisers beside dropout, the terms of the loss: word dropout on the
inputs, R-Drop's consistency term and distillation, each checked against its formula and
against what it must equal when it cannot act, their refusal to combine, a short toy run with
two, and the epochs BPE-dropout cuts anew."""
import dataclasses
import math
from types import SimpleNamespace

import mxnet as mx
import numpy as onp
import pytest
from mxnet import autograd, np, npx

from mtx.config import TrainConfig
from mtx.data.batching import collate
from mtx.data.vocab import BOS, EOS, PAD, UNK
from mtx.errors import ConfigError
from mtx.model.transformer import Transformer
from mtx.training.loss import (LabelSmoothedCrossEntropy, SymmetricKL, label_smoothed_loss,
                               valid_positions)
from mtx.training.regularisers import RDrop, Teacher, WordDistillation, drop_words, terms_of
from mtx.training.terms import TermLosses
from tests.conftest import model_config


def _batch(rows=16, seed=0):
    rng = onp.random.RandomState(seed)
    src = [list(rng.randint(4, 30, rng.randint(3, 10))) for _ in range(rows)]
    tgt = [list(rng.randint(4, 30, rng.randint(3, 10))) for _ in range(rows)]
    return collate(src, tgt, list(range(rows)))


def test_word_dropout_replaces_only_input_subwords_and_is_seeded():
    batch = _batch()
    dropped = drop_words(batch, 0.3, seed=7)
    assert onp.array_equal(dropped.tgt_out, batch.tgt_out)  # the loss's targets stay
    for name in ("src_tokens", "tgt_in"):
        before, after = getattr(batch, name), getattr(dropped, name)
        changed = before != after
        assert (after[changed] == UNK).all() and (before[changed] > EOS).all()
        specials = onp.isin(before, [PAD, BOS, EOS])
        assert onp.array_equal(after[specials], before[specials])
        assert 0.15 < changed.sum() / (before > EOS).sum() < 0.45
    again = drop_words(batch, 0.3, seed=7)
    assert onp.array_equal(again.src_tokens, dropped.src_tokens)
    assert not onp.array_equal(drop_words(batch, 0.3, seed=8).src_tokens, dropped.src_tokens)


def _pieces(cfg, model=None, alpha=5.0, smoothing=0.1):
    if model is None:
        model = Transformer(cfg)
        model.initialize(mx.init.Xavier())
    loss_fn = label_smoothed_loss(cfg.vocab_size, smoothing, mx.cpu())
    return SimpleNamespace(model=model, loss_fn=loss_fn, alpha=alpha, losses=TermLosses(
        loss_fn, cfg.vocab_size, smoothing, [mx.cpu()]))


def _rdrop(pieces, *device_batch):
    return pieces.losses.loss(pieces.model, [RDrop(pieces.alpha, 0.0)], *device_batch)


def test_rdrop_without_dropout_is_the_plain_loss_and_with_it_adds_a_positive_term(tiny_cfg):
    batch = _batch()
    src, src_len, tgt_in, tgt_out, tgt_len = (np.array(a) for a in (
        batch.src_tokens, batch.src_valid_len, batch.tgt_in, batch.tgt_out, batch.tgt_valid_len))
    pieces = _pieces(tiny_cfg)  # no dropout: both passes agree, the KL term is 0
    with autograd.record():
        plain, plain_nll = pieces.loss_fn(pieces.model(src, src_len, tgt_in), tgt_out, tgt_len)
        paired, paired_nll = _rdrop(pieces, src, src_len, tgt_in, tgt_out, tgt_len)
    assert float(paired) == pytest.approx(float(plain), rel=1e-5)
    assert float(paired_nll) == pytest.approx(float(plain_nll), rel=1e-5)
    noisy_cfg = dataclasses.replace(tiny_cfg, dropout=0.3)
    weighted_fn = _pieces(noisy_cfg)
    unweighted_fn = _pieces(noisy_cfg, weighted_fn.model, alpha=0.0)
    with autograd.record():  # training mode: each pass its own dropout
        mx.random.seed(3)
        weighted, _ = _rdrop(weighted_fn, src, src_len, tgt_in, tgt_out, tgt_len)
        mx.random.seed(3)
        unweighted, _ = _rdrop(unweighted_fn, src, src_len, tgt_in, tgt_out, tgt_len)
    assert math.isfinite(float(unweighted)) and float(weighted) > float(unweighted)


def test_distilling_from_the_model_itself_mixes_its_nll_and_its_entropy(tiny_cfg):
    """A teacher that is the student (no dropout in the tiny model): the loss is (1 - w) nll +
    w H(p) over the valid target tokens (label smoothing 0), the nll is the plain one."""
    batch = _batch()
    device_batch = [np.array(a) for a in (batch.src_tokens, batch.src_valid_len, batch.tgt_in,
                                          batch.tgt_out, batch.tgt_valid_len)]
    pieces = _pieces(tiny_cfg, smoothing=0.0)
    distil = WordDistillation(Teacher(pieces.model, 0.3))
    with autograd.record():
        loss, nll = pieces.losses.loss(pieces.model, [distil], *device_batch)
    logits = pieces.model(*device_batch[:3]).asnumpy().astype("float64")  # (B, T, V)
    log_p = logits - onp.log(onp.exp(logits).sum(-1, keepdims=True))
    tgt_out, tgt_len = batch.tgt_out, batch.tgt_valid_len
    valid = onp.arange(tgt_out.shape[1])[None, :] < tgt_len[:, None]  # (B, T)
    gold = -onp.take_along_axis(log_p, tgt_out[..., None].astype(int), -1)[..., 0]
    entropy = -(onp.exp(log_p) * log_p).sum(-1)
    assert float(nll) == pytest.approx(gold[valid].sum(), rel=1e-4)
    assert float(loss) == pytest.approx(0.7 * gold[valid].sum() + 0.3 * entropy[valid].sum(),
                                        rel=1e-4)


def _reference(name, logits, teacher_logits, tgt_out, tgt_len, smoothing=0.1):
    """The loss and nll of each term as mtx computed them before the loss had terms (fb1fcc6's
    RDropLoss and DistilledLoss, composed here of the same blocks)."""
    smoothed = LabelSmoothedCrossEntropy(logits.shape[-1], smoothing)
    smoothed.initialize()
    loss, nll = smoothed(logits, tgt_out, tgt_len)
    if name == "rdrop":  # logits (2B, T, V), targets twice; alpha 5
        first_pass_len = np.split(tgt_len, 2, axis=0)[0]
        return loss / 2 + 5.0 / 4 * SymmetricKL()(logits, first_pass_len), nll / 2
    soft = -(npx.softmax(teacher_logits, axis=-1) * npx.log_softmax(logits, axis=-1)).sum(-1)
    soft = (soft * valid_positions(mx, soft, tgt_len)).sum()  # weight 0.3
    return 0.7 * loss + 0.3 * soft, nll


@pytest.mark.parametrize("name", ["rdrop", "distil"])
def test_each_term_gives_the_loss_and_gradients_of_its_formula(name):
    """On a fixed batch of logits, the base loss with R-Drop's or distillation's term has the
    loss, nll and gradient (d logits) of the formula it had as a loss of its own, to 1e-6."""
    batch = _batch()
    rows = 2 if name == "rdrop" else 1
    tgt_out, tgt_len = (np.array(onp.concatenate([a] * rows)) for a in (batch.tgt_out,
                                                                        batch.tgt_valid_len))
    rng = onp.random.RandomState(4)
    logits = np.array(rng.normal(0, 2, tgt_out.shape + (30,)).astype("float32"))
    teacher_logits = np.array(rng.normal(0, 2, logits.shape).astype("float32"))
    term = (RDrop(5.0, 0.0) if name == "rdrop"
            else WordDistillation(Teacher(None, 0.3)))
    block = TermLosses(label_smoothed_loss(30, 0.1, mx.cpu()), 30, 0.1, [mx.cpu()]).block((term,))
    provided = (teacher_logits,) if name == "distil" else ()
    results = []
    for compute in (lambda x: block(x, tgt_out, tgt_len, *provided),
                    lambda x: _reference(name, x, teacher_logits, tgt_out, tgt_len)):
        x = logits.copy()
        x.attach_grad()
        with autograd.record():
            loss, nll = compute(x)
        loss.backward()
        results.append((float(loss), float(nll), x.grad.asnumpy()))
    (loss, nll, grad), (ref_loss, ref_nll, ref_grad) = results
    assert loss == pytest.approx(ref_loss, rel=1e-6) and nll == pytest.approx(ref_nll, rel=1e-6)
    assert abs(grad - ref_grad).max() <= 1e-6 * abs(ref_grad).max()
    assert abs(ref_grad).max() > 0


def _logits_and_grad(compute, logits):
    x = logits.copy()
    x.attach_grad()
    with autograd.record():
        loss, _ = compute(x)
    loss.backward()
    return float(loss), x.grad.asnumpy().astype("float64")


@pytest.mark.parametrize("with_rdrop", [False, True])
def test_the_z_loss_adds_its_formula_and_its_gradient_and_combines_with_rdrop(with_rdrop):
    """train.z_loss=w adds w (log Z)^2 over the valid positions to the loss and 2 w log Z
    softmax to its gradient (numpy, float64); beside R-Drop the loss is the passes' mean of
    both terms with the base loss; the z-loss needs float32 logits."""
    from mtx.training.build import loss_reads_bfloat16
    from mtx.training.regularisers import ZLoss
    settings = TrainConfig(precision="bfloat16", z_loss=0.01, rdrop_alpha=5.0 if with_rdrop else 0)
    terms = terms_of(settings)
    assert isinstance(terms[-1], ZLoss) and not loss_reads_bfloat16(settings, terms)
    batch, passes = _batch(), 2 if with_rdrop else 1
    tgt_out, tgt_len = (np.array(onp.concatenate([a] * passes)) for a in (batch.tgt_out,
                                                                          batch.tgt_valid_len))
    logits = onp.random.RandomState(5).normal(4, 3, tgt_out.shape + (30,)).astype("float32")
    losses = TermLosses(label_smoothed_loss(30, 0.1, mx.cpu()), 30, 0.1, [mx.cpu()])
    with_z, grad_z = _logits_and_grad(lambda x: losses.block(tuple(terms))(x, tgt_out, tgt_len),
                                      np.array(logits))
    without, grad = _logits_and_grad(lambda x: losses.block(tuple(terms[:-1]))(
        x, tgt_out, tgt_len), np.array(logits))
    z = logits.astype("float64")
    log_z = onp.log(onp.exp(z).sum(-1))  # (P*B, T)
    valid = onp.arange(z.shape[1])[None, :] < tgt_len.asnumpy()[:, None]
    assert with_z - without == pytest.approx(0.01 * (log_z ** 2)[valid].sum() / passes, rel=1e-5)
    softmax = onp.exp(z - log_z[..., None])
    expected = 2 * 0.01 * (log_z * valid)[..., None] * softmax / passes
    assert abs(grad_z - grad - expected).max() <= 1e-5 * abs(expected).max()


def test_a_teacher_and_rdrop_together_are_one_line_and_distilling_needs_training(tiny_cfg):
    from mtx.heads.settings import FineTuning
    with pytest.raises(ConfigError, match="^distillation from a teacher .* and train.rdrop_alpha"
                                          "=5.0 cannot combine: .*; set train.rdrop_alpha=0 for "
                                          "this training$"):
        terms_of(TrainConfig(rdrop_alpha=5.0), Teacher(object(), 0.5))
    with pytest.raises(ConfigError, match="give finetune.minutes > 0 too"):
        FineTuning(distill_weight=0.5)


@pytest.mark.parametrize("settings, words", [({"rdrop_alpha": -1.0}, "train.rdrop_alpha"),
                                             ({"rdrop_from": 1.0}, "train.rdrop_from=1.0"),
                                             ({"word_dropout": 1.0}, "train.word_dropout=1.0")])
def test_regulariser_settings_out_of_range_are_refused(settings, words):
    with pytest.raises(ConfigError, match=words):
        TrainConfig(**settings)


def test_a_short_run_with_both_regularisers_trains(tmp_path):
    from tests.test_training import _short_fit
    _, fit = _short_fit(tmp_path, seed=5, rdrop_alpha=5.0, word_dropout=0.1)
    records = (fit.run_dir.path / "metrics.jsonl").read_text().splitlines()
    assert records and fit.state.step > 0 and all("NaN" not in r for r in records)


def test_r_drop_from_a_fraction_of_the_budget_reads_the_budget():
    """`train.rdrop_from` switches R-Drop on from a fraction of the budget, so the loop must
    measure the budget for it as it does for a cooldown (it read 0.0 without one, and a late
    R-Drop never started)."""
    from mtx.training.control import Clock, budget_spent
    state, parallel = SimpleNamespace(epoch=5, batch_in_epoch=0), SimpleNamespace(mean=float)
    late = TrainConfig(rdrop_alpha=5.0, rdrop_from=0.5, max_epochs=300, max_minutes=60)
    clock = Clock(60, minutes_before=45.0)
    assert budget_spent(late, state, clock, parallel, 100) == pytest.approx(0.75, abs=0.01)
    for unread in (dataclasses.replace(late, rdrop_from=0.0),  # R-Drop all along
                   dataclasses.replace(late, rdrop_alpha=0.0)):  # no R-Drop
        assert budget_spent(unread, state, clock, parallel, 100) == 0.0


def test_bpe_dropout_from_a_fraction_cuts_later_epochs_and_a_resume_keeps_an_epochs_cut(tmp_path):
    """`data.subword_dropout_from`: an epoch is cut anew when it starts with that fraction of the
    budget spent or more; the choice is in the training state, so a run resumed inside an epoch
    keeps the epoch's cut (here: epoch 1 resumed after its first batch, cut anew)."""
    from mtx.config import DataConfig, RunConfig
    from mtx.training.run import new_fit
    from tests.test_data import _small_corpus
    corpus = _small_corpus(tmp_path)
    corpus.text["val"] = corpus.training_text.sides
    corpus.ids["val"] = corpus.train_pairs()
    model_cfg = model_config(vocab_size=len(corpus.tokenizer))
    fit = new_fit(corpus, RunConfig(
        model=model_cfg, data=DataConfig(subword_dropout=0.3, subword_dropout_from=0.5),
        train=TrainConfig(batch_tokens=256, max_epochs=4, eval_bleu=False, warmup_steps=2)),
        tmp_path / "run", [mx.cpu()])
    cuts, for_epoch = [], fit.train_pairs.for_epoch
    fit.train_pairs.for_epoch = lambda seed, cut: cuts.append(cut) or for_epoch(seed, cut)
    fit.state.batch_in_epoch, fit.state.epoch_resegmented = 1, True
    fit.run()
    assert cuts == [True, False, True, True]   # budget spent where epochs 2-4 start: 1/4, 2/4, 3/4
    assert fit.state.epoch == 4 and fit.state.epoch_resegmented is None
