"""Running the app on uvicorn: the address line, and a clean stop on SIGTERM or Ctrl-C.

On the first SIGTERM/SIGINT the service stops taking new work (a request that reaches the model
after that gets 503) while uvicorn stops accepting connections and waits up to
``shutdown_seconds`` for the requests in flight, which the model thread still answers; then
it ends. Every request that got in is answered or refused, none is dropped. After a SIGTERM the
command exits 0; after Ctrl-C it says "interrupted" and exits 130, as every mtx command does. A
second signal exits at once (130 for Ctrl-C, 143 for SIGTERM), whatever is in flight. If the
model thread dies, the server stops the same way and the command fails (exit 2), so that a
supervisor restarts it.

HTTP is uvicorn's h11 implementation, pinned (not httptools, whatever is installed), under the
connection deadlines and limits of `mtx.serving.connections`.
"""
import errno
import logging
import os
import signal
import socket

import uvicorn

from ..errors import ConfigError, MtxError
from .access import check_bind
from .app import create_app
from .connections import protocol_class

log = logging.getLogger("mtx.serve")
BACKLOG = 2048  # uvicorn's default
GRACE_SECONDS = 2.0  # uvicorn waits this much past the shutdown deadline the requests keep
FORCED_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}  # a second signal: 128 + its number


class Server(uvicorn.Server):
    """uvicorn's server that logs its real address (``port=0`` picks a free port) and tells the
    service when a stop signal comes."""

    def __init__(self, config, service, shutdown_seconds):
        super().__init__(config)
        self.service, self.shutdown_seconds = service, shutdown_seconds
        self.stop_signal = None

    async def on_tick(self, counter):
        if self.service.batcher.died is not None and not self.should_exit:
            log.error("the model thread died: stopping the server (the command fails)")
            self.service.close(self.shutdown_seconds)
            self.should_exit = True
        return await super().on_tick(counter)

    async def startup(self, sockets=None):
        await super().startup(sockets)
        for server in self.servers:
            for sock in server.sockets:
                host, port = sock.getsockname()[:2]
                log.info("serving on http://%s:%d (page: /, API: /translate, /attention, "
                         "/info, /health, /heads)", host, port)

    def handle_exit(self, sig, frame):
        if self.should_exit:  # a second signal: no more waiting
            log.info("second signal: exiting now, without waiting for the requests in flight")
            logging.shutdown()
            os._exit(FORCED_EXIT[sig] if sig in FORCED_EXIT else 1)
        self.stop_signal = sig
        log.info("stopping: answering the requests in flight within %g s, refusing new ones",
                 self.shutdown_seconds)
        self.service.close(self.shutdown_seconds)
        super().handle_exit(sig, frame)


def bind(host, port):
    """A TCP socket bound to ``host``:``port`` (0: a free port), or one line saying why not:
    taken before the model loads, so a busy port fails at once. It listens only once the model
    is warm (`serve`): no connection waits on a server that cannot answer yet. SO_REUSEADDR, as
    uvicorn sets it: a restarted server gets its port back at once."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port,
                                                             type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError:
            sock.close()
            raise
        return sock
    except socket.gaierror as err:
        raise ConfigError(f"host={host} is not an address ({err.strerror}): give an address of "
                          f"this machine, e.g. host=127.0.0.1") from None
    except OSError as err:
        if err.errno == errno.EADDRNOTAVAIL:
            raise ConfigError(f"host={host} is not an address of this machine: give one of its "
                              f"own, e.g. host=127.0.0.1 (or 0.0.0.0 for all)") from None
        raise ConfigError(f"cannot listen on {host}:{port} ({err.strerror or err}): choose "
                          f"another port=, or port=0 for a free one") from None


def serve(service, sock, shutdown_seconds, access):
    """Serve on the bound socket ``sock`` until SIGTERM or Ctrl-C (KeyboardInterrupt); the
    service must be started. ``access``: `mtx.serving.access.Access`."""
    host, port = sock.getsockname()[:2]
    try:  # another server bound the same port meanwhile (SO_REUSEADDR lets both bind)
        sock.listen(BACKLOG)
    except OSError as err:
        raise ConfigError(f"cannot listen on {host}:{port} ({err.strerror or err}): another "
                          f"server took it; choose another port=, or port=0") from None
    check_bind(host, access)
    if access.open_without_token:
        log.warning("serving on %s without a token (access.open_without_token=true): anyone "
                    "who reaches this address can use it", host)
    app = create_app(service, shutdown_seconds, access.token, access.hosts(host))
    limits = service.limits
    config = uvicorn.Config(app, host=host, port=port, log_config=None, log_level="warning",
                            access_log=False, lifespan="on",
                            http=protocol_class(limits.max_connections, limits.head_seconds),
                            h11_max_incomplete_event_size=limits.max_header_bytes,
                            timeout_keep_alive=limits.keepalive_seconds,
                            # the requests' own 503 at the shutdown deadline comes first
                            timeout_graceful_shutdown=shutdown_seconds + GRACE_SECONDS)
    # uvicorn handles both signals while it serves and re-raises the one it got once it has
    # shut down; around it they do nothing, so the ending is decided here: SIGTERM returns,
    # Ctrl-C raises KeyboardInterrupt ("interrupted", exit 130, like every mtx command).
    stop_signals = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in stop_signals}
    server = Server(config, service, shutdown_seconds)
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        service.stop(shutdown_seconds)
    log.info("stopped: %s", service.health())
    if service.batcher.died is not None:
        raise ModelThreadDied(f"the model thread died ({type(service.batcher.died).__name__}: "
                              f"{service.batcher.died}; the server's log has its traceback): "
                              f"restart mtx-serve")
    if server.stop_signal == signal.SIGINT:
        raise KeyboardInterrupt


class ModelThreadDied(MtxError):
    """mtx-serve stopped because its model thread died."""
