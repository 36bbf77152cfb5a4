"""What a request may hold, and the checks that turn it into decoding `Settings`.

The parsed JSON is checked against the bodies below (strict types: "5" is not a number, true is
not an integer; unknown fields are refused), each problem costing the same however many items
are wrong: `check_shape` names the first unknown field and counts /translate's sentences before
any item is looked at, and each list stops at its first wrong item (``fail_fast``), so a 64 KB
body of wrong items makes a handful of errors, not tens of thousands. `settings` and
`sentence_ids` then check it against the model and the server's limits (`mtx.serving.limits`).
Every problem is a `RequestError`: an HTTP status and one line naming the field and what it
should be. Nothing in a request names a file.
"""
import dataclasses
import math
from typing import Annotated, List, Optional

from pydantic import BaseModel, ConfigDict, Field

from ..errors import ConfigError
from .answers import RequestError
from .engine import Settings
from .limits import check_beam, check_sentence_count, check_sentence_lengths


SETTING_DECIMALS = 2  # length_penalty and gates are rounded to this (`settings`)


class _Decoding(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    beam_size: Optional[int] = None         # None: the server's decode.beam_size
    length_penalty: Optional[float] = None  # None: the server's decode.length_penalty
    gates: Optional[List[Annotated[List[float], Field(fail_fast=True)]]] = Field(
        None, fail_fast=True)  # (A, H): 1 keeps a head, 0 switches it off

    @classmethod
    def check_counts(cls, value, limits):
        """Counts that the limits bound, checked before validation (none here)."""


class TranslateBody(_Decoding):
    """POST /translate: sentences -> translations, in order."""
    text: List[str] = Field(fail_fast=True)
    nbest: Optional[int] = None  # None: the server's decode.nbest, at most the beam

    @classmethod
    def check_counts(cls, value, limits):
        if isinstance(value.get("text"), list):
            check_sentence_count(len(value["text"]), limits)


class AttentionBody(_Decoding):
    """POST /attention: one sentence -> its translation and every layer's attention."""
    text: str


def settings(body, limits, decode_cfg, model_cfg):
    """A checked body -> `Settings` (the server's decode defaults where the body has none).
    The decoding values are checked by `DecodeConfig`, as on the command line; the server
    adds its own limit of the beam."""
    beam = decode_cfg.beam_size if body.beam_size is None else body.beam_size
    check_beam(beam, limits)
    alpha = decode_cfg.length_penalty if body.length_penalty is None else body.length_penalty
    nbest = getattr(body, "nbest", 1)
    try:
        checked = dataclasses.replace(decode_cfg, beam_size=beam, length_penalty=alpha,
                                      nbest=min(decode_cfg.nbest, beam) if nbest is None else nbest)
    except ConfigError as err:  # named as the request's fields, not decode.*
        raise RequestError(str(err).replace("decode.", "")) from None
    # rounded: requests with equal settings share a model call, and 1.5 and 1.5000001 are equal
    return Settings(beam, round(float(checked.length_penalty), SETTING_DECIMALS), checked.nbest,
                    check_gates(body.gates, model_cfg))


def check_gates(gates, model_cfg):
    """gates (A, H) -> nested tuples, or None when absent or all ones (the same model call)."""
    if gates is None:
        return None
    layers = model_cfg.attention_layers()
    A, H = len(layers), model_cfg.num_heads
    if len(gates) != A:
        raise RequestError(f"gates has {len(gates)} rows; this model has {A} attention layers "
                           f"({', '.join(layer.name for layer in layers)}): give one row each")
    # a pruned layer's row may stop at its own heads (/info's "heads"): its padding slots are on
    gates = [row + [1.0] * (H - len(row)) if len(row) == model_cfg.heads_of(a) else row
             for a, row in enumerate(gates)]
    for a, row in enumerate(gates):
        if len(row) != H:
            heads = model_cfg.heads_of(a)
            raise RequestError(f"gates[{a}] ({layers[a].name}) has {len(row)} entries; give "
                               f"{heads}, one per head" + (f" (or {H})" if heads < H else ""))
        for h, value in enumerate(row):
            if not (math.isfinite(value) and 0 <= value <= 1):
                raise RequestError(f"gates[{a}][{h}]={value}: give a number from 0 (head off) "
                                   f"to 1 (head on)")
    rounded = tuple(tuple(round(float(v), SETTING_DECIMALS) for v in row) for row in gates)
    return None if all(value == 1 for row in rounded for value in row) else rounded


def sentence_ids(engine, lines, limits):
    """Sentences -> their source ids, checked against ``limits`` (`mtx.serving.limits`) and
    for text that UTF-8 cannot carry."""
    check_sentence_count(len(lines), limits)
    for i, line in enumerate(lines):
        try:
            line.encode("utf-8")
        except UnicodeEncodeError as err:
            raise RequestError(f"text[{i}] is not valid Unicode ({err.reason} at character "
                               f"{err.start}): send the text as UTF-8") from None
    ids = engine.encode(lines)
    check_sentence_lengths(ids, limits, engine.max_src_len)
    return ids


MAX_PROBLEMS_NAMED = 3  # one line: a list of a thousand wrong items names its first few
NOT_AN_OBJECT = "the body must be a JSON object, sent with Content-Type: application/json"


def check_shape(value, model, limits):
    """Before validation (`module docstring`): a JSON object, with no field that ``model``
    lacks, and the counts its ``check_counts`` bounds within ``limits``; else a RequestError."""
    if not isinstance(value, dict):
        raise RequestError(NOT_AN_OBJECT)
    unknown = [name for name in value if name not in model.model_fields]
    if unknown:  # as pydantic says it, but for the first few only
        raise RequestError(validation_message([{"loc": (name[:40],), "msg": "Extra inputs are "
                                                "not permitted"} for name in unknown[:4]],
                                              len(unknown)))
    model.check_counts(value, limits)


def validation_message(errors, count=None):
    """FastAPI's RequestValidationError.errors() -> one line naming the first problems' fields;
    ``count``: how many there are, when ``errors`` are the first of them."""
    parts = []
    for err in errors[:MAX_PROBLEMS_NAMED]:
        if err.get("type") == "json_invalid":
            reason = (err.get("ctx") or {}).get("error", "")
            parts.append(f"the body is not valid JSON ({reason})" if reason
                         else "the body is not valid JSON")
            continue
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}"
                        for p in err.get("loc", ()) if p != "body").lstrip(".")
        if not where and err.get("type") in ("model_attributes_type", "dict_type", "model_type"):
            parts.append(NOT_AN_OBJECT)
            continue
        parts.append(f"{where or 'the body'}: {err.get('msg', 'invalid')}")
    more = (len(errors) if count is None else count) - len(parts)
    parts = parts + ([f"and {more} more"] if more > 0 else [])
    return "; ".join(parts) or "the request body is not valid"
