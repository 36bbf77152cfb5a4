"""scripts/export.py: write a trained run as a model directory another engine serves: today
CTranslate2 (`mtx.deploy.export`), with float32, int8 or int16 weights."""
from pathlib import Path

from ..errors import ConfigError
from ..runs.runlock import RunLock
from .entry import hydra_command

FORMATS = ("ctranslate2",)


def export(cfg):
    """Export ``cfg.ckpt`` to ``cfg.output``; returns the export record (mtx_export.json)."""
    from ..deploy.export import export_run
    from ..hardware.devices import use_numpy_interface
    if cfg.format not in FORMATS:
        raise ConfigError(f"format={cfg.format}: choose one of {', '.join(FORMATS)}")
    use_numpy_interface()
    output = Path(cfg.output)
    with RunLock(output.parent, f".{output.name}.lock", "give another output="):
        record = export_run(cfg.ckpt, cfg.output, str(cfg.quantization), cfg.checkpoint)
    padded = (f"; {record['padded_heads']} zero heads added to pruned layers (CTranslate2 has "
              f"one head count)" if record["padded_heads"] else "")
    print(f"exported {cfg.ckpt} (checkpoint {cfg.checkpoint}) to {cfg.output}: CTranslate2 "
          f"{record['ctranslate2_version']}, {record['quantization']} weights{padded}")
    return record


# mtx-export and scripts/export.py (and python -m mtx.commands.export, which mtx.bench runs)
main = hydra_command("export", export)

if __name__ == "__main__":
    main()
