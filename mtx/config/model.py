"""The model's settings: `ModelConfig` (Hydra group ``model``)."""
from dataclasses import dataclass
from typing import ClassVar, Dict, List, Optional

from ..errors import ConfigError
from ..typecheck import check_settings, setting
from ..topology import attention_layers


@dataclass(frozen=True)
class ModelConfig:
    """The default is the small model (conf/model/small.yaml: width 256, 4 heads, 3+3 layers, tied
    embeddings; 7.6M parameters with an 8000-subword vocabulary)."""
    # {old key: key} of settings renamed: runs and configs written before still load
    # (`mtx.typecheck.renamed`)
    RENAMED: ClassVar[Dict[str, str]] = {}
    num_hiddens: int = setting(256, "the model width D, 1 or more (each head is D / H wide)",
                               low=1)
    num_heads: int = setting(4, "H, a head count that divides model.num_hiddens", low=1)
    ffn_num_hiddens: int = setting(1024, "the inner width of the position-wise FFN, 1 or more",
                                   low=1)
    num_encoder_layers: int = setting(3, "1 or more layers", low=1)
    num_decoder_layers: int = setting(3, "1 or more layers", low=1)
    dropout: float = setting(0.2, "the dropout on embeddings and sublayer outputs, in [0, 1); "
                                  "0.2: the best of 0.1, 0.2, 0.3 (docs/results.md)",
                             low=0, below=1)
    attention_dropout: float = setting(0.1, "the dropout on attention weights, in [0, 1)",
                                       low=0, below=1)
    tie_embeddings: bool = setting(True, "true: one matrix for the source, target and output "
                                         "embeddings with a joint vocabulary; for the target and "
                                         "output only with separate ones (data.vocab)")
    pre_norm: bool = setting(False, "true: LayerNorm before each sublayer instead of after")
    max_len: int = setting(1024, "the positions the positional table covers, at least 2 (a "
                                 "subword and the end of the sentence)", low=2)
    vocab_size: int = setting(0, "0 (taken from the data)", low=0)
    src_vocab_size: int = setting(0, "0: the source shares the target's (joint) vocabulary; "
                                     "else the source's own (taken from the data)", low=0)
    heads_per_layer: Optional[List[int]] = setting(
        None, "null (H heads in every layer), or a pruned model's heads per attention layer",
        low=1)

    def __post_init__(self):
        check_settings(self, "model.")
        if self.num_hiddens % self.num_heads:
            raise ConfigError(f"model.num_hiddens={self.num_hiddens} is not divisible by "
                              f"model.num_heads={self.num_heads}; pick a head count that divides "
                              f"the width (each head is num_hiddens / num_heads wide)")
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
