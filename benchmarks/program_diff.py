"""Does a change alter the traced program? Lowers one mixed-batch rollout
(``rollout.run_plan_jit``, the oracle agent) at a past commit and in the working tree, and
compares the StableHLO texts with debug info off and SSA names numbered away.

    python benchmarks/program_diff.py REV [--new REV2] [--tasks C8] [--n 4]

Equal texts mean XLA compiles the same program, so throughput and compile time cannot
differ: for a refactor that is a stronger statement than a timed A/B on a noisy machine
(and costs two traces, not two compiles). Texts that differ only in the outputs' pytree
names (``jax.result_info``: a renamed state field) are the same computation
(``same_up_to_names``). Otherwise it prints the differing lines. Rows
(one per side: commit, bytes, sha256 of the normalised text) go to
``results/program_diff.jsonl``. REV (and REV2, when given, for the new side) is checked
out into a temporary git worktree and imported from there (PYTHONPATH), as
``ab_throughput.sh`` does.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "results" / "program_diff.jsonl"
SSA = re.compile(r"%[\w]+(#\d+)?")
# the pytree paths of the outputs: a renamed state field changes them and nothing else
NAMES = re.compile(r'jax\.(result|arg)_info = "[^"]*"')


def emit(tasks: str, n: int, path: Path) -> dict:
    """This process's ``ecomjax``: the normalised program text to ``path``, and its row."""
    import jax
    import jax.numpy as jnp

    from ecomjax.agents.oracle import make_oracle
    from ecomjax.catalog.synthetic import generate_catalog
    from ecomjax.registry import family, resolve_tasks
    from ecomjax.rollout import run_plan_jit
    from ecomjax.types import EnvParams

    names = resolve_tasks(tasks)
    plan = tuple((x, n) for x in names)
    b = n * len(names)
    agent = make_oracle(tuple(family(x).env for x in names))
    args = (generate_catalog(42, 1000), jax.random.split(jax.random.key(0), b))
    lowered = run_plan_jit.lower(*args, jnp.zeros(b, jnp.int32), plan, agent, EnvParams())
    text = SSA.sub("%", lowered.as_text(debug_info=False))
    path.write_text(text)
    sys.path.insert(0, str(HERE))
    from rows_io import git_commit
    from throughput import env_info

    return env_info() | {
        "kind": "program_diff",
        "commit": git_commit(),
        "tasks": tasks,
        "episodes_per_task": n,
        "bytes": len(text),
        "lines": text.count("\n"),
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
    }


def side(tree: Path, args: argparse.Namespace, path: Path) -> dict:
    cmd = [sys.executable, __file__, "--emit", str(path), "--tasks", args.tasks, "--n", str(args.n)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(cmd, cwd=tree, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("rev", nargs="?", help="the commit to compare against")
    ap.add_argument("--new", help="a commit for the new side (default: the working tree)")
    ap.add_argument("--tasks", default="C8")
    ap.add_argument("--n", type=int, default=4, help="episodes per task in the plan")
    ap.add_argument("--emit", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.emit:
        print(json.dumps(emit(args.tasks, args.n, args.emit)))
        return 0
    if not args.rev:
        ap.error("give the commit to compare against")
    with tempfile.TemporaryDirectory() as tmp:
        trees = []
        try:
            for name, rev in (("old", args.rev), ("new", args.new)):
                if rev is None:  # the working tree
                    trees.append(ROOT)
                    continue
                tree = Path(tmp) / name
                subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach",
                                str(tree), rev], check=True)  # fmt: skip
                trees.append(tree)
                # setup.py's mapping (ab_throughput.sh); kernels/ moved in on 2026-12-03
                for part in ("kernels", "llm_bridge", "train"):
                    if (tree / part).is_dir() and not (tree / "ecomjax" / part).exists():
                        (tree / "ecomjax" / part).symlink_to(Path("..") / part)
            old = side(trees[0], args, Path(tmp) / "old.txt")
            new = side(trees[1], args, Path(tmp) / "new.txt")
            a = (Path(tmp) / "old.txt").read_text().splitlines()
            b = (Path(tmp) / "new.txt").read_text().splitlines()
        finally:
            for tree in trees:
                if tree != ROOT:
                    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                                    str(tree)])  # fmt: skip
    same = old["sha256"] == new["sha256"]
    same_ops = NAMES.sub("", "\n".join(a)) == NAMES.sub("", "\n".join(b))
    diff = list(difflib.unified_diff(a, b, old["commit"], new["commit"], lineterm="", n=0))
    changed = sum(1 for x in diff if x[:1] in "+-" and x[:3] not in ("+++", "---"))
    sys.path.insert(0, str(HERE))
    from rows_io import append_rows

    verdict = {
        "same_program": same,
        "same_up_to_names": same_ops,
        "changed_lines": changed,
        "against": old["commit"],
    }
    append_rows(OUT, [old | {"side": "old"}, new | {"side": "new"} | verdict])
    print(f"{args.tasks}, {args.n} episodes a task: {old['commit']} {old['lines']} lines, "
          f"{new['commit']} {new['lines']} lines: " + ("the same program" if same else
          "the same program but for output names" if same_ops else
          f"{changed} lines differ"))  # fmt: skip
    for line in diff[:200]:
        print(line[:200])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
