"""What the routes answer: translations and attention through the model thread, the run's
description (/info), the queue's state (/health, /ready) and the head study (/heads).

Requests are checked here, in the event loop, before they reach the queue (`mtx.serving.bodies`);
the model's work happens in the model thread (`mtx.serving.batcher`) and the handler awaits its
future, so the event loop stays free to take more requests while the model is busy, and those
are batched.
"""
import asyncio
import dataclasses
import logging
import time

from ..hardware.devices import use_numpy_interface
from ..heads.files import head_study
from .answers import RequestError
from .bodies import sentence_ids, settings
from .limits import check_limits_fit, check_work
from .engine import ATTENTION, TRANSLATE, Engine
from .batcher import Batcher
from .work import attention_work, split_work, translations
from .jobs import Busy, JobQueue, Stopping

log = logging.getLogger(__name__)
WAKE_SECONDS = 0.5  # a waiting request looks at the shutdown deadline this often
ANSWER_MARGIN = 0.5  # at a stop, what still waits is answered (503) this long before the end
HIDDEN_STATS = ("running_since", "progress_at", "idle")  # not among /health's counters


class Service:
    """One loaded run served: ``engine`` (the model), the queue of its jobs and the thread that
    owns it, the limits."""

    def __init__(self, engine: Engine, limits, batching, info, study):
        self.engine, self.limits, self.info, self.study = engine, limits, info, study
        self.batching = batching
        self.jobs = JobQueue(limits.max_queue, limits.max_queue_work, limits.client_share)
        self.batcher = Batcher(self.jobs, engine.run_batch, batching.max_wait_ms / 1000,
                               batching.max_batch_tokens, on_start=self._warm_up)
        self.stop_by = None    # time.monotonic() by which a stop is over (`close`)
        self.answer_by = None  # ... and by which every request in flight is answered
        self._stopped = False

    def _warm_up(self):
        use_numpy_interface()  # MXNet's NumPy mode is per thread
        self.engine.warm_up()

    def start(self):
        """Start the model thread and wait for its warm-up (the first model calls trace
        graphs)."""
        self.batcher.start()

    def close(self, seconds=None):
        """Refuse new requests from now on; the stop is over within ``seconds``: those queued
        are still answered until a margin before that (`answer_by`), then each gets 503. Called
        on the event loop (it takes the queue's lock: never from a signal handler)."""
        if seconds is not None and self.stop_by is None:
            now = time.monotonic()
            self.stop_by = now + seconds
            self.answer_by = self.stop_by - min(ANSWER_MARGIN, seconds / 4)
        self.jobs.close()

    def stop(self, timeout=None):
        """Stop the model thread, waiting for it ``timeout`` s (None: until `stop_by`, or not
        at all without one); once: later calls return at once."""
        if not self._stopped:
            self._stopped = True
            if timeout is None:
                timeout = 0.0 if self.stop_by is None else self.stop_by - time.monotonic()
            self.batcher.stop(max(0.0, timeout))

    async def translate(self, body, disconnected=None, client=None):
        """``disconnected``: a function that makes an awaitable that ends when the client goes
        away (its work is dropped then); ``client``: its address (`JobQueue`'s share)."""
        decode = settings(body, self.limits, self.engine.decode_cfg, self.engine.model.cfg)
        ids = sentence_ids(self.engine, body.text, self.limits)
        check_work(ids, decode.beam_size, self.limits)
        parts = split_work(ids, decode.beam_size, self.batching.part_tokens)
        done = await self._ask((TRANSLATE, decode), parts, disconnected, client)
        return translations([hyps for part in done for hyps in part], decode.nbest)

    async def attention(self, body, disconnected=None, client=None):
        decode = settings(body, self.limits, self.engine.decode_cfg, self.engine.model.cfg)
        ids = sentence_ids(self.engine, [body.text], self.limits)[0]
        work = attention_work(self.engine, ids, decode.beam_size, self.limits)
        return (await self._ask((ATTENTION, decode), [(ids, work)], disconnected, client))[0]

    def health(self, counters=True):
        """Liveness (GET /health): "ok", "stopping", or "failed" when the model thread has
        died or has owed work for over ``limits.batch_seconds`` without finishing a batch (it is
        stuck: the process must be restarted); with ``counters``, the queue's counters too."""
        failed = self.failure()
        if failed:
            return {"status": "failed", "reason": failed}
        status = {"status": "stopping" if self.jobs.stopping else "ok"}
        if not counters:
            return status
        stats = dataclasses.asdict(self.jobs.stats)
        since = stats["running_since"]
        return {**status, "queued": self.jobs.queued(),
                **{k: v for k, v in stats.items() if k not in HIDDEN_STATS},
                "running_seconds": 0.0 if since is None else round(time.monotonic() - since, 3)}

    def failure(self):
        """Why the model thread cannot serve any more (dead, or stuck), or None."""
        if self.batcher.died is not None:
            return "the model thread died (see the server's log)"
        stalled = self.jobs.stats.stalled(time.monotonic())
        if stalled > self.limits.batch_seconds:
            return (f"the model thread has finished no batch for {stalled:.1f} s while it has "
                    f"work (limits.batch_seconds={self.limits.batch_seconds:g})")
        return None

    def refusal(self):
        """Why new work would be refused now (stopping, the model thread not running or stuck,
        the queue full), or None: checked before a request's body is read
        (`mtx.serving.admission`)."""
        if self.jobs.stopping:
            return "the server is shutting down"
        if not self.batcher.alive():
            return "the model thread is not running (see the server's log)"
        failed = self.failure()
        if failed:
            return failed
        if self.jobs.queued() >= self.limits.max_queue:
            return f"the queue is full ({self.limits.max_queue} requests)"
        return None

    def not_ready(self):
        """Why this server should get no traffic now (GET /ready): a `refusal`; None when
        ready."""
        return self.refusal()

    async def _ask(self, key, parts, disconnected=None, client=None):
        """The model's results of one request's parts [(payload, work)]. Busy or stopping:
        503; past ``limits.request_seconds``: 504; either, or the client gone: its work is
        dropped (after the part running now)."""
        retry = {"Retry-After": str(self.jobs.retry_after())}
        waits = set() if disconnected is None else {asyncio.ensure_future(disconnected())}
        try:
            try:
                future = self.jobs.submit_parts(key, parts, client)
            except Busy as err:
                raise RequestError(f"the server is busy ({err}); try again shortly", 503,
                                   retry) from None
            answer = asyncio.ensure_future(asyncio.wrap_future(future))
            waits.add(answer)
            deadline = time.monotonic() + self.limits.request_seconds
            while True:
                end = min(deadline, self.answer_by or deadline)
                done, _ = await asyncio.wait(
                    waits, timeout=max(0.0, min(end - time.monotonic(), WAKE_SECONDS)),
                    return_when=asyncio.FIRST_COMPLETED)
                if answer.done():
                    return answer.result()
                problem = given_up(bool(done), deadline, self.answer_by,
                                   self.limits.request_seconds, retry)
                if problem:
                    future.abandon()
                    raise problem
        except Stopping as err:
            raise RequestError(f"{err}; try again later", 503, retry) from None
        finally:
            for wait in waits:
                wait.cancel()

