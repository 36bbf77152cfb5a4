"""What the routes answer: translations and attention through the model worker, the run's
description (/info), the worker's state (/health) and the head study (/heads).

Requests are checked here, in the event loop, before they reach the queue (`mtx.serving.bodies`);
the model's work happens in the worker thread and the handler awaits its future, so the event
loop stays free to take more requests while the model is busy, and those are batched.
"""
import asyncio
import dataclasses
import logging
from dataclasses import dataclass

from ..devices import use_numpy_interface
from ..errors import ConfigError
from .bodies import RequestError, sentence_ids, settings
from .engine import ATTENTION, TRANSLATE, Engine
from .study import head_study
from .worker import Busy, ModelWorker, Stopping

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Batching:
    """conf/serve.yaml ``batching``: how long the worker waits for requests to join a batch,
    and how many source subwords a batch takes at most."""
    max_wait_ms: float = 5.0
    max_batch_tokens: int = 2048

    def __post_init__(self):
        if not 0 <= self.max_wait_ms <= 1000:
            raise ConfigError(f"batching.max_wait_ms={self.max_wait_ms}: give 0 to 1000")
        if self.max_batch_tokens < 1:
            raise ConfigError(f"batching.max_batch_tokens={self.max_batch_tokens}: give 1 or more")


class Service:
    """One loaded run served: ``engine`` (the model), the worker that owns it, the limits."""

    def __init__(self, engine: Engine, limits, batching: Batching, info, study):
        self.engine, self.limits, self.info, self.study = engine, limits, info, study
        self.worker = ModelWorker(engine.run_batch, batching.max_wait_ms / 1000,
                                  batching.max_batch_tokens, limits.max_queue,
                                  on_start=self._start_worker)

    def _start_worker(self):
        use_numpy_interface()  # MXNet's NumPy mode is per thread
        self.engine.warm_up()

    def start(self):
        """Start the worker and wait for its warm-up (the first model calls trace graphs)."""
        self.worker.start()

    def close(self):
        """Refuse new requests from now on; those queued are still answered."""
        self.worker.close()

    def stop(self, timeout):
        self.worker.stop(timeout)

    async def translate(self, body):
        decode = settings(body, self.limits, self.engine.decode_cfg, self.engine.model.cfg)
        ids = sentence_ids(self.engine, body.text, self.limits)
        nbest = await self._ask((TRANSLATE, decode), ids, sum(len(s) + 1 for s in ids))
        out = {"translations": [hyps[0][0] for hyps in nbest],
               "scores": [round(hyps[0][1], 4) for hyps in nbest]}
        if decode.nbest > 1:
            out["nbest"] = [[{"text": text, "score": round(score, 4)} for text, score in hyps]
                            for hyps in nbest]
        return out

    async def attention(self, body):
        decode = settings(body, self.limits, self.engine.decode_cfg, self.engine.model.cfg)
        ids = sentence_ids(self.engine, [body.text], self.limits)[0]
        if not ids:
            raise RequestError("text is empty; give a sentence")
        most = self.limits.max_attention_subwords
        if len(ids) > most:
            raise RequestError(f"text has {len(ids)} subwords; /attention shows sentences of at "
                               f"most {most} (limits.max_attention_subwords): give a shorter "
                               f"one", status=413)
        return await self._ask((ATTENTION, decode), ids, len(ids) + 1)

    def health(self):
        stats = self.worker.stats
        return {"status": "stopping" if self.worker.stopping else "ok",
                "queued": self.worker.queued(), **dataclasses.asdict(stats)}

    async def _ask(self, key, payload, tokens):
        """The worker's answer to one job; busy or stopping -> 503."""
        try:
            future = self.worker.submit(key, payload, tokens)
        except Busy as err:
            raise RequestError(f"the server is busy ({err}); try again shortly", 503) from None
        except Stopping as err:
            raise RequestError(f"{err}; try another server or later", 503) from None
        try:
            return await asyncio.wrap_future(future)
        except Stopping as err:
            raise RequestError(f"{err}; try again later", 503) from None


def describe(model, data_cfg, decode_cfg, limits, checkpoint, precision):
    """GET /info: languages, model size, heads per layer, checkpoint, precision, defaults."""
    cfg = model.cfg
    return {"source_language": data_cfg.src_lang, "target_language": data_cfg.tgt_lang,
            "parameters": model.count_parameters(), "model": dataclasses.asdict(cfg),
            "num_heads": cfg.num_heads,
            "layers": [{"row": layer.row, "name": layer.name, "kind": layer.kind,
                        "layer": layer.layer, "heads": cfg.heads_of(layer.row)}
                       for layer in cfg.attention_layers()],
            "checkpoint": checkpoint, "precision": precision,
            "decode": {"beam_size": decode_cfg.beam_size,
                       "length_penalty": decode_cfg.length_penalty, "nbest": decode_cfg.nbest},
            "limits": dataclasses.asdict(limits), "max_sentence_subwords": cfg.max_src_len}


def build_service(model, tokenizer, ctx, decode_cfg, data_cfg, limits, batching, run_dir,
                  checkpoint, precision):
    """A Service for a loaded run (not started)."""
    engine = Engine(model, tokenizer, ctx, decode_cfg)
    info = describe(model, data_cfg, decode_cfg, limits, checkpoint, precision)
    return Service(engine, limits, batching, info, head_study(run_dir, model.cfg))
