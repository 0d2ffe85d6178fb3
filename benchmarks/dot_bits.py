"""Can a category scan score relevance searches bit for bit as the whole-catalog scan does?

A relevance (cosine) search over a category's gathered rows would scan ~N/categories rows
instead of N, which is most of the time at N = 100k (benchmarks/README "Large catalogs").
It is only allowed when its results equal the full scan's bit for bit (issue 16), and a
float32 dot product's bits depend on the order XLA's kernel sums it in. This script
measures, on this backend, whether the scores of gathered rows equal the full scan's
(``tools/search.py``: the catalog chunk times the vmapped query vectors) for each way of
writing the gathered dot and each shape, and writes one row per case to
``results/dot_bits.jsonl``:

- ``matvec``: each query's gathered rows times its vector (what a vmapped search gives);
- ``pair_rows_first`` / ``pair_query_first``: the same with a zero partner query, so the
  dot is a (batched) matrix product, in either operand order;

and times the candidate that would make any order exact, unit vectors quantised to int16
(2^14 scale) with int32 accumulation (below 2^28 by Cauchy-Schwarz), against the float32
dot, for one full-scan chunk (median of 7 batches of 20 calls, one row each).

    python benchmarks/dot_bits.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ecomjax.catalog.synthetic import generate_catalog

sys.path.insert(0, str(Path(__file__).parent))
from rows_io import append_rows  # noqa: E402
from throughput import env_info  # noqa: E402

OUT = Path(__file__).parent / "results" / "dot_bits.jsonl"
Q = 32  # searches a retrieval step (EnvParams.search_batch)


def gathered(form: str):
    """(vector [D], rows [M, D]) -> scores [M], written one way."""

    def pair(v):
        return jnp.stack([v, jnp.zeros_like(v)])

    return {
        "matvec": lambda v, r: r @ v,
        "pair_rows_first": lambda v, r: (r @ pair(v).T)[:, 0],
        "pair_query_first": lambda v, r: (pair(v) @ r.T)[0],
    }[form]


def _ms(fn, *args) -> float:
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(20):
            out = fn(*args)
        jax.block_until_ready(out)
        times.append((time.perf_counter() - t0) / 20)
    return statistics.median(times) * 1e3


def int_dot_speed(chunk: int = 8192, dim: int = 384) -> list[dict]:
    """float32 against int16 -> int32 dots of one chunk by the step's query vectors."""
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((chunk, dim)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    q = rng.standard_normal((Q, dim)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    dims = (((1,), (1,)), ((), ()))
    f32 = jax.jit(
        lambda v, e: lax.dot_general(
            e, v, dims, precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32
        )
    )
    i16 = jax.jit(lambda v, e: lax.dot_general(e, v, dims, preferred_element_type=jnp.int32))
    qi, ei = (jnp.asarray(np.round(x * 2**14).astype(np.int16)) for x in (q, emb))
    peak = int(np.abs(np.asarray(i16(qi, ei))).max())
    out = [
        {"bench": "dot_speed", "dtype": "float32", "chunk": chunk, "dim": dim,
         "ms": _ms(f32, jnp.asarray(q), jnp.asarray(emb))},
        {"bench": "dot_speed", "dtype": "int16->int32", "chunk": chunk, "dim": dim,
         "ms": _ms(i16, qi, ei), "peak_abs": peak},
    ]  # fmt: skip
    for r in out:
        print(f"{r['dtype']:13s} dot of {Q} x {chunk} x {dim}: {r['ms']:.2f} ms")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--label", default="")
    args = ap.parse_args(argv)
    rows = []
    for n, chunk in ((1000, 1000), (1000, 256), (100_000, 8192), (100_000, 2048)):
        emb = generate_catalog(42, n).emb.astype(jnp.float32)
        q = emb[jax.random.randint(jax.random.key(1), (Q,), 0, n)] + 0.01
        q = q / jnp.linalg.norm(q, axis=-1, keepdims=True)
        # the full scan's form: one catalog chunk, the step's query vectors vmapped
        full = np.asarray(jax.jit(jax.vmap(lambda v, e: e @ v, in_axes=(0, None)))(q, emb[:chunk]))
        for m in (8, 36, 700):
            ids = jax.random.randint(jax.random.key(m), (Q, m), 0, chunk)
            want = np.take_along_axis(full, np.asarray(ids), 1)
            for form in ("matvec", "pair_rows_first", "pair_query_first"):
                fn = gathered(form)
                got = np.asarray(jax.jit(jax.vmap(lambda v, i, f=fn: f(v, emb[i])))(q, ids))
                same = bool(np.array_equal(got, want))
                rows.append(
                    {"n": n, "chunk": chunk, "gathered_rows": m, "form": form, "bit_equal": same,
                     "max_abs_diff": float(np.abs(got - want).max()), "dim": int(emb.shape[1])}
                )  # fmt: skip
                print(f"N={n:>6} chunk={chunk:>4} M={m:>3} {form:17s} bit-equal: {same}")
    rows.extend(int_dot_speed())
    append_rows(OUT, (env_info() | {"kind": "dot_bits", "label": args.label} | r for r in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
