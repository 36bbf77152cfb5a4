"""Running the app on uvicorn: the address line, and a clean stop on SIGTERM or Ctrl-C.

A stop signal is only noted where it lands (the signal handler runs in the main thread between
two bytecodes of whatever it interrupted, which may be the event loop inside the queue's lock,
so it takes no lock); the event loop then does the rest. From the signal on, the stop takes at
most ``shutdown_seconds``: the service stops taking new work (a request that reaches the model
after that gets 503) while uvicorn stops accepting connections; the requests in flight are
answered by the model thread, and those still waiting just before the end get 503; connections
still open then are dropped; the model thread is waited for until the end, no longer. Every
request that got in is answered or refused, none is dropped. After a SIGTERM the command exits
0; after Ctrl-C it says "interrupted" and exits 130, as every mtx command does. A second signal
exits at once (130 for Ctrl-C, 143 for SIGTERM), whatever is in flight. If the model thread
dies, the server stops the same way and the command fails (exit 2), so that a supervisor
restarts it.

HTTP is uvicorn's h11 implementation, pinned (not httptools, whatever is installed), without
WebSocket support (whatever is installed), under the connection deadlines and limits of
`mtx.serving.connections`; X-Forwarded-For and -Proto are
believed only from ``access.trusted_proxies``.
"""
import asyncio
import errno
import logging
import os
import signal
import socket
import time

import uvicorn

from ..errors import ConfigError, MtxError
from .access import check_bind
from .app import create_app
from .connections import Guard, protocol_class
from .routes import listing

log = logging.getLogger("mtx.serve")
BACKLOG = 2048  # uvicorn's default
FORCED_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}  # a second signal: 128 + its number
SECOND_SIGNAL = b"[INFO] second signal: exiting now, without waiting for the requests in flight\n"


class Server(uvicorn.Server):
    """uvicorn's server that logs its real address (``port=0`` picks a free port) and stops
    within ``shutdown_seconds`` of a stop signal (module docstring)."""

    def __init__(self, config, service, shutdown_seconds, guard):
        super().__init__(config)
        self.service, self.shutdown_seconds, self.guard = service, shutdown_seconds, guard
        self.stop_signal = None
        self.stop_at = None  # time.monotonic() by which the stop is over
        self._stopping = False

    def handle_exit(self, sig, frame):
        """Only notes the signal (module docstring); a second one exits now, its line written
        with os.write (logging and sys.stderr take locks)."""
        if self.should_exit:
            os.write(2, SECOND_SIGNAL)
            os._exit(FORCED_EXIT.get(sig, 1))
        self.stop_at = time.monotonic() + self.shutdown_seconds
        self.stop_signal = sig
        self.should_exit = True

    async def on_tick(self, counter):
        if self.service.batcher.died is not None and not self.should_exit:
            log.error("the model thread died: stopping the server (the command fails)")
            self.stop_at = time.monotonic() + self.shutdown_seconds
            self.should_exit = True
        if self.should_exit:
            self._begin_stop()
        return await super().on_tick(counter)

    def _begin_stop(self):
        """On the event loop: the service refuses new work and answers what it has by
        `stop_at`."""
        if not self._stopping:
            self._stopping = True
            if self.stop_at is None:
                self.stop_at = time.monotonic() + self.shutdown_seconds
            if self.stop_signal is not None:
                log.info("stopping: answering the requests in flight within %g s, refusing new "
                         "ones", self.shutdown_seconds)
            self.service.close(max(0.0, self.stop_at - time.monotonic()))

    async def shutdown(self, sockets=None):
        """uvicorn's shutdown, bounded by `stop_at`: connections still open just before it are
        dropped, so that no request is left to be cancelled (uvicorn would answer it with a
        plain-text 500)."""
        self._begin_stop()
        left = max(0.0, self.stop_at - time.monotonic())
        self.config.timeout_graceful_shutdown = left
        service = self.service
        drop_in = max(0.0, (service.answer_by + service.stop_by) / 2 - time.monotonic())
        dropping = asyncio.get_running_loop().call_later(drop_in, self.guard.drop_all)
        try:
            await super().shutdown(sockets)
        finally:
            dropping.cancel()

    async def startup(self, sockets=None):
        await super().startup(sockets)
        for server in self.servers:
            for sock in server.sockets:
                host, port = sock.getsockname()[:2]
                log.info("serving on http://%s:%d (%s)", host, port, listing())


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
    limits = service.limits
    guard = Guard(limits.max_connections, limits.head_seconds, limits.write_seconds)
    app = create_app(service, access, host, lambda: len(guard.open))
    trusted = list(access.trusted_proxies)
    config = uvicorn.Config(app, host=host, port=port, log_config=None, log_level="warning",
                            access_log=False, lifespan="on",
                            http=protocol_class(guard, limits.max_header_bytes),
                            ws="none",  # no WebSocket route: an upgrade is plain HTTP here
                            h11_max_incomplete_event_size=limits.max_header_bytes,
                            timeout_keep_alive=limits.keepalive_seconds,
                            proxy_headers=bool(trusted), forwarded_allow_ips=trusted or None,
                            timeout_graceful_shutdown=shutdown_seconds)  # then `Server.shutdown`
    # both signals go to Server.handle_exit from here on (uvicorn installs it too while it
    # serves), so none is lost before uvicorn starts; the ending is decided below: SIGTERM
    # returns, Ctrl-C raises KeyboardInterrupt ("interrupted", exit 130, like every mtx command)
    server = Server(config, service, shutdown_seconds, guard)
    previous = {sig: signal.signal(sig, server.handle_exit)
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        service.stop()
    log.info("stopped: %s", service.health())
    if service.batcher.died is not None:
        raise ModelThreadDied(f"the model thread died ({type(service.batcher.died).__name__}: "
                              f"{service.batcher.died}; the server's log has its traceback): "
                              f"restart mtx-serve")
    if server.stop_signal == signal.SIGINT:
        raise KeyboardInterrupt


class ModelThreadDied(MtxError):
    """mtx-serve stopped because its model thread died."""
