"""mtx-serve: a trained run behind an HTTP API, and a page that shows every head's attention and
switches heads off (`mtx.commands.serve` starts it; docs/serving.md).

Imports go one way: `server` (uvicorn, signals; `connections`: deadlines and limits of
connections, over `parsing`: what h11 is given to parse) -> `app` (the handlers, errors, the
page; in front of them `answers`, `access` with `headers` and `tokens`, `admission` and
`intake`, all reading the table of `routes`) -> `service` (what the routes answer) -> `bodies`
(what a request may hold), `study` (a run's head study), `batcher` (the one thread that owns the
model, batching the `jobs` of its queue, counted in `ledger`) and `engine` (the model calls it
makes). Only `engine` touches MXNet; only `app`, `intake` and `server` (and `connections`,
`parsing`) need FastAPI and uvicorn (the ``serve`` extra).
"""
