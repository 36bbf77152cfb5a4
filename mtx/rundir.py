"""A training run's directory (moving here from mtx.run and mtx.checkpoint)."""
from .run import load_run  # noqa: F401
