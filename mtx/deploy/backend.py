"""Translation with a CTranslate2 export: `CTranslate2Translator` keeps the promises of
`mtx.decoding.search.Translator` (lines in, per line the n-best (text, score) in input order; an empty
line gives ''; a line longer than the model's positions is cut, with a warning).

The decoding settings mean what they mean in mtx:
- ``max_len_a/b``: a sentence of S source subwords (with its EOS) gets at most
  ``min(ceil(a*S + b), max_len - 1)`` output subwords. CTranslate2 takes one
  ``max_decoding_length`` per call, so sentences are grouped by their limit.
- ``length_penalty`` is GNMT's alpha: CTranslate2 ranks finished hypotheses by
  ``sum_logp / length ** alpha``, so it is asked for all the hypotheses it finished, with their
  EOS (``return_end_token``, so a length counts the EOS as mtx's does); each score is turned back
  into its sum of log-probabilities and scored ``sum_logp / ((5 + length) / 6) ** alpha`` as in
  `mtx.decoding.search`, and the best ``nbest`` are kept.
- The search itself is CTranslate2's: a finished hypothesis leaves the beam (mtx keeps it in its
  slot, where better candidates may push it out) and the search stops after ``PATIENCE *
  beam_size`` finished hypotheses (mtx: when every slot holds a finished one). The empty
  hypothesis (EOS first) is dropped from a beam's results when there are others: mtx's beam
  pushes it out at the second step unless it is among the best ``beam_size`` candidates there,
  CTranslate2 keeps it and, at low length penalties, would return it. (Forbidding it with
  ``min_decoding_length=1`` would renormalise the first step's probabilities without EOS and
  change every score.) Greedy search is the same algorithm in both, EOS allowed at once. Where
  the two beams still end differently, each explored hypotheses the other did not (docs/deploy.md
  compares them).
"""
import copy
import logging
import os

from ..decoding.lines import LineTranslator
from ..decoding.search_rules import gnmt_penalty, output_limits
from ..data.vocab import EOS
from ..errors import ConfigError
from . import require
from .export import read_export_info

DEVICES = {"cpu": "cpu", "gpu": "cuda"}
# CTranslate2 ends a beam search after PATIENCE * beam_size finished hypotheses. With 1 (its
# default) it stops before mtx's beam would and misses better hypotheses that mtx finds; with 2
# its best hypothesis is mtx's, or one with a higher GNMT score, on nearly every sentence, for a
# little more time (docs/deploy.md).
PATIENCE = 2
# CPU instructions that multiply int8 with int8 and add in one step (VNNI, AMX). Without them
# CTranslate2's int8 products are slower than float32 ones, so an int8 export's weights are then
# dequantized to float32 at load (`compute_type`; docs/performance.md measures it).
INT8_DOT_PRODUCT_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
CT2_ISA_CAP = "CT2_FORCE_CPU_ISA"  # CTranslate2's own cap, e.g. AVX2


def compute_type(quantization, device="cpu"):
    """CTranslate2's compute type for an export stored as ``quantization`` on ``device``:
    "default" (the stored type), except an int8 export on a CPU without int8 dot-product
    instructions (or with CTranslate2 capped below AVX-512), which computes in float32."""
    from ..hardware.cpu import cpu_flags
    if device not in ("cpu", None) and not str(device).startswith("cpu"):
        return "default"
    if not str(quantization).startswith("int8"):
        return "default"
    cap = os.environ.get(CT2_ISA_CAP, "").upper()
    has_dot_product = bool(cpu_flags() & set(INT8_DOT_PRODUCT_FLAGS))
    return "default" if has_dot_product and (not cap or cap.startswith("AVX512")) else "float32"


def ct2_device(device):
    """mtx's device names (`mtx.hardware.devices.parse_device`) -> (CTranslate2 device, index).
    ``auto`` is resolved here, not by CTranslate2, so that the compute type is chosen for the
    device that runs (`compute_type`): CUDA device 0 when CTranslate2 sees one, else the CPU."""
    from ..hardware.devices import parse_device
    kind, index = parse_device(device)
    if kind == "auto":
        count = cuda_devices()
        kind = "gpu" if count else "cpu"
        logging.getLogger("mtx").info("device=auto: %s (CTranslate2 sees %d CUDA device(s))",
                                      "cuda:0" if count else "cpu", count)
    return DEVICES[kind], index if kind == "gpu" else 0


def cuda_devices():
    """How many CUDA devices CTranslate2 can use (0 where its CUDA libraries cannot load)."""
    try:
        return require().get_cuda_device_count()
    except RuntimeError:
        return 0


