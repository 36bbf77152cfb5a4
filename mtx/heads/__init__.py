"""The head study: importance scores, pruning experiments, learned gates."""
