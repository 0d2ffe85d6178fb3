#!/usr/bin/env bash
# Same-session A/B of `ecomjax run` itself, cold (no compile cache): a past commit against
# this checkout, one after the other, so compile-time claims compare like with like.
#
#   bash benchmarks/ab_cli.sh REV [TASKS] [BATCH]
#
# Rows (the run's --json summary plus side, commit, tasks, batch) go to
# benchmarks/results/ab_cli.jsonl. REV runs from a temporary git worktree (PYTHONPATH),
# both sides with this checkout's virtual environment.
set -euo pipefail
rev=${1:?usage: ab_cli.sh REV [TASKS] [BATCH]}
tasks=${2:-C8}
batch=${3:-1024}
root=$(cd "$(dirname "$0")/.." && pwd)
py="$root/.venv/bin/python"
out="$root/benchmarks/results/ab_cli.jsonl"
tree=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tree" >/dev/null 2>&1 || true' EXIT
git -C "$root" worktree add -q --detach "$tree" "$rev"
for part in kernels llm_bridge train; do  # setup.py's mapping, as in ab_throughput.sh
  [ -d "$tree/$part" ] && [ ! -e "$tree/ecomjax/$part" ] && ln -s "../$part" "$tree/ecomjax/$part"
done
for side in old new; do
  if [ "$side" = old ]; then dir=$tree; else dir=$root; fi
  commit=$(git -C "$dir" rev-parse --short=12 HEAD)
  summary=$(cd "$dir" && PYTHONPATH="$dir" ECOMJAX_CACHE_DIR=off "$py" -m ecomjax.cli run \
    --tasks "$tasks" --batch "$batch" --rounds 2 --json 2>/dev/null | tail -1)
  "$py" - "$summary" "$side" "$commit" "$tasks" "$batch" "$out" <<'PY'
import json, sys
import os; sys.path.insert(0, os.path.dirname(os.path.dirname(sys.argv[6])))
from throughput import env_info
summary, side, commit, tasks, batch, out = sys.argv[1:]
row = env_info() | json.loads(summary) | {"kind": "ab_cli", "side": side, "commit": commit,
                                          "tasks": tasks, "batch": int(batch)}
with open(out, "a") as f:
    f.write(json.dumps(row) + "\n")
print(side, commit, f"compile {row['compile_s']:.1f} s", f"{row['episodes_per_s']:.0f} episodes/s")
PY
done
