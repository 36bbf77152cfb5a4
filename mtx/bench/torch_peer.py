"""The peer a PyTorch user would write: the benchmark's model with ``torch.nn.Transformer``
(post-norm, untied embeddings, sinusoidal positions), label-smoothed cross-entropy, Adam and
gradient clipping as mtx trains, on the benchmark's own batches and OMP_NUM_THREADS threads, at
its best: PyTorch's fused AdamW (decay on the weight matrices only, as mtx), one foreach
clipping over all gradients, and mtx's dropouts (no dropout inside the feed-forward block, which
``nn.Transformer`` adds and mtx, gluonnlp and fairseq do not have).

    pytorch                 eager, float32
    pytorch-bf16            eager, matrix products in bfloat16 (CPU autocast)
    pytorch-compile         torch.compile(dynamic=True), float32 (compiled in the untimed warm-up)
    pytorch-compile-bf16    the same with CPU autocast to bfloat16
    pytorch-compile-max     torch.compile's max-autotune mode (no CUDA graphs), float32
    pytorch-compile-max-bf16   the same with CPU autocast to bfloat16

PyTorch is not a dependency of mtx: ``pip install -e '.[bench-torch]'`` installs it for this peer.
"""
import math
import os

from ..data.vocab import PAD
from ..errors import ConfigError

TORCH_LEARNING_RATE = 5e-4  # Adam; the step's cost does not depend on it
MAX_AUTOTUNE = "max-autotune-no-cudagraphs"
# name -> (precision, torch.compile's mode or None: eager)
TORCH_PEERS = {"pytorch": ("float32", None), "pytorch-bf16": ("bfloat16", None),
               "pytorch-compile": ("float32", "default"),
               "pytorch-compile-bf16": ("bfloat16", "default"),
               "pytorch-compile-max": ("float32", MAX_AUTOTUNE),
               "pytorch-compile-max-bf16": ("bfloat16", MAX_AUTOTUNE)}


def _torch():
    try:
        import torch
    except ImportError:
        raise ConfigError("--impl pytorch: PyTorch is not installed; pip install -e "
                          "'.[bench-torch]' (mtx itself does not use it)") from None
    return torch


def seq2seq(torch, cfg):
    """The benchmark's ModelConfig as a PyTorch module: (src (B, S), src_len (B,), tgt_in (B, T))
    -> logits (B, T, V)."""
    nn = torch.nn
    V, D = cfg.vocab_size, cfg.num_hiddens

    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.src_embed, self.tgt_embed = nn.Embedding(V, D), nn.Embedding(V, D)
            position = torch.arange(cfg.max_len).unsqueeze(1)
            rate = torch.exp(torch.arange(0, D, 2) * (-math.log(10000.0) / D))
            table = torch.zeros(cfg.max_len, D)
            table[:, 0::2], table[:, 1::2] = torch.sin(position * rate), torch.cos(position * rate)
            self.register_buffer("positions", table)
            self.dropout = nn.Dropout(cfg.dropout)
            self.transformer = nn.Transformer(
                d_model=D, nhead=cfg.num_heads, num_encoder_layers=cfg.num_encoder_layers,
                num_decoder_layers=cfg.num_decoder_layers, dim_feedforward=cfg.ffn_num_hiddens,
                dropout=cfg.dropout, batch_first=True)
            for layer in (*self.transformer.encoder.layers, *self.transformer.decoder.layers):
                layer.dropout = nn.Identity()  # the one inside the feed-forward block
            self.output = nn.Linear(D, V)

        def embed(self, embedding, tokens):
            return self.dropout(embedding(tokens) * math.sqrt(D)
                                + self.positions[:tokens.shape[1]])

        def forward(self, src, src_len, tgt_in):
            src_pad = torch.arange(src.shape[1]).unsqueeze(0) >= src_len.unsqueeze(1)
            causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1])
            hidden = self.transformer(
                self.embed(self.src_embed, src), self.embed(self.tgt_embed, tgt_in),
                tgt_mask=causal, src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad,
                tgt_key_padding_mask=tgt_in == PAD, tgt_is_causal=True)
            return self.output(hidden)
    return Seq2Seq()


class _Loss:
    """A step's loss as the benchmark reads it (``asnumpy``)."""

    def __init__(self, value):
        self.value = value

    def asnumpy(self):
        return self.value.detach().float().numpy()


class TorchPeer:
    """``train_step(batch) -> loss`` of PyTorch peer ``name`` (`TORCH_PEERS`)."""

    def __init__(self, model_cfg, name, train_cfg):
        torch = self.torch = _torch()
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count()))
        torch.manual_seed(1)
        self.precision, mode = TORCH_PEERS[name]
        self.module = seq2seq(torch, model_cfg)
        self.model = (self.module if mode is None else
                      torch.compile(self.module, dynamic=True, mode=mode))
        matrices = [p for p in self.module.parameters() if p.dim() >= 2]
        others = [p for p in self.module.parameters() if p.dim() < 2]
        self.optimizer = torch.optim.AdamW(
            [{"params": matrices, "weight_decay": train_cfg.weight_decay},
             {"params": others, "weight_decay": 0.0}], lr=TORCH_LEARNING_RATE,
            betas=(train_cfg.beta1, train_cfg.beta2), eps=train_cfg.epsilon, fused=True)
        self.label_smoothing, self.clip_norm = train_cfg.label_smoothing, train_cfg.clip_norm

    def train_step(self, b):
        torch = self.torch
        src, src_len, tgt_in, tgt_out = (torch.from_numpy(a).long() for a in (
            b.src_tokens, b.src_valid_len, b.tgt_in, b.tgt_out))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.precision == "bfloat16"):
            logits = self.model(src, src_len, tgt_in)
        loss = torch.nn.functional.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]), tgt_out.reshape(-1), ignore_index=PAD,
            label_smoothing=self.label_smoothing, reduction="sum")
        self.optimizer.zero_grad(set_to_none=True)
        (loss / b.num_tgt_tokens).backward()
        torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.clip_norm, foreach=True)
        self.optimizer.step()
        return _Loss(loss)
