#!/usr/bin/env bash
# The lever probes of docs/results.md: each lever alone on top of the default `make train`, the
# same seed and a short wall-clock budget, greedy decoding at the end, one after the other (never
# two at once: they share the cores).
# Usage: scripts/probe_levers.sh [MINUTES] NAME...   (NAME from the table below, or `all`)
# Runs land in outputs/probes/<NAME>; `scripts/collect.py outputs/probes` tabulates them.
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A LEVERS=(
  [baseline]=""
  [dropout0.2]="model.dropout=0.2 model.attention_dropout=0.2"
  [dropout0.3]="model.dropout=0.3 model.attention_dropout=0.3"
  [prenorm]="model.pre_norm=true"
  [lr1.5e-3]="train.lr=0.0015"
  [lr2e-3]="train.lr=0.002"
  [batch1024]="train.batch_tokens=1024 train.warmup_steps=1600"
  [ls0.2]="train.label_smoothing=0.2"
  [4+4]="model.num_encoder_layers=4 model.num_decoder_layers=4"
  [6+3]="model.num_encoder_layers=6 model.num_decoder_layers=3"
  [w384]="model.num_hiddens=384 model.num_heads=6 model.ffn_num_hiddens=1536"
  [untied]="model.tie_embeddings=false"
  [vocab5000]="data.vocab_size=5000"
  [vocab10000]="data.vocab_size=10000"
  [ema0.995]="train.ema_decay=0.995"
  [ema0.999]="train.ema_decay=0.999"
)
minutes=15
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then minutes=$1; shift; fi
names=("$@")
[[ "${names[*]:-}" == all ]] && names=("${!LEVERS[@]}")
[[ ${#names[@]} -gt 0 ]] || { echo "usage: $0 [MINUTES] NAME... (${!LEVERS[*]} | all)" >&2; exit 2; }
for name in "${names[@]}"; do
  [[ -v LEVERS[$name] ]] || { echo "error: no lever $name; choose from ${!LEVERS[*]}" >&2; exit 2; }
done
for name in "${names[@]}"; do
  # shellcheck disable=SC2086  # the overrides are words
  make train ARGS="train.max_minutes=$minutes decode=greedy hydra.run.dir=outputs/probes/$name ${LEVERS[$name]}"
done
