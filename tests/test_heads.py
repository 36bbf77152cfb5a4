"""Head importance and pruning on a toy-trained model; the attention pictures of a sentence."""
import json

import mxnet as mx
import numpy as onp
import pytest
from mxnet import np

from mtx.heads import importance as heads
from mtx.data.corpus import load_corpus
from mtx.heads.settings import StudySettings
from mtx.heads.study import choose_pruning
from mtx.runs.pictures import attention_pictures
from mtx.runs.rundir import load_run
from mtx.decoding.search import attention_of, beam_search
from tests.conftest import model_config, run_script


def greedy_search(model, src, src_len, head_gates=None):
    """The argmax at every step (beam 1): token ids per sentence."""
    return [h[0][0] for h in beam_search(model, src, src_len, 1, 0.0, head_gates=head_gates)]


@pytest.fixture(scope="module")
def toy(toy_run):
    model, tokenizer, data_cfg = load_run(toy_run, mx.cpu())
    corpus = load_corpus(data_cfg, toy_run / "cache", 1, tokenizer)
    return model, corpus


def _inputs(corpus, n=16):
    src_ids, tgt_ids = (x[:n] for x in corpus.ids["val"])
    S, T = max(map(len, src_ids)) + 1, max(map(len, tgt_ids)) + 1
    src, tgt = onp.zeros((n, S), "int32"), onp.zeros((n, T), "int32")
    for r, (s, t) in enumerate(zip(src_ids, tgt_ids)):
        src[r, :len(s) + 1], tgt[r, :len(t) + 1] = s + [3], [2] + t
    return np.array(src), np.array([len(s) + 1 for s in src_ids], dtype="int32"), np.array(tgt)


def test_all_ones_gates_change_nothing(toy):
    model, corpus = toy
    src, src_len, tgt = _inputs(corpus)
    ones = np.ones((model.cfg.num_attention_layers, model.cfg.num_heads))
    assert onp.array_equal(model(src, src_len, tgt).asnumpy(), model(src, src_len, tgt, ones).asnumpy())


def test_gated_off_head_weights_do_not_matter(toy):
    model, corpus = toy
    src, src_len, tgt = _inputs(corpus)
    gates = onp.ones((model.cfg.num_attention_layers, model.cfg.num_heads))
    gates[0, 1] = gates[3, 2] = 0
    before = model(src, src_len, tgt, np.array(gates)).asnumpy()
    block = model.encoder.blocks[0].attention
    saved = block.W_v.weight.data().copy()
    Dh = model.cfg.head_dim
    w = saved.asnumpy()
    w[Dh:2 * Dh] = 123.0  # head 2 of layer 0
    block.W_v.weight.set_data(np.array(w))
    after = model(src, src_len, tgt, np.array(gates)).asnumpy()
    block.W_v.weight.set_data(saved)
    assert onp.allclose(before, after, atol=1e-5)


def test_importance_is_deterministic_and_layer_normalised(toy):
    model, corpus = toy
    src_ids, tgt_ids = (x[:64] for x in corpus.ids["val"])
    first = heads.gradient_importance(model, src_ids, tgt_ids, mx.cpu())
    second = heads.gradient_importance(model, src_ids, tgt_ids, mx.cpu())
    assert onp.array_equal(first, second)
    assert first.shape == (model.cfg.num_attention_layers, model.cfg.num_heads)
    assert onp.allclose(onp.linalg.norm(first, axis=1), 1.0)
    gates = onp.ones(first.shape)
    gates[0, :2] = 0
    rescored = heads.gradient_importance(model, src_ids, tgt_ids, mx.cpu(), gates=gates)
    assert (rescored[0, :2] == 0).all() and onp.allclose(onp.linalg.norm(rescored, axis=1), 1.0)
    conf = heads.confidence(model, src_ids, tgt_ids, mx.cpu())
    assert ((conf > 0) & (conf <= 1.0 + 1e-6)).all()


def test_removal_order_keeps_one_head_per_layer():
    importance = onp.array([[0.1, 0.9, 0.5], [0.3, 0.2, 0.8]])
    assert heads.removal_order(importance) == [(0, 0), (1, 1), (1, 0), (0, 2)]


