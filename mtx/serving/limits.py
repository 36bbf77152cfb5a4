"""Every check against the server's limits (`settings.Limits`, ``limits.*``), in one place: a
request's when it arrives (a `RequestError`: 413 when it is too much, 422 when it asks for what
no request may), and the limits' own when the server starts (a ConfigError: limits that would
refuse every request that the decode defaults make). Work is source subwords (each sentence's
with its EOS) times the beam."""
from ..errors import ConfigError
from .answers import RequestError


def request_work(ids, beam_size):
    """The work of sentences (lists of source ids) decoded at ``beam_size``."""
    return sum(len(sentence) + 1 for sentence in ids) * beam_size


def check_beam(beam, limits):
    """A request's beam (given, or the server's default): 1 to ``limits.max_beam_size``."""
    if not 1 <= beam <= limits.max_beam_size:
        raise RequestError(f"beam_size={beam}: give 1 to {limits.max_beam_size}")


def check_sentence_count(count, limits):
    """A /translate request's sentences: 1 to ``limits.max_sentences``."""
    if count == 0:
        raise RequestError(f"text is an empty list; give 1 to {limits.max_sentences} sentences")
    if count > limits.max_sentences:
        raise RequestError(f"text has {count} sentences; give at most {limits.max_sentences} per "
                           f"request", status=413)


def check_sentence_lengths(ids, limits, positions):
    """No sentence (source ids) over ``limits.max_sentence_subwords`` (resolved for the run by
    `Limits.for_run`), or the model's source ``positions`` where it is not set; the command-line
    translate cuts such a line, the API refuses it."""
    most = limits.max_sentence_subwords or positions
    for i, sentence in enumerate(ids):
        if len(sentence) > most:
            raise RequestError(f"text[{i}] has {len(sentence)} subwords; this server takes "
                               f"sentences of at most {most} (limits.max_sentence_subwords): "
                               f"split the sentence", status=413)


def check_work(ids, beam_size, limits):
    """The request's work (`request_work`); 413 naming the limit when it is over
    ``limits.max_request_work``."""
    work = request_work(ids, beam_size)
    if work > limits.max_request_work:
        raise RequestError(f"the request is {work} subwords x beam of work (its sentences' "
                           f"subwords with EOS, times beam {beam_size}); this server takes at most "
                           f"{limits.max_request_work} (limits.max_request_work): send fewer "
                           f"sentences or a smaller beam_size", status=413)
    return work


def check_attention(src_len, answer_bytes, limits):
    """An /attention sentence of ``src_len`` subwords whose answer may be ``answer_bytes``:
    422 when empty, 413 over ``limits.max_attention_subwords`` or ``limits.max_attention_bytes``."""
    if not src_len:
        raise RequestError("text is empty; give a sentence")
    most = limits.max_attention_subwords
    if src_len > most:
        raise RequestError(f"text has {src_len} subwords; /attention shows sentences of at most "
                           f"{most} (limits.max_attention_subwords): give a shorter one",
                           status=413)
    if answer_bytes > limits.max_attention_bytes:
        raise RequestError(f"/attention's answer for {src_len} subwords could be "
                           f"{answer_bytes:,} bytes; this server sends at most "
                           f"{limits.max_attention_bytes:,} (limits.max_attention_bytes): give "
                           f"a shorter sentence", 413)


def check_decode_defaults(decode_cfg, limits):
    """The server's decode.* are what a request without its own settings gets: they must be
    within what a request may ask for, or every such request would be refused (`DecodeConfig`
    has checked the rest). Before the run loads."""
    if decode_cfg.beam_size > limits.max_beam_size:
        raise ConfigError(f"decode.beam_size={decode_cfg.beam_size} is above "
                          f"limits.max_beam_size={limits.max_beam_size}: lower the one or raise "
                          f"the other")


def check_limits_fit(limits, decode_cfg):
    """A sentence of the longest length (``limits`` resolved for the run) at the default beam
    must be within the work limit, or every such request would be refused."""
    longest = (limits.max_sentence_subwords + 1) * decode_cfg.beam_size
    if longest > limits.max_request_work:
        raise ConfigError(f"limits.max_request_work={limits.max_request_work} is below one "
                          f"sentence of limits.max_sentence_subwords="
                          f"{limits.max_sentence_subwords} at decode.beam_size="
                          f"{decode_cfg.beam_size} ({longest}): raise it, or lower the others")
