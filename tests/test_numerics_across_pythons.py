"""The numbers do not move with the Python (3.9-3.13) and numpy (1.23.5 or 1.26.4) underneath:
the first 60 training steps of a small Transformer on a fixed-seed toy task (reversing random
sequences) give the losses that Python 3.11 with numpy 1.23.5 gave, step by step.

The reference (tests/data/first_steps_reference.json) was written by
`.venv/bin/python -m tests.test_numerics_across_pythons` on Python 3.11; what it records says
where. Largest relative distance from it measured on one AMD EPYC (AVX-512): Python 3.12 and
3.13 (numpy 1.26.4) 7.9e-8, oneDNN capped at AVX2 9.5e-8, MXNet's operators instead of mtx's
native kernels 3.4e-7 (float32 rounding). The tolerance, 1e-4 relative on every step, leaves
room for other CPUs' kernels and catches any change of what is computed."""
import json
import platform
import sys
from pathlib import Path

import numpy as onp

from mtx.training.loss import label_smoothed_loss
from mtx.model.transformer import Transformer
import mxnet as mx  # noqa: E402  (after mtx: mtx.compat prepares numpy for it)
from mxnet import autograd, gluon, np, npx  # noqa: E402
from tests.conftest import model_config  # noqa: E402

REFERENCE = Path(__file__).parent / "data" / "first_steps_reference.json"
RELATIVE_TOLERANCE = 1e-4
STEPS, BATCH, SRC_LEN, VOCAB = 60, 16, 12, 50


def first_training_losses(steps=STEPS):
    """Mean smoothed loss per sentence of each of the first ``steps`` Adam steps (float32,
    dropout 0.1, hybridized), on batches drawn from a fixed seed: the target is the source
    reversed."""
    npx.set_np()
    mx.random.seed(0)
    draw = onp.random.RandomState(0)
    cfg = model_config(num_hiddens=32, num_heads=4, ffn_num_hiddens=64, num_encoder_layers=2,
                       num_decoder_layers=2, dropout=0.1, attention_dropout=0.1, max_len=32,
                       vocab_size=VOCAB)
    net = Transformer(cfg)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    loss_fn = label_smoothed_loss(VOCAB, 0.1, mx.cpu())
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 2e-3, "beta2": 0.98})
    losses = []
    for _ in range(steps):
        src = draw.randint(3, VOCAB, size=(BATCH, SRC_LEN))  # (batch, seq)
        lengths = draw.randint(2, SRC_LEN + 1, size=BATCH)  # (batch,)
        tgt = np.array(src[:, ::-1], dtype="int32")  # (batch, seq): input [:-1], output [1:]
        src, lengths = np.array(src, dtype="int32"), np.array(lengths, dtype="int32")
        with autograd.record():
            logits = net(src, lengths, tgt[:, :-1])  # (batch, seq - 1, vocab)
            loss = loss_fn(logits, tgt[:, 1:], np.minimum(lengths, SRC_LEN - 1))[0]
        loss.backward()
        trainer.step(BATCH)
        losses.append(float(loss) / BATCH)
    return losses


def test_the_first_training_steps_match_python_3_11():
    reference = json.loads(REFERENCE.read_text())
    losses = first_training_losses()
    assert len(losses) == len(reference["losses"]) == STEPS
    off = [(step, got, want) for step, (got, want) in enumerate(zip(losses, reference["losses"]))
           if abs(got - want) > RELATIVE_TOLERANCE * abs(want)]
    assert not off, f"steps whose loss moved from the reference's ({reference['python']}): {off}"
    assert losses[-1] < losses[0]  # it learns


if __name__ == "__main__":
    REFERENCE.write_text(json.dumps({
        "written_by": "python -m tests.test_numerics_across_pythons",
        "python": platform.python_version(), "numpy": onp.__version__,
        "mxnet": mx.__version__, "machine": platform.processor() or platform.machine(),
        "losses": first_training_losses()}, indent=1) + "\n")
    print(f"wrote {REFERENCE}", file=sys.stderr)
