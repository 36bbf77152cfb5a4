"""Running the app on uvicorn: the address line, and a clean stop on SIGTERM or Ctrl-C.

On the first SIGTERM/SIGINT the service stops taking new work (a request that reaches the model
after that gets 503) while uvicorn stops accepting connections and waits up to
``shutdown_seconds`` for the requests in flight, which the worker still answers; then the worker
ends. Every request that got in is answered or refused, none is dropped. After a SIGTERM the
command exits 0; after Ctrl-C it says "interrupted" and exits 130, as every mtx command does.
"""
import errno
import logging
import signal
import socket

import uvicorn

from ..errors import ConfigError
from .app import create_app

log = logging.getLogger("mtx.serve")


class Server(uvicorn.Server):
    """uvicorn's server that logs its real address (``port=0`` picks a free port) and tells the
    service when a stop signal comes."""

    def __init__(self, config, service):
        super().__init__(config)
        self.service = service
        self.stop_signal = None

    async def startup(self, sockets=None):
        await super().startup(sockets)
        for server in self.servers:
            for sock in server.sockets:
                host, port = sock.getsockname()[:2]
                log.info("serving on http://%s:%d (page: /, API: /translate, /attention, "
                         "/info, /health, /heads)", host, port)

    def handle_exit(self, sig, frame):
        if not self.should_exit:
            self.stop_signal = sig
            log.info("stopping: answering the requests in flight, refusing new ones")
            self.service.close()
        super().handle_exit(sig, frame)


def bind(host, port):
    """A listening TCP socket on ``host``:``port`` (0: a free port), or one line saying why not:
    taken before the model loads, so a busy port fails at once."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family)
    except socket.gaierror as err:
        raise ConfigError(f"host={host} is not an address ({err.strerror}): give an address of "
                          f"this machine, e.g. host=127.0.0.1") from None
    except OSError as err:
        if err.errno == errno.EADDRNOTAVAIL:
            raise ConfigError(f"host={host} is not an address of this machine: give one of its "
                              f"own, e.g. host=127.0.0.1 (or 0.0.0.0 for all)") from None
        raise ConfigError(f"cannot listen on {host}:{port} ({err.strerror or err}): choose "
                          f"another port=, or port=0 for a free one") from None


def serve(service, sock, shutdown_seconds):
    """Serve on the listening socket ``sock`` until SIGTERM or Ctrl-C (KeyboardInterrupt); the
    service must be started."""
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(create_app(service, shutdown_seconds), host=host, port=port,
                            log_config=None, log_level="warning", access_log=False,
                            lifespan="on",
                            timeout_graceful_shutdown=shutdown_seconds)
    # uvicorn handles both signals while it serves and re-raises the one it got once it has
    # shut down; around it they do nothing, so the ending is decided here: SIGTERM returns,
    # Ctrl-C raises KeyboardInterrupt ("interrupted", exit 130, like every mtx command).
    stop_signals = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in stop_signals}
    server = Server(config, service)
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        service.stop(shutdown_seconds)
    log.info("stopped: %s", service.health())
    if server.stop_signal == signal.SIGINT:
        raise KeyboardInterrupt
