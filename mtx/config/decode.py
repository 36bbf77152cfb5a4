"""The search's settings: `DecodeConfig` (Hydra group ``decode``)."""
import dataclasses
import math
from dataclasses import dataclass

from ..errors import ConfigError


@dataclass(frozen=True)
class DecodeConfig:
    beam_size: int = 5
    length_penalty: float = 1.5     # GNMT alpha (`gnmt_penalty`), 0 to 10; chosen on val
    max_len_a: float = 1.5          # max output length = a * source length + b (`output_limits`)
    max_len_b: int = 10
    nbest: int = 1
    batch_tokens: int = 4096

    def greedy(self):
        """Greedy (beam 1, no length penalty, one output): validation's and the head study's."""
        return dataclasses.replace(self, beam_size=1, length_penalty=0.0, nbest=1)

    def __post_init__(self):
        if self.beam_size < 1:
            raise ConfigError(f"decode.beam_size={self.beam_size} must be at least 1")
        if not 1 <= self.nbest <= self.beam_size:
            raise ConfigError(f"decode.nbest={self.nbest} must be between 1 and decode.beam_size")
        if not (math.isfinite(self.length_penalty)
                and 0 <= self.length_penalty <= MAX_LENGTH_PENALTY):
            raise ConfigError(f"decode.length_penalty={self.length_penalty}: give a number from "
                              f"0 (no penalty) to {MAX_LENGTH_PENALTY}; 1.5 is the default")
        if self.batch_tokens < 1:
            raise ConfigError(f"decode.batch_tokens={self.batch_tokens}: give 1 or more source "
                              f"subwords per batch")
        if (not math.isfinite(self.max_len_a) or self.max_len_a < 0 or self.max_len_b < 0
                or self.max_len_a == self.max_len_b == 0):
            raise ConfigError(f"decode.max_len_a={self.max_len_a}, decode.max_len_b="
                              f"{self.max_len_b}: the output limit a * source length + b needs "
                              f"a, b >= 0 and one of them > 0")


# Above it ((5 + length) / 6) ** alpha leaves float32's range: long hypotheses all score alike.
MAX_LENGTH_PENALTY = 10
