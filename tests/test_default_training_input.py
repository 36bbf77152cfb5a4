"""What `make train`'s default training sees on Multi30k en->de: the pairs the filters keep, the
vocabulary's segmentation and one epoch's batch plan with its token counts. They were the same
at 02f6e5c, 8cf77d0 and fe5080f (docs/results.md, "The default hour at today's code"); a change
to any of them (a filter, the vocabulary's sample, the bucketing, a sentencepiece or gluonnlp
release) changes the hour's result and is seen here first."""
import hashlib
import json

from mtx.config import DataConfig, TrainConfig
from mtx.data.batching import batch_plan, collate_pairs
from mtx.data.corpus import TrainingPairs, load_corpus
from mtx.training.state import epoch_seed


def _digest(value):
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()[:12]


def test_the_default_hour_trains_on_the_same_pairs_vocabulary_and_batches(multi30k_dir, tmp_path):
    data, train = DataConfig(raw_dir=str(multi30k_dir)), TrainConfig()
    corpus = load_corpus(data, tmp_path, seed=1)
    pairs = TrainingPairs(corpus, data.max_pair_len, data.subword_dropout,
                          data.subword_dropout_from).for_epoch(epoch_seed(1, 0), False)
    # the filters (empty side, max_len 128, length ratio 9) drop none of Multi30k's 29,000
    assert len(pairs) == 29_000 and len(corpus.tokenizer) == 8_000
    # the vocabulary: its segmentation of the training split, subword for subword
    assert (int(pairs.src.lengths().sum()), int(pairs.tgt.lengths().sum())) == (414_037, 428_331)
    # epoch 1's plan (seed 1): batches, rows, padded and real tokens a side, the pairs' order
    plan = batch_plan(pairs.bucket_lengths(), train.batch_tokens, shuffle=True,
                      seed=epoch_seed(1, 0))
    batches = [collate_pairs(pairs, group) for group in plan]
    assert len(plan) == 499 and sum(map(len, plan)) == 29_000
    assert sum(b.tgt_in.size for b in batches) == 505_439     # target, padded (tgt_in)
    assert sum(b.src_tokens.size for b in batches) == 504_507  # source, padded, with EOS
    assert sum(int(b.tgt_valid_len.sum()) for b in batches) == 457_331  # 428,331 + 29,000 EOS
    assert max(b.tgt_in.size for b in batches) <= 1_080
    assert _digest([list(map(int, group)) for group in plan]) == "ff00290ec776"
