"""Attention heatmaps: every layer's and head's attention for one sentence and its translation."""
from pathlib import Path

import numpy as onp
from mxnet import nd, np

from .search import greedy_search
from .vocab import BOS, EOS


def attention_weights(model, src_ids, tgt_ids, ctx):
    """Teacher-forced pass over (source, translation) ->
    {(kind, layer): (H, rows, columns)} for encoder self, decoder self and decoder cross."""
    src = np.array([src_ids + [EOS]], dtype="int32", ctx=ctx)
    src_len = np.array([len(src_ids) + 1], dtype="int32", ctx=ctx)
    weights = {}
    X = model.src_embed(src)
    for i, block in enumerate(model.encoder.blocks):
        h = block.addnorm1.sublayer_input(X)
        weights[("encoder self", i)] = block.attention.attend(nd, h, h, h, src_len)[1].asnumpy()
        X = block(X, src_len)
    state = model.init_state(src, src_len)
    T = len(tgt_ids) + 1
    for i in range(len(model.decoder.blocks)):
        weights[("decoder self", i)] = onp.zeros((model.decoder.blocks[i].self_attention.num_heads,
                                                  T, T), "float32")
        weights[("decoder cross", i)] = []
    for t, token in enumerate([BOS] + tgt_ids):
        y = model.tgt_embed.step(np.array([[token]], dtype="int32", ctx=ctx), t)
        for i, (block, cache) in enumerate(zip(model.decoder.blocks, state["caches"])):
            y, self_w, cross_w = block.step(y, cache, src_len)
            weights[("decoder self", i)][:, t, :t + 1] = self_w.asnumpy()[:, 0, :]
            weights[("decoder cross", i)].append(cross_w.asnumpy()[:, 0, :])
    for i in range(len(model.decoder.blocks)):
        weights[("decoder cross", i)] = onp.stack(weights[("decoder cross", i)], axis=1)
    return weights


def attention_pictures(model, tokenizer, sentence, out_dir, ctx):
    """Translate ``sentence`` greedily and write one PNG per attention layer (heads side by
    side) into ``out_dir``; returns the paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    src_ids = tokenizer.encode([sentence])[0]
    src = np.array([src_ids + [EOS]], dtype="int32", ctx=ctx)
    tgt_ids = greedy_search(model, src, np.array([len(src_ids) + 1], dtype="int32", ctx=ctx))[0]
    labels = {"src": tokenizer.pieces(src_ids) + ["</s>"],
              "tgt": ["<s>"] + tokenizer.pieces(tgt_ids)}
    paths = []
    for (kind, layer), w in attention_weights(model, src_ids, tgt_ids, ctx).items():
        rows = labels["src"] if kind == "encoder self" else labels["tgt"]
        columns = labels["tgt"] if kind == "decoder self" else labels["src"]
        fig, axes = plt.subplots(1, w.shape[0], figsize=(3.2 * w.shape[0], 3.6), squeeze=False)
        for h, ax in enumerate(axes[0]):
            ax.imshow(w[h], cmap="viridis", vmin=0, vmax=1)
            ax.set_title(f"head {h + 1}", fontsize=9)
            ax.set_xticks(range(len(columns)), columns, rotation=90, fontsize=6)
            ax.set_yticks(range(len(rows)), rows, fontsize=6)
        fig.suptitle(f"{kind} attention, layer {layer + 1}", fontsize=10)
        fig.tight_layout()
        path = out_dir / f"{kind.replace(' ', '_')}_layer{layer + 1}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths
