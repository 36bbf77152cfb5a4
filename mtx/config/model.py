"""The model's settings: `ModelConfig` (Hydra group ``model``)."""
from dataclasses import dataclass
from typing import List, Optional

from ..errors import ConfigError
from ..topology import attention_layers


@dataclass(frozen=True)
class ModelConfig:
    num_hiddens: int = 256          # D, the model width
    num_heads: int = 4              # H; each head is D / H wide
    ffn_num_hiddens: int = 1024     # inner width of the position-wise FFN
    num_encoder_layers: int = 3
    num_decoder_layers: int = 3
    dropout: float = 0.1            # on embeddings and sublayer outputs
    attention_dropout: float = 0.1  # on attention weights
    tie_embeddings: bool = True     # one matrix for source, target and output (shared vocabulary)
    pre_norm: bool = False          # LayerNorm before each sublayer instead of after
    max_len: int = 1024             # longest sequence the positional table covers
    vocab_size: int = 0             # taken from the data; 0 until it is known
    heads_per_layer: Optional[List[int]] = None  # after pruning (`attention_layers`); None: H

    def __post_init__(self):
        if self.num_heads < 1 or self.num_hiddens % self.num_heads:
            raise ConfigError(f"model.num_hiddens={self.num_hiddens} is not divisible by "
                              f"model.num_heads={self.num_heads}; pick a head count that divides "
                              f"the width (each head is num_hiddens / num_heads wide)")
        for key in ("num_hiddens", "ffn_num_hiddens", "num_encoder_layers", "num_decoder_layers"):
            if getattr(self, key) < 1:
                raise ConfigError(f"model.{key}={getattr(self, key)} must be at least 1")
        for key in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise ConfigError(f"model.{key}={getattr(self, key)} must be in [0, 1)")
        if self.max_len < 2:  # a subword and the end-of-sentence mark
            raise ConfigError(f"model.max_len={self.max_len}: give at least 2 positions (a "
                              f"subword and the end of the sentence); the default is 1024")
        if self.heads_per_layer is not None and len(self.heads_per_layer) != self.num_attention_layers:
            raise ConfigError(f"model.heads_per_layer has {len(self.heads_per_layer)} entries; "
                              f"the model has {self.num_attention_layers} attention layers")

    @property
    def max_src_len(self):
        """The longest source (and output) in subwords: the positions less its EOS (or BOS)."""
        return self.max_len - 1

    @property
    def head_dim(self):
        return self.num_hiddens // self.num_heads

    def attention_layers(self):
        """[`mtx.topology.AttentionLayer`] of this model, in the order of every (A, H) array."""
        return attention_layers(self.num_encoder_layers, self.num_decoder_layers)

    @property
    def num_attention_layers(self):
        """A, the number of rows of `attention_layers`."""
        return len(self.attention_layers())

    def attention_row(self, kind, layer):
        """The row of attention layer (``kind``, ``layer``), e.g. ('decoder cross', 0)."""
        return next(a.row for a in self.attention_layers() if (a.kind, a.layer) == (kind, layer))

    def heads_of(self, row):
        """Heads of the attention layer in row ``row`` of `attention_layers`."""
        return self.num_heads if self.heads_per_layer is None else self.heads_per_layer[row]

    @property
    def heads_by_layer(self):
        """[heads of each attention layer], in `attention_layers` order."""
        return [self.heads_of(row) for row in range(self.num_attention_layers)]

    @property
    def total_heads(self):
        """The heads of every attention layer together (a pruned model's layers may differ)."""
        return sum(self.heads_by_layer)
