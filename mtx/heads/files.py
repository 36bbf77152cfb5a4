"""The files of a head study, in <run>/heads/ (or mtx-heads' out_dir=): one schema, written by
mtx-heads (`write_importance`, `write_pruning`, `write_gates`, `write_speed`) and read back for
mtx-serve's page (`head_study`: each head's importance beside its switch, and the study's pruning
order to apply step by step).

importance.json: {"layers": [name per row], "gradient": (A, H), "confidence": (A, H), ...};
pruning.json: {"orders": {name: [[a, h], ...]}, "curves": {name: [[heads removed, BLEU], ...]}};
gates.json (method=l0): {"layers", "target_heads", "steps", "log_alpha", "open_probability",
"gates": (A, H) each, "history"}; speed.json: {"order": the order the study pruned with (method
order), "speedup", "full", "pruned", ...}.
"""
import json
import logging
import math
from pathlib import Path

from ..files import atomic_write_json
from ..typecheck import is_number

log = logging.getLogger(__name__)
SCORE = "gradient"       # the score the study's importance order is built from (mtx.heads.importance)
DEFAULT_ORDER = "importance"
IMPORTANCE, PRUNING, GATES, SPEED = "importance.json", "pruning.json", "gates.json", "speed.json"


def write_importance(folder, layer_names, scores):
    """``scores``: {score name: (A, H)} (lists or arrays), rows named by ``layer_names``."""
    atomic_write_json(Path(folder) / IMPORTANCE, {"layers": layer_names, **scores})


def write_pruning(folder, orders, curves):
    """``orders``: {name: [[a, h], ...]}; ``curves``: {name: [[heads removed, BLEU], ...]}."""
    atomic_write_json(Path(folder) / PRUNING, {"orders": orders, "curves": curves})


def write_gates(folder, layer_names, target_heads, result):
    """The learned gates of `mtx.heads.gates.train_gates`'s ``result``."""
    atomic_write_json(Path(folder) / GATES, {
        "layers": layer_names, "target_heads": target_heads, "steps": result["steps"],
        **{k: result[k].tolist() for k in ("log_alpha", "open_probability", "gates")},
        "history": result["history"]})


def write_speed(folder, speed):
    atomic_write_json(Path(folder) / SPEED, speed)


def head_study(run_dir, model_cfg):
    """{"available": True, "score": name, "importance": (A, H), "order_name": name, "order":
    [[a, h], ...], "steps": [[heads removed, BLEU], ...]} or {"available": False, "reason": ...}
    when the run has no study, or one that does not fit ``model_cfg``."""
    folder = Path(run_dir) / "heads"
    where = "the run's heads/"  # answers name no path of the machine
    try:
        importance = _read(folder / IMPORTANCE)
        pruning = _read(folder / PRUNING)
        speed = _read(folder / SPEED) if (folder / SPEED).is_file() else {}
    except FileNotFoundError:
        return {"available": False, "reason": f"no head study in {where} (mtx-heads "
                                              f"ckpt=<the run> makes one)"}
    except (OSError, ValueError) as err:
        log.warning("head study in %s not shown: %s", folder, err)
        reason = getattr(err, "strerror", None) or str(err).replace(str(folder), "heads")
        return {"available": False, "reason": f"the head study in {where} cannot be read: "
                                              f"{reason}"}
    if not all(isinstance(x, dict) for x in (importance, pruning, speed)):
        return {"available": False, "reason": f"the head study in {where} is not one that "
                                              f"mtx-heads writes (run it again)"}
    layers = [layer.name for layer in model_cfg.attention_layers()]
    scores = importance.get(SCORE)
    if importance.get("layers") != layers or _shape(scores) != (len(layers), model_cfg.num_heads):
        return {"available": False, "reason": f"the head study in {where} is of another model "
                                              f"(its layers or heads differ)"}
    if not all(is_number(x) and math.isfinite(x) for row in scores for x in row):
        return {"available": False, "reason": f"the head study in {where} has scores that are "
                                              f"not numbers (run mtx-heads again)"}
    orders = pruning.get("orders")
    orders = orders if isinstance(orders, dict) else {}
    chosen = speed.get("order")
    name = chosen if isinstance(chosen, str) and chosen in orders else DEFAULT_ORDER
    order = orders.get(name)
    if not order:
        return {"available": False, "reason": f"{where}{PRUNING} has no order {name!r}"}
    curves = pruning.get("curves")
    return {"available": True, "score": SCORE, "importance": scores, "order_name": name,
            "order": order, "steps": curves.get(name, []) if isinstance(curves, dict) else []}


def _read(path):
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path.name} is not valid JSON ({err})") from None


def _shape(rows):
    """(rows, columns) of a list of equal-length lists, else None."""
    if not isinstance(rows, list) or not rows or not all(isinstance(r, list) for r in rows):
        return None
    widths = {len(r) for r in rows}
    return (len(rows), widths.pop()) if len(widths) == 1 else None
