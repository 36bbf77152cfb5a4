"""The pieces of training, built once from the configs: the model on its devices, in its
precision, hybridized; the loss; the Gluon Trainer with its KVStore; loss scales; the moving
average of the weights."""
import dataclasses
from dataclasses import dataclass
from typing import Dict, List, Optional

import mxnet as mx
from mxnet import gluon

from .. import kernels
from .loss import LabelSmoothedCrossEntropy, label_smoothed_loss
from .regularisers import terms_of
from .terms import FLOAT32_LOGITS, TermLosses, needed
from ..model.transformer import Transformer
from .optimizer import DynamicLossScale
from ..model.precision import set_precision
from .precision import check_device, choose_precision
from .ema import WeightAverage


@dataclass
class Pieces:
    model: Transformer
    loss_fn: LabelSmoothedCrossEntropy
    trainer: gluon.Trainer
    params: List            # the trainable parameters (gradients are clipped over them)
    ctxs: List              # this process's devices; ctxs[0] evaluates and translates
    loss_scales: Optional[Dict] = None  # per device, with dynamic loss scaling
    precision: Optional[Dict] = None    # `choose_precision`'s choice: used, requested, reason
    ema: Optional[WeightAverage] = None  # with train.ema_decay > 0
    terms: List = dataclasses.field(default_factory=list)  # `regularisers.terms_of`
    term_losses: Optional[TermLosses] = None  # the step's loss with the terms that act


def loss_reads_bfloat16(train_cfg, terms):
    """True where the loss takes the output layer's bfloat16 logits as they are: with bfloat16
    products, the native loss reads them and writes their gradient in bfloat16, so the step's
    largest array, (rows, V), is never cast; unless one of ``terms`` needs float32 logits."""
    return (train_cfg.precision == "bfloat16" and kernels.load()
            and not needed(terms, FLOAT32_LOGITS))


def build_pieces(model_cfg, train_cfg, ctxs, trainer_kvstore, precision=None, teacher=None):
    """``precision``: a choice made before (`choose_precision`, e.g. the one a resumed run
    started with); None: chosen now from ``train_cfg.precision``. ``teacher``: a
    `regularisers.Teacher` to distil from, or None."""
    precision = precision or choose_precision(train_cfg.precision, ctxs)
    check_device(precision["used"], ctxs)
    train_cfg = dataclasses.replace(train_cfg, precision=precision["used"])  # loss_scale follows
    terms = terms_of(train_cfg, teacher)
    model = Transformer(model_cfg)
    model.initialize(mx.init.Xavier(), ctx=ctxs)
    set_precision(model, train_cfg.precision)
    model.logits_in_compute_dtype = loss_reads_bfloat16(train_cfg, terms)
    if train_cfg.hybridize:
        model.hybridize(static_alloc=True)
    loss_fn = label_smoothed_loss(model_cfg.vocab_size, train_cfg.label_smoothing, ctxs)
    # Gradients are summed by the KVStore (several devices or workers), then clipped and guarded
    # by GuardedAdam's device-side scale; the update runs on every device/worker alike
    # (update_on_kvstore=False).
    trainer = gluon.Trainer(model.collect_params(), "guardedadam",
                            {"learning_rate": train_cfg.lr, "beta1": train_cfg.beta1,
                             "beta2": train_cfg.beta2, "epsilon": train_cfg.epsilon,
                             "wd": train_cfg.weight_decay},
                            kvstore=trainer_kvstore, update_on_kvstore=False)
    loss_scales = ({ctx: DynamicLossScale(ctx) for ctx in ctxs}
                   if train_cfg.dynamic_loss_scale else None)
    params = [p for p in model.collect_params().values() if p.grad_req != "null"]
    ema = WeightAverage(params, ctxs[0], train_cfg.ema_decay) if train_cfg.ema_decay else None
    return Pieces(model, loss_fn, trainer, params, list(ctxs), loss_scales, precision, ema, terms,
                  TermLosses(loss_fn, model_cfg.vocab_size, train_cfg.label_smoothing, ctxs))
