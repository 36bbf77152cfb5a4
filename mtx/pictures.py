"""Attention heatmaps: every layer's and head's attention for one sentence and its translation."""
from pathlib import Path

import numpy as onp
from mxnet import np

from .search import greedy_search
from .vocab import BOS, EOS


def attention_weights(model, src_ids, tgt_ids, ctx):
    """Teacher-forced pass over (source, translation) ->
    {(kind, layer): (H, rows, columns)} for encoder self, decoder self and decoder cross."""
    src = np.array([src_ids + [EOS]], dtype="int32", ctx=ctx)
    src_len = np.array([len(src_ids) + 1], dtype="int32", ctx=ctx)
    tgt_in = np.array([[BOS] + tgt_ids], dtype="int32", ctx=ctx)
    layers = model.attention_weights(src, src_len, tgt_in)
    num_enc = model.cfg.num_encoder_layers
    kinds = [("encoder self", i) for i in range(num_enc)] + [
        (kind, i) for i in range(model.cfg.num_decoder_layers)
        for kind in ("decoder self", "decoder cross")]
    return {kind: w.asnumpy() for kind, w in zip(kinds, layers)}


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


def importance_heatmaps(scores, layer_names, path):
    """One heatmap per score (layers x heads), side by side, into ``path`` (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(scores), figsize=(3.6 * len(scores), 0.45 * len(layer_names) + 1.5),
                             squeeze=False)
    for ax, (name, values) in zip(axes[0], scores.items()):
        image = ax.imshow(values, cmap="magma", aspect="auto")
        ax.set_title(name.replace("_", " "), fontsize=9)
        ax.set_xticks(range(values.shape[1]), [f"h{h + 1}" for h in range(values.shape[1])], fontsize=7)
        ax.set_yticks(range(len(layer_names)), layer_names, fontsize=7)
        for (a, h), v in onp.ndenumerate(values):
            ax.text(h, a, f"{v:.2f}", ha="center", va="center", fontsize=6, color="cyan")
        fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def pruning_plot(curves, total_heads, path):
    """BLEU vs heads removed, one line per removal order."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for name, points in curves.items():
        xs, ys = zip(*points)
        style = ({"importance": dict(color="C0", lw=2), "iterative": dict(color="C1", lw=2),
                  "iterative_loss": dict(color="C2", lw=2)}
                 .get(name, dict(color="gray", lw=1, ls="--")))
        ax.plot([100 * x / total_heads for x in xs], ys, marker="o", ms=3, label=name, **style)
    ax.set_xlabel("heads gated off (% of all)")
    ax.set_ylabel("BLEU (greedy)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def learning_curve(metrics_path, path):
    """Train/val loss and val BLEU per epoch from a run's metrics.jsonl, against wall minutes."""
    import json
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    records = [json.loads(line) for line in Path(metrics_path).read_text().splitlines()]
    minutes = [r["wall_minutes"] for r in records]
    fig, (loss_ax, bleu_ax) = plt.subplots(1, 2, figsize=(9, 3.4))
    loss_ax.plot(minutes, [r["train/loss"] for r in records], marker="o", ms=3, label="train")
    loss_ax.plot(minutes, [r["valid/loss"] for r in records], marker="o", ms=3, label="val")
    loss_ax.set(xlabel="training minutes", ylabel="loss (nll per token)")
    loss_ax.legend()
    bleu_ax.plot(minutes, [r["valid/bleu"] for r in records], marker="o", ms=3, color="C2")
    bleu_ax.set(xlabel="training minutes", ylabel="val sacreBLEU (greedy)")
    for ax in (loss_ax, bleu_ax):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
