"""Training: build the pieces (`build`), the pure steps (`steps`), the state resume needs
(`state`), the loop (`loop`), and a whole run (`run`)."""
from .loop import Fit
from .run import choose_final, continue_training, new_fit, train

__all__ = ["Fit", "choose_final", "continue_training", "new_fit", "train"]
