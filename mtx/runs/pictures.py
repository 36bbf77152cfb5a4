"""Pictures of a model and its study, drawn from numbers they are given (no model runs here):
attention heatmaps, head-importance heatmaps, pruning curves, learned gates during their
training and a run's learning curve."""
from pathlib import Path

import numpy as onp


def attention_pictures(weights, layers, source_labels, target_labels, out_dir):
    """One PNG per attention layer (its heads side by side) into ``out_dir``; returns the paths.

    ``weights``: one (H, Tq, Tk) array per layer, e.g. from `mtx.decoding.search.attention_of`;
    ``layers``: the matching rows of `ModelConfig.attention_layers` (their kind and layer name
    the picture, their query and key sides pick the labels); ``source_labels`` (S,) and
    ``target_labels`` (T,): one string per source and target position."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    labels = {"source": source_labels, "target": target_labels}
    paths = []
    for layer, w in zip(layers, weights):
        rows, columns = labels[layer.queries], labels[layer.keys]
        fig, axes = plt.subplots(1, w.shape[0], figsize=(3.2 * w.shape[0], 3.6), squeeze=False)
        for h, ax in enumerate(axes[0]):
            ax.imshow(w[h], cmap="viridis", vmin=0, vmax=1)
            ax.set_title(f"head {h + 1}", fontsize=9)
            ax.set_xticks(range(len(columns)), columns, rotation=90, fontsize=6)
            ax.set_yticks(range(len(rows)), rows, fontsize=6)
        fig.suptitle(f"{layer.kind} attention, layer {layer.layer + 1}", fontsize=10)
        fig.tight_layout()
        path = out_dir / f"{layer.kind.replace(' ', '_')}_layer{layer.layer + 1}.png"
        _save(fig, path)
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
    _save(fig, path)
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
    _save(fig, path)
    plt.close(fig)


def gate_training_plot(history, layer_names, heads_per_layer, path):
    """The learned gates during their training (`mtx.heads.gates.train_gates`'s history): the expected
    number of open heads against the aim, then one panel per attention layer with each head's
    P(gate open) against the step (the records that hold a copy of them)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = 1 + len(layer_names)
    columns = min(5, panels)
    rows = -(-panels // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(2.6 * columns, 2.2 * rows), squeeze=False)
    axes = axes.ravel()
    steps = [r["step"] for r in history]
    axes[0].plot(steps, [r["expected_open"] for r in history], label="expected open")
    axes[0].plot(steps, [r["aim"] for r in history], ls="--", color="gray", label="aim")
    axes[0].set_title("open heads", fontsize=8)
    axes[0].legend(fontsize=6)
    snapshots = [r for r in history if "open_probability" in r]
    for a, (ax, name) in enumerate(zip(axes[1:], layer_names)):
        for h in range(heads_per_layer[a]):
            ax.plot([r["step"] for r in snapshots], [r["open_probability"][a][h] for r in snapshots],
                    marker="o", ms=2, label=f"h{h + 1}")
        ax.set_title(name, fontsize=8)
        ax.set_ylim(-0.05, 1.05)
        if a == 0:
            ax.legend(fontsize=5, loc="center right")
    for ax in axes:
        ax.tick_params(labelsize=6)
        ax.grid(alpha=0.3)
    for ax in axes[panels:]:
        ax.set_visible(False)
    for ax in axes[(rows - 1) * columns:panels]:
        ax.set_xlabel("step", fontsize=7)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def learning_curve(records, path):
    """Train/val loss and val BLEU per validation (a run's metrics.jsonl records,
    `RunRecords.metrics`), against wall minutes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
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
    _save(fig, path)
    plt.close(fig)


def learning_curves(curves, path):
    """Val BLEU against wall minutes of several runs in one picture: {label: [(minutes, bleu)]}."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for label, points in curves.items():
        ax.plot(*zip(*points), marker="o", ms=3, label=label)
    ax.set(xlabel="training minutes", ylabel="val sacreBLEU (greedy)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def _save(fig, path):
    """Write ``fig`` as a PNG atomically (`mtx.files.atomic_write`)."""
    from ..files import atomic_write
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
