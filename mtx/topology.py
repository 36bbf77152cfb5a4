"""The attention layers of a model, in the one order that every per-layer list and (A, H) array
uses (head gates, importance rows, `ModelConfig.heads_per_layer`, attention weights, pictures):
the encoder's self-attention layers, then self and cross attention for each decoder layer."""
from typing import NamedTuple


class AttentionLayer(NamedTuple):
    """One attention layer of the model, as `ModelConfig.attention_layers` lists them."""
    row: int    # its row in (A, H) head gates, importance scores and weight lists
    name: str   # short label: 'enc0 self', 'dec1 cross'
    kind: str   # 'encoder self' | 'decoder self' | 'decoder cross'
    layer: int  # index of its encoder or decoder layer

    @property
    def queries(self):
        """Which sequence the queries come from: 'source' or 'target'."""
        return "source" if self.kind == "encoder self" else "target"

    @property
    def keys(self):
        """Which sequence the keys come from: 'source' or 'target'."""
        return "target" if self.kind == "decoder self" else "source"


def attention_layers(num_encoder_layers, num_decoder_layers):
    """[AttentionLayer] of a model with these numbers of layers, row 0 first."""
    kinds = ([("enc", "encoder self", i) for i in range(num_encoder_layers)]
             + [("dec", f"decoder {part}", i) for i in range(num_decoder_layers)
                for part in ("self", "cross")])
    return [AttentionLayer(row, f"{side}{layer} {kind.split()[1]}", kind, layer)
            for row, (side, kind, layer) in enumerate(kinds)]
