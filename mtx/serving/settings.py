"""The server's settings, each declared once (`mtx.typecheck.setting`): `Limits` (mtx-serve's
``limits.*``: what one request may ask for, and what the server holds) and `Batching`
(``batching.*``). No MXNet or FastAPI here: the command checks them before anything loads.
Access (``access.*``) is `mtx.serving.access.Access`."""
import dataclasses
from dataclasses import dataclass
from typing import Optional

from ..typecheck import check_settings, setting


def _seconds(default, what):
    return setting(default, f"seconds above 0: {what}", above=0)


@dataclass(frozen=True)
class Limits:
    """Work is counted as source subwords (each sentence's with its EOS) times the beam: what a
    request costs the model."""
    max_sentences: int = setting(64, "sentences in one /translate request, 1 or more", low=1)
    max_body_bytes: int = setting(65536, "a request body's bytes, 1 or more", low=1)
    max_beam_size: int = setting(16, "the largest beam a request may ask for, 1 or more", low=1)
    max_queue: int = setting(256, "requests waiting for the model, 1 or more (more: 503)", low=1)
    max_attention_subwords: int = setting(128, "a /attention sentence's subwords (its weights "
                                               "grow with their square), 1 or more", low=1)
    max_attention_bytes: int = setting(8_000_000, "a /attention answer's JSON at most, bounded "
                                                  "before decoding (more: 413), 1 or more", low=1)
    max_sentence_subwords: Optional[int] = setting(None, "a sentence's source subwords, 1 or "
                                                         "more, or null: the run's data.max_len "
                                                         "(its training filter)", low=1)
    max_request_work: int = setting(8192, "source subwords (with EOS) x beam in one request, 1 "
                                          "or more (more: 413)", low=1)
    max_connections: int = setting(128, "open connections (the longest idle is closed for a "
                                        "newcomer) and requests at once (more: 503; /health and "
                                        "/ready always), 1 or more", low=1)
    head_seconds: float = _seconds(10.0, "a request line and headers must arrive within this "
                                         "(from the connection's start or its last answer), "
                                         "however they trickle; else closed")
    keepalive_seconds: float = _seconds(5.0, "an idle connection is closed this long after its "
                                             "last answer")
    max_header_bytes: int = setting(16384, "a request line and headers' bytes, 1 or more (more: "
                                           "431)", low=1)
    max_headers: int = setting(100, "header fields in a request, 1 or more (more: 431)", low=1)
    body_seconds: float = _seconds(10.0, "a request body that has not arrived by then gets 408")
    request_seconds: float = _seconds(30.0, "a request not answered by then gets 504 and its "
                                            "work is dropped")
    write_seconds: float = _seconds(10.0, "a client that takes none of its answer's bytes this "
                                          "long (or of what is left after a close) is dropped")
    batch_seconds: float = _seconds(120.0, "a model thread that owes work and finishes no batch "
                                           "this long fails /ready and /health (a supervisor "
                                           "restarts the server)")
    max_queue_work: int = setting(65536, "work waiting for the model, 1 or more (more: 503 with "
                                         "Retry-After)", low=1)
    client_share: float = setting(0.5, "the share of the requests at once and of the queue's "
                                       "requests and work one client (an IPv4 address, an IPv6 "
                                       "/64) may hold, above 0, at most 1 (1: no per-client "
                                       "limit)", above=0, high=1)

    def __post_init__(self):
        check_settings(self, "limits.")

    def for_run(self, data_max_len, max_src_len):
        """These limits with ``max_sentence_subwords`` resolved: the run's training filter
        (data.max_len), at most the model's positions."""
        most = self.max_sentence_subwords or data_max_len
        return dataclasses.replace(self, max_sentence_subwords=min(most, max_src_len))


@dataclass(frozen=True)
class Batching:
    """How long the model thread waits for requests to join a batch, and how much work (source
    subwords x beam) a batch takes at most."""
    max_wait_ms: float = setting(5.0, "milliseconds the model thread waits for more requests to "
                                      "join a batch, 0 to 1000", low=0, high=1000)
    max_batch_tokens: int = setting(8192, "work (source subwords x beam) per batch, 1 or more; a "
                                          "request's part is an eighth of it", low=1)

    def __post_init__(self):
        check_settings(self, "batching.")

    @property
    def part_tokens(self):
        """The work of one part of a request: an eighth of a batch, so a few heavy requests
        leave room for others in every batch (`mtx.serving.batcher`)."""
        return max(1, self.max_batch_tokens // 8)
