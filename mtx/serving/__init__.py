"""mtx-serve: a trained run behind an HTTP API, and a page that shows every head's attention and
switches heads off (`mtx.commands.serve` starts it; docs/serving.md).

Imports go one way: `server` (uvicorn, signals) -> `app` (routes, errors, the page) ->
`service` (what the routes answer) -> `bodies` (what a request may hold), `study` (a run's head
study), `batcher` (the one thread that owns the model, batching the `jobs` of its queue) and
`engine` (the model calls it makes). Only `engine` touches
MXNet; only `app` and `server` need FastAPI and uvicorn (the ``serve`` extra).
"""
