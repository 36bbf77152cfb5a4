"""scripts/serve.py: a trained run behind an HTTP API, with a page that shows every head's
attention and switches heads off (`mtx.serving`; docs/serving.md). Serves until SIGTERM or
Ctrl-C; needs the ``serve`` extra (FastAPI, uvicorn)."""
import logging
from pathlib import Path

from ..typecheck import is_number, is_whole
from ..hardware.devices import use_numpy_interface
from ..errors import ConfigError
from ..runs.rundir import RunDir
from ..decoding.search import load_decoder
from .entry import decoding_options, hydra_command, typed

log = logging.getLogger("mtx.serve")
MAX_SHUTDOWN_SECONDS = 3600


def check_serving_installed():
    """FastAPI and uvicorn are the optional ``serve`` extra: one line saying how to get them."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as err:
        raise ConfigError(f"mtx-serve needs FastAPI and uvicorn ({err.name} is missing): "
                          f"pip install -e '.[serve]' (make install does)") from None


def check_address(cfg):
    if not is_whole(cfg.port) or not 0 <= cfg.port <= 65535:
        raise ConfigError(f"port={cfg.port}: give a port number 1-65535, or 0 for a free one")
    if not isinstance(cfg.host, str) or not cfg.host:
        raise ConfigError(f"host={cfg.host}: give an address such as 127.0.0.1")
    seconds = cfg.shutdown_seconds
    if not (is_number(seconds) and 0 <= seconds <= MAX_SHUTDOWN_SECONDS):
        raise ConfigError(f"shutdown_seconds={cfg.shutdown_seconds}: give 0 to "
                          f"{MAX_SHUTDOWN_SECONDS} seconds")


def checkpoint_info(cfg):
    """/info's checkpoint: the run's folder name and the checkpoint's name (no path of the
    machine: the server's log has those)."""
    run = RunDir(Path(cfg.ckpt).resolve())
    checkpoint = Path(str(run.checkpoint_name(cfg.checkpoint)))
    info = {"run": run.path.name, "checkpoint": checkpoint.name}
    report = run.report()
    if report:
        info["trained_precision"] = report.get("precision")
    return info


def serve(cfg):
    """Load the run ``cfg.ckpt``, warm it up, and serve it on ``cfg.host``:``cfg.port``."""
    check_serving_installed()
    from ..serving.access import check_bind
    from ..serving.limits import check_decode_defaults
    from ..serving.server import bind, serve as run_server
    from ..serving.service import build_service
    check_address(cfg)
    limits = typed(cfg, "limits")
    decode_cfg, ctx = decoding_options(cfg)
    check_decode_defaults(decode_cfg, limits)
    batching, access = typed(cfg, "batching"), typed(cfg, "access")
    check_bind(cfg.host, access)
    sock = bind(cfg.host, cfg.port)
    use_numpy_interface()
    model, tokenizer, data_cfg = load_decoder(cfg.ckpt, ctx, cfg.checkpoint, decode_cfg.precision)
    service = build_service(model, tokenizer, ctx, decode_cfg, data_cfg, limits, batching,
                            cfg.ckpt, checkpoint_info(cfg), decode_cfg.precision)
    if not service.study["available"]:
        log.info("head study: %s", service.study["reason"])
    log.info("warming up %s (%s parameters)", cfg.ckpt, f"{service.info['parameters']:,}")
    service.start()
    run_server(service, sock, cfg.shutdown_seconds, access)


# mtx-serve and scripts/serve.py
main = hydra_command("serve", serve)

if __name__ == "__main__":  # python -m mtx.commands.serve (what mtx-bench serve starts)
    main()
