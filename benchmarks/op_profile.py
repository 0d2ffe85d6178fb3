"""Where a round's time goes, kernel by kernel: the jitted runner round of ``families.py``
under ``jax.profiler``, its XLA kernels (thunks) summed by name and mapped back to the
Python source lines that produced them.

    python benchmarks/op_profile.py --tasks C8 --batch 1024
    python benchmarks/op_profile.py --tasks SUB --batch 1024 --top 40 --by line

The stage profile (``step_profile.py``) times stages jitted alone; this one times the
production program itself, so fusion across stages and the loop's own copies show up.
Kernel names come from XLA (``fusion.123``, ``sort.4``, ``while.7``...); each row names
the source line of the kernel's root instruction and its ``op_name`` (the jaxpr path).
Times are summed over every execution in ``--repeats`` rounds after a warm-up; the share
is of the summed kernel time. Caveat: tracing costs about a microsecond per kernel
execution, so code made of many tiny kernels (XLA:CPU rolls each threefry hash into a
5-step loop) reads several times its real cost at small batches; the header prints the
unprofiled round beside the profiled kernel sum, and larger batches dilute the error.
Rows go to ``results/op_profile.jsonl``.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from ecomjax import curriculum as cur
from ecomjax.agents.oracle import make_oracle
from ecomjax.catalog.synthetic import generate_catalog
from ecomjax.registry import family, resolve_tasks
from ecomjax.rollout import run_plan
from ecomjax.runner import make_plan
from ecomjax.types import EnvParams

sys.path.insert(0, str(Path(__file__).parent))
from rows_io import append_rows  # noqa: E402
from throughput import env_info, episode_inputs  # noqa: E402

OUT = Path(__file__).parent / "results" / "op_profile.jsonl"
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=.*?metadata=\{([^}]*)\}", re.M)
_FIELD = re.compile(r'(\w+)="([^"]*)"|(\w+)=(-?\d+)')


def _table(hlo_text: str, title: str) -> dict[int, str]:
    """One of the optimized HLO text's index tables (FileNames, StackFrames, ...)."""
    m = re.search(rf"^{title}\n(.*?)(?:\n\n|\Z)", hlo_text, re.M | re.S)
    rows = re.findall(r"^(\d+) (.*)$", m.group(1), re.M) if m else []
    return {int(i): v for i, v in rows}


def _fields(text: str) -> dict[str, str]:
    return {(a or c): (b or d) for a, b, c, d in _FIELD.findall(text)}


def hlo_metadata(hlo_text: str) -> dict[str, dict]:
    """instruction name -> {op_name, where}: ``where`` is the innermost ecomjax source line
    of the instruction's stack frame, then its two callers (``file:line < file:line``)."""
    files = {i: v.strip('"') for i, v in _table(hlo_text, "FileNames").items()}
    locs = {i: _fields(v) for i, v in _table(hlo_text, "FileLocations").items()}
    frames = {i: _fields(v) for i, v in _table(hlo_text, "StackFrames").items()}

    def where(frame_id: int) -> str:
        out, seen = [], set()
        while frame_id in frames and frame_id not in seen and len(out) < 5:
            seen.add(frame_id)
            loc = locs.get(int(frames[frame_id].get("file_location_id", -1)), {})
            name = files.get(int(loc.get("file_name_id", -1)), "?")
            if "ecomjax/" in name or "benchmarks/" in name:
                short = name.split("ecomjax/")[-1].split("benchmarks/")[-1]
                out.append(f"{short}:{loc.get('line', '?')}")
            parent = int(frames[frame_id].get("parent_frame_id", -1))
            frame_id = parent if parent != frame_id else -1
        return " < ".join(out) or "?"

    out = {}
    for name, meta in _INSTR.findall(hlo_text):
        f = _fields(meta)
        out[name] = {
            "op_name": f.get("op_name", ""),
            "where": where(int(f.get("stack_frame_id", -1))),
        }
    return out


def fusion_roots(hlo_text: str) -> dict[str, str]:
    """fusion instruction name -> the name of its fused computation's root instruction."""
    calls = dict(re.findall(r"%?([\w.\-]+) = [^\n]*? fusion\([^\n]*?calls=%?([\w.\-]+)", hlo_text))
    roots = {}
    for comp, body in re.findall(r"\n%?([\w.\-]+) [^\n]*\{\n(.*?)\n\}", hlo_text, re.S):
        m = re.search(r"ROOT\s+%?([\w.\-]+)", body)
        if m:
            roots[comp] = m.group(1)
    return {f: roots.get(c, f) for f, c in calls.items()}


