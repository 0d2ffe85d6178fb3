#!/usr/bin/env bash
# Same-session A/B of CART throughput: a past commit against the working tree, in
# alternating runs (A B A B ...) on the same seeds, so a noisy shared machine slows both
# sides alike and the ratio holds even when the absolute numbers drift.
#
#   bash benchmarks/ab_throughput.sh REV [ROUNDS] [B]
#
# REV is checked out into a temporary git worktree and imported from there (PYTHONPATH);
# both sides run with this checkout's virtual environment. Rows go to
# benchmarks/results/ab_throughput.jsonl, each labelled with its side's commit.
set -euo pipefail
rev=${1:?usage: ab_throughput.sh REV [ROUNDS] [B]}
rounds=${2:-2}
batch=${3:-4096}
root=$(cd "$(dirname "$0")/.." && pwd)
py="$root/.venv/bin/python"
out="$root/benchmarks/results/ab_throughput.jsonl"
tree=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tree" >/dev/null 2>&1 || true' EXIT
git -C "$root" worktree add -q --detach "$tree" "$rev"
old=$(git -C "$tree" rev-parse --short HEAD)
new="$(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- ecomjax kernels || echo +dirty)"
for _ in $(seq "$rounds"); do
  for side in old new; do
    if [ "$side" = old ]; then dir=$tree label=$old; else dir=$root label=$new; fi
    (cd "$dir" && PYTHONPATH="$dir" "$py" "$root/benchmarks/throughput.py" --sizes "$batch" \
      --repeats 5 --loop-episodes 4 --label "$label" --out "$out" | grep "B=" | sed "s/^/$label /")
  done
done
