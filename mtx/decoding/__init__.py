"""From a trained model to text and scores: greedy and beam search, their rules,
evaluation and BLEU."""
