"""Compile seconds and jaxpr size of every jitted entry point (DESIGN: compile is reported
apart from steady state).

Why: on a small CPU the compile, not the run, dominates a short RL experiment or a test
suite, so each entry point's cost is tracked to catch regressions. For each one this
records the trace + lower time, the XLA compile time, and the jaxpr equation count (top
level and recursive through loops, conds and nested jits). Every input is a jit
argument, never a closure constant, so XLA cannot constant-fold catalog-wide work.

    python benchmarks/compile_report.py                    # N = 1000, B = 8, C1 and C8
    python benchmarks/compile_report.py --only generate reset step verify --plans C1

Rows go to benchmarks/results/compile_report.jsonl. The persistent compile cache is off
here on purpose: a cache hit would report a load, not a compile.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from ecomjax.agents.oracle import make_oracle
from ecomjax.catalog.synthetic import generate_catalog
from ecomjax.core import reset, step, verify
from ecomjax.registry import FAMILIES, family, resolve_tasks
from ecomjax.rollout import run_plan
from ecomjax.runner import make_plan
from ecomjax.types import EnvParams, empty_action

sys.path.insert(0, str(Path(__file__).parent))
from rows_io import append_rows  # noqa: E402
from throughput import env_info, episode_inputs  # noqa: E402

OUT = Path(__file__).parent / "results" / "compile_report.jsonl"


def _sub_jaxprs(value: Any):
    """Jaxprs nested in an equation parameter (loop bodies, cond branches, inner jits)."""
    if hasattr(value, "eqns"):
        yield value
    elif hasattr(value, "jaxpr") and hasattr(value.jaxpr, "eqns"):
        yield value.jaxpr
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _sub_jaxprs(v)


def count_eqns(jaxpr) -> int:
    """Equations of a jaxpr, counting every nested jaxpr's equations too."""
    total = 0
    for eqn in jaxpr.eqns:
        total += 1
        for v in eqn.params.values():
            total += sum(count_eqns(j) for j in _sub_jaxprs(v))
    return total


def measure(name: str, fn, *args, tail: tuple = (), static: dict | None = None) -> dict:
    """Trace, lower and compile ``jax.jit(fn)`` on ``args``; nothing is executed.

    ``tail`` (positional) and ``static`` (keyword) arguments are closed over as static."""
    static = static or {}

    def bound(*a):
        return fn(*a, *tail, **static)

    jitted = jax.jit(bound)
    closed = jax.make_jaxpr(bound)(*args)
    t0 = time.perf_counter()
    lowered = jitted.lower(*args)
    lower_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    lowered.compile()
    compile_s = time.perf_counter() - t0
    row = {
        "entry": name,
        "trace_lower_s": lower_s,
        "compile_s": compile_s,
        "jaxpr_eqns": len(closed.jaxpr.eqns),
        "jaxpr_eqns_recursive": count_eqns(closed.jaxpr),
        "stablehlo_chars": len(lowered.as_text()),
    }
    print(
        f"{name:<28} compile {compile_s:7.1f}s  trace+lower {lower_s:5.1f}s  "
        f"eqns {row['jaxpr_eqns']:>5} / {row['jaxpr_eqns_recursive']:>7}",
        flush=True,
    )
    return row


def catalog_entry(n: int) -> tuple[str, Any, tuple, dict]:
    """The catalog generator's jitted core (``_build``), with its real arguments."""
    from ecomjax.catalog import synthetic as syn

    tabs = {k: jnp.asarray(v) for k, v in syn._emb_tables(384).items()}
    args = (jax.random.key(42), syn._device_meta(), tabs)
    build = getattr(syn._build, "__wrapped__", syn._build)
    return "catalog.generate", build, args, {"n": n, "dim": 384, "emb_dtype": jnp.float32}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=1000, help="catalog size")
    ap.add_argument("--batch", type=int, default=8, help="episodes per entry point")
    ap.add_argument("--plans", nargs="*", default=["C1", "C8"])
    ap.add_argument(
        "--only",
        nargs="*",
        default=["catalog", "generate", "reset", "step", "verify", "run_plan"],
    )
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    jax.config.update("jax_enable_compilation_cache", False)
    params = EnvParams()
    catalog = generate_catalog(42, args.n)
    keys, d = episode_inputs(args.batch, 0)
    info = env_info() | {"n_products": args.n, "batch": args.batch}
    rows = []

    def add(row: dict) -> None:
        rows.append(info | {"kind": "compile"} | row)

    if "catalog" in args.only:
        name, fn, cargs, static = catalog_entry(args.n)
        add(measure(name, fn, *cargs, static=static))
    problems = None
    for fam_name in FAMILIES:
        fam = family(fam_name)
        gen = jax.vmap(fam.generate, (0, None, 0, None))
        if "generate" in args.only:
            add(measure(f"generate.{fam_name}", gen, keys, catalog, d, tail=(params,)))
        if fam_name == "CART":
            problems = jax.jit(gen, static_argnums=3)(keys, catalog, d, params)
    vreset = jax.vmap(reset, (0, None, 0, None))
    states, _ = jax.jit(vreset, static_argnums=3)(keys, catalog, problems, params)
    if "reset" in args.only:
        add(measure("reset", vreset, keys, catalog, problems, tail=(params,)))
    actions = jax.vmap(lambda _: empty_action(catalog.embed_dim))(jnp.arange(args.batch))
    if "step" in args.only:
        vstep = jax.vmap(step, (None, 0, 0, None))
        add(measure("step (+retrieval)", vstep, catalog, states, actions, tail=(params,)))
    if "verify" in args.only:
        vverify = jax.vmap(verify, (None, 0, None))
        add(measure("verify (all families)", vverify, catalog, states, tail=(params,)))
    if "run_plan" in args.only:
        for spec in args.plans:
            tasks = resolve_tasks(spec)
            plan = make_plan(tasks, args.batch)
            agent = make_oracle(tuple(family(t).env for t in tasks))
            row = measure(
                f"run_plan.{spec}",
                run_plan,
                catalog,
                keys,
                d,
                tail=(plan, agent, params),
            )
            add(row | {"plan": [list(e) for e in plan], "agent": "oracle"})
    print(f"wrote {append_rows(args.out, rows)} rows to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