def test_iterative_order_rescores_at_the_current_gates():
    seen = []

    def importance_fn(gates):  # head h of a layer matters h + 1, but a gated-off layer-0 head
        seen.append(gates.copy())  # makes layer 1's head 0 the most important
        scores = onp.tile(onp.arange(1.0, 4.0), (2, 1))
        if gates[0].sum() < 3:
            scores[1, 0] = 10.0
        return scores

    order = heads.iterative_order(importance_fn, (2, 3), fraction_step=1 / 6)  # one head a step
    assert order == [(0, 0), (0, 1), (1, 1), (1, 2)]  # re-scored: (1, 0) is never removed
    assert heads.removal_order(onp.tile(onp.arange(1.0, 4.0), (2, 1)))[1] == (1, 0)  # unlike once
    assert onp.array_equal(seen[0], onp.ones((2, 3))) and seen[1][0, 0] == 0 and len(seen) == 5


def test_iterative_order_from_a_pruned_models_gates_stops_at_its_limit():
    gates = onp.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])  # layer 0 keeps two heads (padded)
    importance = lambda g: onp.array([[5.0, 6.0, 0.0], [1.0, 2.0, 3.0]]) * g
    order = heads.iterative_order(importance, (2, 3), fraction_step=0.2, gates=gates, limit=3)
    assert order == [(1, 0), (1, 1), (0, 0)]  # the padding (0, 2) is never a head to remove
    assert heads.iterative_order(importance, (2, 3), gates=gates, limit=1) == [(1, 0)]
    assert len(heads.iterative_order(importance, (2, 3), gates=gates)) == 3  # one per layer left


def test_loss_importance_is_the_rise_of_the_loss_for_heads_still_on(toy):
    weights = onp.array([[0.5, 0.1, 0.3], [0.2, 0.4, 0.6]])
    synthetic = lambda gates: float((weights * (1 - gates)).sum())
    gates = onp.ones((2, 3))
    gates[1, 2] = 0
    assert onp.allclose(heads.loss_importance(synthetic, gates), weights * gates)
    assert heads.iterative_order(lambda g: heads.loss_importance(synthetic, g), (2, 3),
                                 fraction_step=1 / 6) == [(0, 1), (1, 0), (0, 2), (1, 1)]
    model, corpus = toy
    loss = heads.gated_loss(model, *(x[:64] for x in corpus.ids["val"]), mx.cpu())
    full = onp.ones((model.cfg.num_attention_layers, model.cfg.num_heads))
    rise = heads.loss_importance(loss, full)
    assert rise.shape == full.shape and rise.max() > 0
    assert onp.isclose(loss(full), _plain_loss(model, corpus), rtol=1e-5)  # all ones = no gates
    one_off = full.copy()
    one_off[0, 1] = 0
    assert onp.isclose(rise[0, 1], loss(one_off) - loss(full))


def test_choose_pruning_by_budget_or_by_count():
    points = {"importance": [(0, 40.0), (2, 39.8), (4, 38.0)], "iterative": [(0, 40.0), (2, 39.0),
              (4, 38.5)], "random1": [(0, 40.0), (2, 39.9), (4, 39.9)]}
    assert choose_pruning(points, 0.5) == ("importance", 2)
    assert choose_pruning(points, 0.5, heads_to_remove=4) == ("iterative", 4)
    with pytest.raises(ValueError, match="one of \\[0, 2, 4\\]"):
        choose_pruning(points, 0.5, heads_to_remove=3)


def test_pruned_model_equals_gated_model(toy):
    model, corpus = toy
    src, src_len, tgt = _inputs(corpus)
    gates = onp.ones((model.cfg.num_attention_layers, model.cfg.num_heads))
    gates[0, 0] = gates[1, 3] = gates[2, 1] = gates[2, 2] = gates[5, 0] = 0
    pruned = heads.prune(model, gates, mx.cpu())
    assert pruned.cfg.heads_per_layer == [3, 3, 2, 4, 4, 3]
    assert [b.num_heads for _, _, b in pruned.attention_layers()] == [3, 3, 2, 4, 4, 3]
    gated = model(src, src_len, tgt, np.array(gates)).asnumpy()
    assert onp.allclose(pruned(src, src_len, tgt).asnumpy(), gated, atol=1e-4)
    assert greedy_search(pruned, src, src_len) == greedy_search(model, src, src_len,
                                                                head_gates=np.array(gates))
    count = lambda m: sum(p.data().size for p in m.collect_params().values())
    assert count(model) - count(pruned) == 5 * 4 * model.cfg.head_dim * model.cfg.num_hiddens


