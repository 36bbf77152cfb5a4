"""Print the cost table of docs/attention.md: head width, parameters and multiply-adds of one
MultiHeadAttention call, for a fixed width and several head counts.

    .venv/bin/python scripts/attention_costs.py [--num-hiddens 256] [--length 20]

Parameters are counted on an initialized block. Multiply-adds are counted from the shapes the
block really produces (one batch, Tq = Tk = length): the four projections, then the two
batched products (scores Q K^T and context A V) over all B*H heads at once.
"""
import argparse

import numpy as onp
from mxnet import nd, np, npx

from mtx.attention import MultiHeadAttention, transpose_qkv


def dense_macs(x, dense):
    """Multiply-adds of ``dense`` applied to x (..., in): rows * in * out."""
    out_units, in_units = dense.weight.shape
    return int(onp.prod(x.shape[:-1])) * in_units * out_units


def attention_costs(num_hiddens, num_heads, length):
    """(head width, parameters, multiply-adds, shape of the batched products) of one call."""
    block = MultiHeadAttention(num_hiddens, num_heads, in_units=num_hiddens)
    block.initialize()
    params = sum(p.data().size for p in block.collect_params().values())
    x = np.ones((1, length, num_hiddens))  # queries = keys = values, (B, T, D)
    q_heads = transpose_qkv(block.W_q(x), num_heads, nd)  # (B*H, Tq, Dh)
    k_heads, _ = block.project_kv(nd, x, x)  # (B*H, Tk, Dh)
    N, Tq, Dh = q_heads.shape
    Tk = k_heads.shape[1]
    projections = sum(dense_macs(x, dense) for dense in (block.W_q, block.W_k, block.W_v))
    projections += dense_macs(x, block.W_o)  # the merged heads are (B, Tq, H*Dh) = (B, Tq, D)
    scores = N * Tq * Tk * Dh  # (N, Tq, Dh) x (N, Dh, Tk) -> (N, Tq, Tk)
    context = N * Tq * Tk * Dh  # (N, Tq, Tk) x (N, Tk, Dh) -> (N, Tq, Dh)
    assert block(x, x, x).shape == x.shape
    return Dh, params, (projections, scores, context), f"{N} × ({Tq}×{Dh})·({Dh}×{Tk})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-hiddens", type=int, default=256)
    parser.add_argument("--length", type=int, default=20, help="Tq = Tk")
    parser.add_argument("--heads", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    args = parser.parse_args()
    npx.set_np()
    print(f"num_hiddens = {args.num_hiddens}, Tq = Tk = {args.length}, batch 1, no bias\n")
    print("| heads | head width | parameters | projection MACs | score + context MACs "
          "| total MACs | batched product (scores) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | :--- |")
    for num_heads in args.heads:
        Dh, params, (proj, scores, context), shape = attention_costs(
            args.num_hiddens, num_heads, args.length)
        print(f"| {num_heads} | {Dh} | {params:,} | {proj:,} | {scores + context:,} "
              f"| {proj + scores + context:,} | {shape} |")


if __name__ == "__main__":
    main()
