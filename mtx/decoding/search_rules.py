"""The rules of every search in mtx, its own (`mtx.decoding.search`) and CTranslate2's
(`mtx.deploy.backend`): how long an output may be, and how a hypothesis is scored.

No MXNet here: the CTranslate2 backend translates in a process that never loads it.
"""
import numpy as onp


def gnmt_penalty(length, alpha):
    """The GNMT length penalty ``((5 + length) / 6) ** alpha`` (Wu et al. 2016): beam search
    ranks a hypothesis by its sum of log-probabilities divided by it; a number or an array."""
    return ((5.0 + length) / 6.0) ** alpha


def output_limits(src_valid_len, max_len_a, max_len_b, max_src_len):
    """Output subwords allowed for sources of ``src_valid_len`` ids (their EOS included), a
    number or an array: ``ceil(a * src_valid_len + b)``, at most the model's ``max_src_len``
    positions (at least 1, since `DecodeConfig` keeps a or b above 0)."""
    return onp.minimum(onp.ceil(max_len_a * onp.asarray(src_valid_len) + max_len_b),
                       max_src_len).astype("int64")