def test_attention_of_gives_every_layer_over_source_and_output(toy):
    model, corpus = toy
    src_ids = corpus.ids["val"][0][0]
    S, H = len(src_ids) + 1, model.cfg.num_heads
    src = np.array([src_ids + [3]], dtype="int32")  # (1, S) with EOS
    out_ids = greedy_search(model, src, np.array([S]))[0]
    weights = attention_of(model, src_ids, out_ids, mx.cpu())
    T = len(out_ids) + 1  # BOS + the output
    sides = {"source": S, "target": T}
    assert [w.shape for w in weights] == [(H, sides[a.queries], sides[a.keys])
                                          for a in model.cfg.attention_layers()]
    for w, a in zip(weights, model.cfg.attention_layers()):
        if a.kind != "decoder self":  # causal rows sum to 1 as well, over fewer keys
            onp.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-5)
        else:  # no query sees a later position
            onp.testing.assert_allclose(onp.triu(w, k=1), 0.0, atol=1e-6)


def test_attention_pictures_draw_the_weights_they_are_given(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt
    figures, close = [], plt.close
    monkeypatch.setattr(plt, "close", lambda fig: (figures.append(fig), close(fig)))
    cfg = model_config(num_hiddens=8, num_decoder_layers=2)
    layers = cfg.attention_layers()
    labels = {"source": ["a", "b", "</s>"], "target": ["<s>", "x", "y", "z"]}  # S = 3, T = 4
    rng = onp.random.RandomState(0)
    weights = [rng.rand(2, len(labels[a.queries]), len(labels[a.keys])) for a in layers]
    paths = attention_pictures(weights, layers, labels["source"], labels["target"], tmp_path)
    assert [p.name for p in paths] == [
        "encoder_self_layer1.png", "decoder_self_layer1.png", "decoder_cross_layer1.png",
        "decoder_self_layer2.png", "decoder_cross_layer2.png"]
    assert all(p.stat().st_size > 1000 for p in paths)
    figures = [f for f in figures if f != "all"]  # matplotlib.use() closes "all" first
    cross = figures[2].axes[1]  # decoder cross, layer 1, head 2: target rows, source columns
    assert [t.get_text() for t in cross.get_yticklabels()] == labels["target"]
    assert [t.get_text() for t in cross.get_xticklabels()] == labels["source"]
    onp.testing.assert_array_equal(cross.images[0].get_array(), weights[2][1])


def test_heads_script_runs_end_to_end(toy_run, tmp_path):
    out = tmp_path / "heads"
    done = run_script("heads", f"ckpt={toy_run}", "max_sentences=60", "leave_one_out=true",
                      "random_orders=2", "decode.beam_size=2", "prune_fraction=0.33",
                      "finetune.minutes=0.05", "finetune.distill_weight=0.5", "timing_rounds=1",
                      f"out_dir={out}")
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    importance = json.loads((out / "importance.json").read_text())
    assert set(importance) >= {"layers", "gradient", "confidence", "leave_one_out_bleu"}
    curves = json.loads((out / "pruning.json").read_text())["curves"]
    assert set(curves) == {"importance", "iterative", "iterative_loss", "random1", "random2"}
    assert curves["importance"][0][0] == 0 and curves["iterative"][0] == curves["importance"][0]
    # 0.33 of 24 heads = 8, between the 10% steps (7, 10): the curves also score that count
    assert all(8 in [n for n, _ in curve] for curve in curves.values())
    speed = json.loads((out / "speed.json").read_text())
    assert speed["removed_heads"] == 8 and sum(speed["kept_per_layer"]) == 24 - 8
    # what the command prints is what speed.json holds; above 1 means the pruned model is faster
    printed = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert printed == {"removed_heads": 8, "speedup": speed["speedup"]}
    assert (speed["speedup"] > 1) == (speed["pruned"]["best"] < speed["full"]["best"])
    assert len(speed["full"]["seconds"]) == len(speed["pruned"]["seconds"]) == 1  # timing_rounds
    assert speed["full"]["sacrebleu"]["score"] > 80  # the trained toy model, not a broken load
    assert "pruned_before_finetune" in speed and speed["finetune"]["minutes"] == 0.05
    assert speed["finetune"]["distill_weight"] == 0.5  # fine-tuned against the full model too
    assert (out / "pruned" / "metrics.jsonl").is_file()  # the fine-tuning run's record
    for png in ("importance.png", "pruning.png"):
        assert (out / png).stat().st_size > 1000
    translated = run_script("translate", f"ckpt={out / 'pruned'}", "decode=greedy", stdin=b"w1 w2 w3\n")
    assert translated.returncode == 0 and len(translated.stdout.decode().splitlines()) == 1
    # the same study again into the same folder would delete the fine-tuned pruned/: refused;
    # and the pruned model is not studied as if every layer had all its heads
    for overrides, words in (([f"ckpt={toy_run}", f"out_dir={out}"],
                              f"{out / 'pruned'} holds the pruned model of an earlier study"),
                             ([f"ckpt={out / 'pruned'}", f"out_dir={tmp_path / 'again'}"],
                              "heads per attention layer (a pruned model)")):
        again = run_script("heads", *overrides)
        err = again.stderr.decode()
        assert again.returncode == 2 and "Traceback" not in err and words in err, err[-2000:]
    assert (out / "pruned" / "metrics.jsonl").is_file()


def test_gradual_pruning_cuts_in_steps_with_training_between(toy_run, tmp_path):
    out = tmp_path / "gradual"
    done = run_script("heads", f"ckpt={toy_run}", "method=gradual", "prune_fraction=0.5",
                      "gradual.steps=2", "finetune.minutes=0.05", "max_sentences=60",
                      "decode.beam_size=2", "timing_rounds=1", f"out_dir={out}")
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    speed = json.loads((out / "speed.json").read_text())
    cuts = speed["gradual"]["cuts"]
    assert speed["method"] == "gradual" and [c["removed"] for c in cuts] == [6, 6]
    # each cut keeps a subset of the heads the one before kept, numbered as in the full model
    for before, after in zip([[list(range(4))] * 6] + [c["kept_heads"] for c in cuts], cuts):
        assert all(set(b) >= set(a) and a for b, a in zip(before, after["kept_heads"]))
    assert sum(map(len, cuts[0]["kept_heads"])) == 18 and "final" in cuts[0]
    assert [len(k) for k in cuts[1]["kept_heads"]] == speed["kept_per_layer"]
    assert sum(speed["kept_per_layer"]) == 12 and speed["finetune"]["minutes"] == 0.05
    assert (out / "gradual" / "cut_1" / "metrics.jsonl").is_file()  # the first cut trained
    assert (out / "pruned" / "metrics.jsonl").is_file()  # and the last
    assert speed["pruned"]["sacrebleu"]["score"] > 0


@pytest.mark.parametrize("overrides, message", [
    (["prune_fraction=0.9"], "prune_fraction=0.9 would keep 2 of the 24 heads; keep at least one"),
    (["method=gradual", "prune_fraction=0.05", "finetune.minutes=1", "gradual.steps=3"],
     "prune_fraction=0.05 removes 1 of the 24 heads, fewer than gradual.steps=3 cuts"),
    (["prune_fraction=0.01"], "prune_fraction=0.01 would keep 24 of the 24 heads"),
    (["target_heads=12"], "target_heads= is for method=l0"),
    (["timing_rounds=0"], "timing_rounds=0: give rounds in which the full and the pruned model"),
    (["max_sentences=0"], "max_sentences=0: give only the first N sentences of importance_split"),
    (["random_orders=-1"], "random_orders=-1: give random removal orders (seeds 1..N)"),
])
def test_bad_prune_fraction_is_a_one_line_error(toy_run, overrides, message):
    done = run_script("heads", f"ckpt={toy_run}", *overrides)
    err = done.stderr.decode()
    assert done.returncode == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"error: {message}")


