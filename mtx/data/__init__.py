"""Text to batches: tokenizers, corpora, the Multi30k files, the toy task, batching and
reading lines."""
