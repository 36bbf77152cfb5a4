"""The peers of the quality bench, each trained by its own command line on the shared pieces
(`shared_inputs`) at the size of mtx's model, then translating the test split with beam 5.

Each keeps its own batching, optimizer and schedule; what is set is the size (layers, width,
heads, FFN), dropout, label smoothing, the shared vocabulary and tied embeddings, as mtx's model
has them, and what a wall-clock budget needs:
- OpenNMT-py 3.5.1: the Transformer recipe of its FAQ (Adam, beta2 0.998, noam at
  learning_rate 2, 4096-token batches, Glorot initialisation) with the warm-up at mtx's 1,600
  updates (the FAQ's 8,000 are for 4 GPUs on WMT); it has no time limit, so it saves every
  `save_every` updates and is stopped at the deadline, and its last checkpoint translates.
- Sockeye 3.1.34: its own defaults (Adam 2e-4, plateau-reduce, 4096-word batches, pre-norm) with
  checkpoints every `save_every` updates and ``--max-seconds``; its best checkpoint translates.
Each returns {updates, train_tok_s (target pieces a second), parameters, train (the process:
seconds, peak_rss_mb, stopped), decode (likewise), hypotheses file, command lines}."""
import re
import statistics

from ..files import atomic_write_json
from .processes import measured, toolkit_env

SAVE_EVERY = 100         # updates between checkpoints: what the deadline can lose ...
SHORT_BUDGET, SAVE_EVERY_SHORT = 10, 10  # ... and under SHORT_BUDGET minutes (a plumbing check)
BEAM, DECODE_BATCH = 5, 64
PACKAGES = {"opennmt": ("OpenNMT-py==3.5.1", "torch==2.2.2", "numpy==1.26.4"),
            "sockeye": ("sockeye==3.1.34", "torch==1.13.1", "numpy==1.26.4")}
THREADS = {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}


def save_every(minutes):
    return SAVE_EVERY if minutes >= SHORT_BUDGET else SAVE_EVERY_SHORT


def run_opennmt(inputs, model_cfg, minutes, seed, out, envs_root):
    env = toolkit_env("opennmt", PACKAGES["opennmt"], envs_root)
    vocab = out / "vocab.onmt"  # OpenNMT adds its own <blank> padding: mtx's <pad> left out
    vocab.write_text("".join(f"{p}\n" for p in inputs.vocabulary() if p != "<pad>"), "utf-8")
    config = {
        "data": {"corpus_1": {"path_src": str(inputs.path("train.src")),
                              "path_tgt": str(inputs.path("train.tgt"))},
                 "valid": {"path_src": str(inputs.path("valid.src")),
                           "path_tgt": str(inputs.path("valid.tgt"))}},
        "src_vocab": str(vocab), "share_vocab": True, "src_vocab_size": 100_000,
        "tgt_vocab_size": 100_000, "save_model": str(out / "model"),
        "save_checkpoint_steps": save_every(minutes), "keep_checkpoint": 2, "seed": seed,
        "bucket_size": min(262_144, inputs.training_pairs()),  # its default, at most one pass
        "train_steps": 10_000_000, "valid_steps": 10_000_000, "report_every": min(50, save_every(minutes)),
        "encoder_type": "transformer", "decoder_type": "transformer", "position_encoding": True,
        "enc_layers": model_cfg.num_encoder_layers, "dec_layers": model_cfg.num_decoder_layers,
        "heads": model_cfg.num_heads, "hidden_size": model_cfg.num_hiddens,
        "word_vec_size": model_cfg.num_hiddens, "transformer_ff": model_cfg.ffn_num_hiddens,
        "dropout": [model_cfg.dropout], "attention_dropout": [model_cfg.attention_dropout],
        "share_embeddings": model_cfg.tie_embeddings,
        "share_decoder_embeddings": model_cfg.tie_embeddings,
        "batch_type": "tokens", "batch_size": 4096, "accum_count": [1], "optim": "adam",
        "adam_beta2": 0.998, "decay_method": "noam", "learning_rate": 2.0,
        "warmup_steps": 1600, "max_grad_norm": 0, "label_smoothing": 0.1, "param_init": 0,
        "param_init_glorot": True, "normalization": "tokens"}
    atomic_write_json(out / "config.json", config)  # YAML is a superset of JSON
    train = [env / "bin" / "onmt_train", "-config", out / "config.json"]
    trained = measured(train, out / "train.log", minutes * 60, THREADS)
    log = (out / "train.log").read_text(errors="replace")
    checkpoints = sorted(out.glob("model_step_*.pt"), key=lambda p: int(p.stem.split("_")[-1]))
    if not checkpoints:
        raise RuntimeError(f"OpenNMT-py saved no checkpoint in {minutes} minutes; its log: "
                           f"{out / 'train.log'}")
    hypotheses = out / "test.hyp.pieces"
    translate = [env / "bin" / "onmt_translate", "-model", checkpoints[-1],
                 "-src", inputs.path("test.src"), "-output", hypotheses, "-beam_size", BEAM,
                 "-batch_size", DECODE_BATCH, "-batch_type", "sents"]
    decoded = measured(translate, out / "translate.log", env=THREADS)
    rates = [float(m) for m in re.findall(r"/\s*(\d+) tok/s", log)]
    params = re.search(r"\* number of parameters: (\d+)", log)
    return {"updates": int(checkpoints[-1].stem.split("_")[-1]),
            "train_tok_s": round(statistics.median(rates[1:] or rates)) if rates else None,
            "parameters": int(params.group(1)) if params else None, "train": trained,
            "decode": decoded, "hypotheses": hypotheses,
            "commands": [_line(train), _line(translate)]}


