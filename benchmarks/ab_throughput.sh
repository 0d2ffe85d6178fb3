#!/usr/bin/env bash
# Same-session A/B of throughput: a past commit against the working tree, in
# alternating runs (A B A B ...) on the same seeds, so a noisy shared machine slows both
# sides alike and the ratio holds even when the absolute numbers drift.
#
#   bash benchmarks/ab_throughput.sh REV [ROUNDS] [B] [TASKS]
#
# Without TASKS it times CART with throughput.py (rows to ab_throughput.jsonl); with TASKS
# (families or collections, comma-separated: RETURN,BUNDLE,C8) it times one runner round
# per spec with families.py at N = 1000 (rows to ab_families.jsonl).
#
# REV is checked out into a temporary git worktree and imported from there (PYTHONPATH);
# AB_NEW=REV2 takes the new side from a second worktree instead of this checkout (an A/B
# of two past commits, e.g. one commit against its parent);
# both sides run with this checkout's virtual environment. Rows go to
# benchmarks/results/ab_throughput.jsonl, each labelled with its side's commit.
set -euo pipefail
rev=${1:?usage: ab_throughput.sh REV [ROUNDS] [B]}
rounds=${2:-2}
batch=${3:-4096}
tasks=${4:-}
root=$(cd "$(dirname "$0")/.." && pwd)
py="$root/.venv/bin/python"
out="$root/benchmarks/results/ab_throughput.jsonl"
[ -n "$tasks" ] && out="$root/benchmarks/results/ab_families.jsonl"
tree=$(mktemp -d)
tree2=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tree" >/dev/null 2>&1 || true;
      git -C "$root" worktree remove --force "$tree2" >/dev/null 2>&1 || true;
      rmdir "$tree2" 2>/dev/null || true' EXIT
git -C "$root" worktree add -q --detach "$tree" "$rev"
newdir=$root
if [ -n "${AB_NEW:-}" ]; then
  git -C "$root" worktree add -q --detach "$tree2" "$AB_NEW"
  newdir=$tree2
fi
# setup.py maps the top-level llm_bridge/ and train/ (and, in trees before 2026-12-03,
# kernels/) into ecomjax.*; without these links the editable install's finder would serve
# the old side this checkout's copies.
for dir in "$tree" "$tree2"; do
  for part in kernels llm_bridge train; do
    [ -d "$dir/$part" ] && [ ! -e "$dir/ecomjax/$part" ] && ln -s "../$part" "$dir/ecomjax/$part"
  done
done
old=$(git -C "$tree" rev-parse --short HEAD)
if [ -n "${AB_NEW:-}" ]; then
  new=$(git -C "$tree2" rev-parse --short HEAD)
else
  new="$(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- ecomjax kernels || echo +dirty)"
fi
for _ in $(seq "$rounds"); do
  for side in old new; do
    if [ "$side" = old ]; then dir=$tree label=$old; else dir=$newdir label=$new; fi
    if [ -n "$tasks" ]; then
      (cd "$dir" && PYTHONPATH="$dir" "$py" "$root/benchmarks/families.py" --n 1000 \
        --batch "$batch" --repeats 3 --tasks "$tasks" --label "$label" --out "$out" \
        | sed "s/^/$label /")
    else
      (cd "$dir" && PYTHONPATH="$dir" "$py" "$root/benchmarks/throughput.py" --sizes "$batch" \
        --repeats 5 --loop-episodes 4 --label "$label" --out "$out" | grep "B=" | sed "s/^/$label /")
    fi
  done
done