def _plain_loss(model, corpus):
    """Teacher-forced mean nll per target token of the first 64 val pairs, no gates given."""
    from mtx.data.batching import bucket_batches
    from mtx.hardware.devices import to_device
    from mtx.training.loss import LabelSmoothedCrossEntropy
    loss_fn = LabelSmoothedCrossEntropy(model.cfg.vocab_size, 0.0)
    loss_fn.initialize(ctx=mx.cpu())
    total, tokens = 0.0, 0
    for batch in bucket_batches(*(x[:64] for x in corpus.ids["val"]), 4096, False, 0):
        src, src_len, tgt_in, tgt_out, tgt_len = to_device(batch, mx.cpu())
        total += float(loss_fn(model(src, src_len, tgt_in), tgt_out, tgt_len)[1])
        tokens += batch.num_tgt_tokens
    return total / tokens


@pytest.mark.parametrize("method, fraction, removed", [
    ("order", 0.33, 8), ("order", 0.75, 18), ("l0", 0.5, 12),
    ("order", 0, 0),   # the control: the whole model fine-tuned
    ("l0", 0, None), ("order", 0.01, None), ("order", 0.8, None)])
def test_prune_fraction_becomes_heads_to_remove(method, fraction, removed):
    from mtx.errors import ConfigError
    settings = StudySettings(method=method, prune_fraction=fraction)
    model_cfg = model_config(num_hiddens=64, num_heads=4, ffn_num_hiddens=128,
                             num_encoder_layers=2, num_decoder_layers=2, vocab_size=24)
    if removed is None:  # 24 heads in 6 layers: 0.8 keeps 5, 0.01 and l0's 0 keep all 24
        with pytest.raises(ConfigError, match="would keep"):
            settings.heads_to_remove(model_cfg)
    else:
        assert settings.heads_to_remove(model_cfg) == removed