def run_sockeye(inputs, model_cfg, minutes, seed, out, envs_root):
    env = toolkit_env("sockeye", PACKAGES["sockeye"], envs_root)
    vocab = out / "vocab.json"  # Sockeye's specials are mtx's, at mtx's ids
    atomic_write_json(vocab, {piece: i for i, piece in enumerate(inputs.vocabulary())})
    model = out / "model"
    layers = f"{model_cfg.num_encoder_layers}:{model_cfg.num_decoder_layers}"
    train = [env / "bin" / "sockeye-train", "--use-cpu", "--seed", seed, "--output", model,
             "--overwrite-output",
             "--source", inputs.path("train.src"), "--target", inputs.path("train.tgt"),
             "--validation-source", inputs.path("valid.src"),
             "--validation-target", inputs.path("valid.tgt"),
             "--source-vocab", vocab, "--target-vocab", vocab, "--shared-vocab",
             "--num-layers", layers, "--transformer-model-size", model_cfg.num_hiddens,
             "--transformer-attention-heads", model_cfg.num_heads,
             "--transformer-feed-forward-num-hidden", model_cfg.ffn_num_hiddens,
             "--transformer-dropout-prepost", model_cfg.dropout,
             "--transformer-dropout-attention", model_cfg.attention_dropout,
             "--weight-tying-type", "src_trg_softmax" if model_cfg.tie_embeddings else "none",
             "--label-smoothing", 0.1, "--checkpoint-interval", save_every(minutes),
             "--max-seconds", int(minutes * 60), "--decode-and-evaluate", 0]
    trained = measured(train, out / "train.log", minutes * 60 + 300, THREADS)
    log = (out / "train.log").read_text(errors="replace")
    hypotheses = out / "test.hyp.pieces"
    translate = [env / "bin" / "sockeye-translate", "--use-cpu", "-m", model,
                 "--input", inputs.path("test.src"), "--output", hypotheses,
                 "--beam-size", BEAM, "--batch-size", DECODE_BATCH]
    decoded = measured(translate, out / "translate.log", env=THREADS)
    checkpoints = re.findall(r"Updates=(\d+) Epoch=\d+ Samples=(\d+) Time-cost=([\d.]+)", log)
    params = re.search(r"# of parameters: (\d+)", log)
    return {"updates": int(checkpoints[-1][0]) if checkpoints else 0,
            "train_tok_s": _sockeye_rate(checkpoints, inputs), "train": trained,
            "parameters": int(params.group(1)) if params else None, "decode": decoded,
            "hypotheses": hypotheses, "commands": [_line(train), _line(translate)]}


def _sockeye_rate(checkpoints, inputs):
    """Target pieces a second (each sentence's pieces and its end): Sockeye logs the sentences
    and seconds of each checkpoint interval, and its own tokens/s counts padded source tokens."""
    if not checkpoints:
        return None
    lines = inputs.path("train.tgt").read_text(encoding="utf-8").split("\n")[:-1]
    mean_target = sum(len(line.split()) + 1 for line in lines) / max(len(lines), 1)
    samples = [int(s) for _, s, _ in checkpoints]
    seconds = sum(float(t) for _, _, t in checkpoints)
    return round(samples[-1] * mean_target / max(seconds, 1e-9))


def _line(command):
    return " ".join(str(part) for part in command)


RUNNERS = {"opennmt": run_opennmt, "sockeye": run_sockeye}
