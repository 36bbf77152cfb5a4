"""Training: build the pieces (`build`), the pure steps (`steps`), the state resume needs
(`state`), the loop (`loop`), the end of a run (`final`) and a whole run (`run`)."""
from .final import choose_final
from .loop import Fit
from .run import continue_training, new_fit, train

__all__ = ["Fit", "choose_final", "continue_training", "new_fit", "train"]
