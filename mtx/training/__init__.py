"""Training: build the pieces, run the loop, keep the state that resume needs."""
from ..run import train  # noqa: F401  (moving into this package)