class CTranslate2Translator(LineTranslator):
    """Lines of text -> lines of text with an exported model directory (`mtx.deploy.export`)."""

    def __init__(self, model_dir, decode_cfg, device="cpu", compute="auto", threads=0):
        from ..data.corpus import load_tokenizer
        ctranslate2 = require()
        info = read_export_info(model_dir)
        self.cfg, self.info = decode_cfg, info
        self.max_len = info["model"]["max_len"]
        self.max_src_len = self.max_len - 1
        self.tokenizer = load_tokenizer(model_dir)
        source = self.tokenizer.source  # the target's own pieces with separate vocabularies
        self.pieces = source.pieces(range(len(source)))
        self.ids = {piece: i for i, piece in
                    enumerate(self.tokenizer.pieces(range(len(self.tokenizer))))}
        kind, index = ct2_device(device)
        self.compute_type = (compute_type(info.get("quantization"), kind) if compute == "auto"
                             else compute)
        if compute == "auto" and self.compute_type == "float32":
            logging.getLogger("mtx").info(
                "int8 export computed in float32 here: this CPU has no int8 dot-product "
                "instructions (VNNI/AMX) or %s caps them, and int8 products are slower "
                "without them (docs/deploy.md)", CT2_ISA_CAP)
        self.translator = ctranslate2.Translator(
            str(model_dir), device=kind, device_index=index, compute_type=self.compute_type,
            inter_threads=1, intra_threads=threads or int(os.environ.get("OMP_NUM_THREADS", 0)))

    def with_settings(self, decode_cfg):
        """The same loaded model with other decoding settings."""
        other = copy.copy(self)
        other.cfg = decode_cfg
        return other

    def _translate_batch(self, rows, limit):
        """Source id lists sharing output limit ``limit`` -> per row [(ids, score)]."""
        cfg, alpha = self.cfg, self.cfg.length_penalty
        beam = cfg.beam_size > 1
        results = self.translator.translate_batch(
            [[self.pieces[i] for i in ids] for ids in rows], beam_size=cfg.beam_size,
            patience=PATIENCE if beam else 1, length_penalty=alpha, return_scores=True,
            num_hypotheses=round(cfg.beam_size * PATIENCE) if beam else 1, return_end_token=True,
            min_decoding_length=0, max_decoding_length=limit, max_input_length=0,
            max_batch_size=cfg.batch_tokens, batch_type="tokens")
        out = []
        for result in results:
            hyps = []
            for tokens, score in zip(result.hypotheses, result.scores):
                length = len(tokens)  # CTranslate2 divided by length ** alpha, EOS included
                raw = score * length ** alpha
                ids = [self.ids[t] for t in tokens]
                hyps.append((ids[:-1] if ids and ids[-1] == EOS else ids,
                             float(raw / gnmt_penalty(length, alpha))))
            if beam:  # the EOS-first hypothesis, which mtx's beam drops (module docstring)
                hyps = [h for h in hyps if h[0]] or hyps
            hyps.sort(key=lambda h: -h[1])
            out.append(hyps[:cfg.nbest])
        return out

    def search(self, src_ids):
        """Non-empty lists of source ids (no EOS) -> per sentence [(ids, score)] (nbest of
        them), each output limit's sentences in one call."""
        results = [None] * len(src_ids)
        groups = {}
        for i, ids in enumerate(src_ids):
            limit = int(output_limits(len(ids) + 1, self.cfg.max_len_a, self.cfg.max_len_b,
                                      self.max_src_len))  # the source with its EOS
            groups.setdefault(limit, []).append(i)
        for limit, members in groups.items():
            found = self._translate_batch([src_ids[i] for i in members], limit)
            for i, hyps in zip(members, found):
                results[i] = hyps
        return results


def translator_for(ckpt, checkpoint, device, decode_cfg):
    """mtx-translate's CTranslate2 translator on ``device``: ``ckpt`` an exported directory, or a
    training run, whose checkpoint ``checkpoint`` is exported to float32 into a temporary
    directory first (CTranslate2 holds the model in memory once loaded)."""
    import logging
    import tempfile
    from . import is_export
    from .export import export_run
    require()
    if decode_cfg.precision != "float32":
        raise ConfigError(f"decode.precision={decode_cfg.precision} is for mtx's own decoder; "
                          f"CTranslate2 computes in its export's compute type (mtx-export "
                          f"quantization=): leave decode.precision out")
    if is_export(ckpt):
        return CTranslate2Translator(ckpt, decode_cfg, device)
    with tempfile.TemporaryDirectory(prefix="mtx-ct2-") as tmp:
        logging.getLogger("mtx").info("exporting %s to CTranslate2 (float32) for this "
                                      "translation; mtx-export keeps one", ckpt)
        export_run(ckpt, f"{tmp}/model", "float32", checkpoint)
        return CTranslate2Translator(f"{tmp}/model", decode_cfg, device)
