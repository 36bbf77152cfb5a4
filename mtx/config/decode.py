"""The search's settings: `DecodeConfig` (Hydra group ``decode``)."""
import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Dict

from ..errors import ConfigError
from ..typecheck import check_settings, setting
from .train import MKL_BFLOAT16

DECODE_PRECISIONS = ("float32", MKL_BFLOAT16)  # the products of a run loaded to translate


# Above it ((5 + length) / 6) ** alpha leaves float32's range: long hypotheses all score alike.
MAX_LENGTH_PENALTY = 10


@dataclass(frozen=True)
class DecodeConfig:
    """The search's settings; the defaults are beam search (conf/decode/beam.yaml)."""
    # {old key: key} of settings renamed: runs and configs written before still load
    # (`mtx.typecheck.renamed`)
    RENAMED: ClassVar[Dict[str, str]] = {}
    beam_size: int = setting(5, "1 or more hypotheses per sentence (1: greedy)", low=1)
    length_penalty: float = setting(1.5, f"GNMT's alpha (`gnmt_penalty`), from 0 (no penalty) to "
                                         f"{MAX_LENGTH_PENALTY}; 1.5 was chosen on val among 0.6, "
                                         f"1.0, 1.5, 2.0 at beam 4, 5, 8 (docs/results.md)",
                                    low=0, high=MAX_LENGTH_PENALTY)
    max_len_a: float = setting(1.5, "a >= 0 of the output limit a * source length + b "
                                    "(`output_limits`)", low=0)
    max_len_b: int = setting(10, "b >= 0 of the output limit a * source length + b", low=0)
    nbest: int = setting(1, "translations returned per sentence, 1 to decode.beam_size", low=1)
    batch_tokens: int = setting(4096, "source subwords per batch, 1 or more", low=1)
    precision: str = setting("float32", f"the products of mtx-translate, mtx-evaluate and "
                                        f"mtx-serve, one of {', '.join(DECODE_PRECISIONS)} "
                                        f"(oneMKL's bfloat16, `make install MKL=1`); a training's "
                                        f"own translations use train.precision",
                             choices=DECODE_PRECISIONS)

    def greedy(self):
        """Greedy (beam 1, no length penalty, one output): validation's and the head study's."""
        return dataclasses.replace(self, beam_size=1, length_penalty=0.0, nbest=1)

    def __post_init__(self):
        check_settings(self, "decode.")
        if self.nbest > self.beam_size:
            raise ConfigError(f"decode.nbest={self.nbest} must be between 1 and decode.beam_size")
        if self.max_len_a == self.max_len_b == 0:
            raise ConfigError("decode.max_len_a=0, decode.max_len_b=0: the output limit a * "
                              "source length + b needs one of them > 0")
