"""A training run on disk: its directory, checkpoints, records (TensorBoard events too),
resume checks, its lock, and the pictures drawn from its numbers."""
