"""The entry point of a command, and the composed config turned into typed settings.

A command is `hydra_command` around a function of the composed config: ``mtx-<name>`` (pyproject
[project.scripts]) and ``scripts/<name>.py`` both call the entry point it returns, from any
working directory (the configs travel with the package: ``mtx/conf`` is the repository's
``conf/``). Whatever goes wrong ends as one line and an exit code (`mtx.commands.exits`): the
guard inside the job catches the command's errors before Hydra sees them (Hydra would print an
extra "Error executing job" line); the one around Hydra catches Hydra's own errors, which Hydra
raises instead of printing them under HYDRA_FULL_ERROR=1 (which the guard sets). A log that
cannot be written (train.log on a full disk) costs one warning, not a traceback per record
(`one_warning_per_failed_log`).

Only commands see a DictConfig: `typed` turns a section into its dataclass once, so an unknown
key or a value of the wrong type fails before any work.
Each setting is declared once, in its dataclass; Hydra composes conf/'s presets onto those
declarations (`mtx.commands.declared`).
"""
import logging
import os
import sys

from ..config import CONF_DIR, ConfigError
from ..typecheck import declared, from_dict
from ..datadir import register_resolver
from .declared import GROUPS, current_overrides, declare_settings, without_old_keys
from .exits import one_line_errors
from .paths import refuse_null_paths

def run(main):
    """Call a ``@hydra.main`` function so that Hydra's own errors (bad overrides, unknown keys,
    a missing config option) are one line too."""
    with one_line_errors():
        return main()


def hydra_command(config_name, command):
    """The entry point of a command: ``command(cfg)`` with conf/<config_name>.yaml and the
    command line's overrides, every error one line (module docstring); returns its result."""
    import hydra
    register_resolver()
    declare_settings()

    @hydra.main(config_path=str(CONF_DIR), config_name=config_name, version_base="1.3")
    def main(cfg):
        with one_line_errors():
            one_warning_per_failed_log()
            refuse_null_paths(cfg, config_name)
            return command(cfg)

    def entry():
        sys.argv[1:] = current_overrides(sys.argv[1:])  # a renamed setting's old key: warned
        return run(main)
    entry.__doc__ = command.__doc__
    return entry


def one_warning_per_failed_log():
    """Make each log handler Hydra set up (the console, train.log) say once, on stderr, that
    it cannot write (a full disk, a closed stream), then take no more records. By default
    `logging` prints "--- Logging error ---" and a traceback for every record it fails on."""
    for handler in logging.getLogger().handlers:
        handler.handleError = _stop_after_first_error(handler)


def _stop_after_first_error(handler):
    def handle_error(record):
        err = sys.exc_info()[1]
        handler.setLevel(logging.CRITICAL + 1)  # above every record: it takes no more
        where = getattr(handler, "baseFilename", None) or "the console"
        try:
            handler.close()  # a file: closed now, what it could not write is dropped
        except OSError:
            pass
        try:
            print(f"warning: cannot write the log to {where} "
                  f"({getattr(err, 'strerror', None) or err}); it stops there", file=sys.stderr)
        except Exception:  # noqa: BLE001 (stderr itself is gone: nothing left to tell)
            pass
    return handle_error


def typed(cfg, section):
    """A DictConfig section -> its dataclass (ModelConfig, DataConfig, ..., Limits: `GROUPS`)."""
    from omegaconf import OmegaConf
    missing = [key for key in cfg[section] if OmegaConf.is_missing(cfg[section], key)]
    if missing:  # ??? in the YAML: the user's to give
        raise ConfigError(f"give {' '.join(f'{section}.{key}=...' for key in missing)} (this "
                          f"{section} config leaves them to you; --help shows them)")
    values = OmegaConf.to_container(cfg[section], resolve=True)
    if section == "data" and values.get("raw_dir"):
        values["raw_dir"] = os.path.abspath(values["raw_dir"])
    return from_dict(GROUPS[section], without_old_keys(GROUPS[section], values), section)


def typed_keys(cfg, cls):
    """The command's own keys of the settings dataclass ``cls`` (`RunKeys`, `Placement`,
    `StudySettings`: Hydra roots, `mtx.commands.declared.ROOTS`) as an instance of it."""
    from omegaconf import OmegaConf
    keys = [*declared(cls), *(old for old in getattr(cls, "RENAMED", {}) if old in cfg)]
    return from_dict(cls, without_old_keys(cls, OmegaConf.to_container(
        OmegaConf.masked_copy(cfg, keys), resolve=True)))


def decoding_options(cfg):
    """decode.* as a DecodeConfig and ``device=`` as a context: cheap checks that translate,
    evaluate, heads and serve make before anything loads."""
    from ..config import Placement
    from ..hardware.devices import resolve_device
    return typed(cfg, "decode"), resolve_device(typed_keys(cfg, Placement).device)