def given_up(client_gone, deadline, stop_deadline, request_seconds, retry):
    """Why a waiting request ends without its answer (a RequestError), or None."""
    now = time.monotonic()
    if client_gone:  # nobody reads an answer
        return RequestError("the client went away", 499)
    if stop_deadline is not None and now >= stop_deadline:
        return RequestError("the server stopped before this request finished; try again "
                            "later", 503, retry)
    if now >= deadline:
        return RequestError(f"the request took over {request_seconds:g} s "
                            f"(limits.request_seconds); send less work per request", 504)
    return None


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
            "limits": dataclasses.asdict(limits),
            "max_sentence_subwords": limits.max_sentence_subwords}


def build_service(model, tokenizer, ctx, decode_cfg, data_cfg, limits, batching, run_dir,
                  checkpoint, precision):
    """A Service for a loaded run (not started); ``limits`` resolved for the run
    (`Limits.for_run`) and checked against the decoding defaults."""
    limits = limits.for_run(data_cfg.max_pair_len, model.cfg.max_src_len)
    check_limits_fit(limits, decode_cfg)
    engine = Engine(model, tokenizer, ctx, decode_cfg)
    info = describe(model, data_cfg, decode_cfg, limits, checkpoint, precision)
    return Service(engine, limits, batching, info, head_study(run_dir, model.cfg))

