#!/usr/bin/env bash
# What each commit bought: `mtx-bench decode --impl IMPL --run RUN` at each COMMIT, one after the
# other (never two at once), each in a temporary worktree with this checkout's venv and native
# kernels; one JSON report per commit in OUT_DIR (default outputs/bench_commits).
# Usage: scripts/bench_commits.sh RUN COMMIT... [-- BENCH_ARGS...]   (default: --impl mtx)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
run=$(realpath "$1"); shift
commits=(); while [[ $# -gt 0 && "$1" != "--" ]]; do commits+=("$1"); shift; done
[[ "${1:-}" == "--" ]] && shift
args=("$@"); [[ ${#args[@]} -gt 0 ]] || args=(--impl mtx)
out=${OUT_DIR:-outputs/bench_commits}; mkdir -p "$out"; out=$(realpath "$out")
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
for commit in "${commits[@]}"; do
  tree=$(mktemp -d)/tree
  git worktree add -q --detach "$tree" "$commit"
  short=$(git rev-parse --short "$commit")
  echo "== $short: $(git log -1 --format=%s "$commit" | cut -c1-90)"
  (cd "$tree" && PYTHONPATH="$tree" "$root/.venv/bin/python" scripts/bench.py decode \
      --run "$run" --out "$out/$short.json" "${args[@]}") || echo "$short failed"
  git worktree remove --force "$tree"
done