@pytest.mark.parametrize("overrides, message", [
    (["timing_rounds=1.5"], "timing_rounds=1.5 has type float; expected int"),
    (["random_orders=true"], "random_orders=True has type bool; expected int"),
    (["leave_one_out=yes"], "leave_one_out='yes' has type str; expected bool"),
    (["max_bleu_loss=nan"], "max_bleu_loss=nan: give the val BLEU"),
    (["prune_fraction=1.5"], "prune_fraction=1.5: give the fraction of all heads to remove"),
    (["finetune.lr=0"], "finetune.lr=0: give the peak learning rate"),
    (["l0.anneal=2"], "l0.anneal=2: give the part of the budget"),
    (["method=l0", "prune_fraction=0.5", "l0.minutes=0"],
     "l0.minutes=0, l0.max_steps=null: the gates need minutes > 0 or max_steps >= 1"),
    (["method=l0"], "method=l0 needs exactly one of target_heads="),
    (["method=greedy"], "method=greedy: give order (the importance orders"),
    (["method=gradual", "prune_fraction=0.5"], "method=gradual cuts prune_fraction= of the heads "
                                                "with training between the cuts: give"),
    (["method=gradual", "gradual.steps=1"], "gradual.steps=1: give the cuts, 2 or more"),
])
def test_bad_study_settings_name_the_key_and_what_to_give(overrides, message):
    """conf/heads.yaml's study keys, as a command line sets them, before any work."""
    from mtx.commands.declared import compose
    from mtx.commands.entry import typed_keys
    from mtx.errors import ConfigError
    cfg = compose("heads", ["ckpt=x", *overrides])
    with pytest.raises(ConfigError) as raised:
        typed_keys(cfg, StudySettings)
    assert str(raised.value).startswith(message)


def test_the_study_settings_of_heads_yaml_are_the_dataclass_defaults():
    from mtx.commands.declared import compose
    from mtx.commands.entry import typed_keys
    assert typed_keys(compose("heads", ["ckpt=x"]), StudySettings) == StudySettings()