def trace_events(trace_dir: Path) -> list[dict]:
    """Complete events of every perfetto trace under ``trace_dir``."""
    events = []
    for f in trace_dir.rglob("*.trace.json.gz"):
        with gzip.open(f, "rt") as fh:
            data = json.load(fh)
        events += [e for e in data.get("traceEvents", []) if e.get("ph") == "X"]
    return events


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tasks", default="C8")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--n", type=int, default=1000, help="catalog size")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--by", choices=("kernel", "line"), default="kernel")
    ap.add_argument("--label", default="")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)

    tasks = resolve_tasks(args.tasks)
    params = EnvParams()
    catalog = generate_catalog(42, args.n)
    plan = make_plan(tasks, args.batch)
    agent = make_oracle(tuple(family(t).env for t in tasks))
    cfg = cur.CurriculumConfig.default()
    task_ids = jnp.concatenate([jnp.full(n, i, jnp.int32) for i, (_, n) in enumerate(plan)])

    def round_fn(catalog, cstate, keys, d):
        res = run_plan(catalog, keys, d, plan, agent, params)
        r = res.state.reward
        cstate = cur.update(cstate, task_ids, d, r.is_correct, None, cfg, mode="stream")
        return cstate, r.is_correct, res.env_steps

    cstate = cur.init(len(tasks))
    keys, d = episode_inputs(args.batch, 0)
    compiled = jax.jit(round_fn).lower(catalog, cstate, keys, d).compile()
    hlo = compiled.as_text()
    meta = hlo_metadata(hlo)
    roots = fusion_roots(hlo)
    jax.block_until_ready(compiled(catalog, cstate, keys, d))
    plain = []  # the same rounds unprofiled: per-kernel tracing inflates tiny kernels
    for r in range(args.repeats):
        keys, d = episode_inputs(args.batch, 1 + r)
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(catalog, cstate, keys, d))
        plain.append(time.perf_counter() - t0)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            for r in range(args.repeats):
                keys, d = episode_inputs(args.batch, 1 + r)
                jax.block_until_ready(compiled(catalog, cstate, keys, d))
        wall = time.perf_counter() - t0
        events = trace_events(Path(tmp))

    kernels = set(meta) | set(roots)
    totals: dict[str, float] = collections.Counter()
    counts: dict[str, int] = collections.Counter()
    for e in events:
        name = e.get("name", "")
        if name in kernels:
            totals[name] += e.get("dur", 0.0)
            counts[name] += 1
    if not totals:
        print("no XLA kernel events in the trace (is the profiler plugin present?)")
        return 1

    def where(k: str) -> dict:
        m = meta.get(k) or meta.get(roots.get(k, k), {})
        return {"line": m.get("where", "?"), "op_name": m.get("op_name", "")}

    rows = collections.Counter()
    info: dict[str, dict] = {}
    for k, us in totals.items():
        w = where(k)
        key = k if args.by == "kernel" else w["line"]
        rows[key] += us
        info.setdefault(key, w | {"calls": 0})["calls"] += counts[k]
    total = sum(rows.values())
    head = f"{args.tasks} B={args.batch} N={args.n}: {len(totals)} kernels, "
    print(head + f"{total / 1e6 / args.repeats:.3f} s kernel time a round profiled, "
          f"{sum(plain) / args.repeats:.3f} s wall a round unprofiled")  # fmt: skip
    out = []
    for key, us in rows.most_common(args.top):
        w = info[key]
        share = us / total
        print(f"{100 * share:5.1f}%  {us / 1e3 / args.repeats:9.1f} ms/round  {w['calls']:7d}  "
              f"{key:28.28s}  {w['line']:60.60s}  {w['op_name'][-60:]}")  # fmt: skip
        out.append({"key": key, "ms_per_round": us / 1e3 / args.repeats, "share": share} | w)
    if not args.no_write:
        row = env_info() | {
            "kind": "op_profile",
            "label": args.label,
            "tasks": args.tasks,
            "B": args.batch,
            "catalog_size": args.n,
            "repeats": args.repeats,
            "by": args.by,
            "wall_s_per_round_profiled": wall / args.repeats,
            "wall_s_per_round_unprofiled": sum(plain) / args.repeats,
            "kernel_s_per_round": total / 1e6 / args.repeats,
            "top": out,
        }
        append_rows(OUT, [row])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
