"""``constraints.feasible`` by merged per-attribute bounds (its table and its column
gathers) against the per-constraint reference (``constraint_holds(...).all(-1)``, which
reduces a [..., MC] minor axis), vmapped over B lanes of W ids each, one constraint set a
lane, in one process on the same inputs (rows to ``results/feasible.jsonl``). This sets
``constraints.TABLE_MAX_PRODUCTS``.

    python benchmarks/feasible.py
    python benchmarks/feasible.py --shapes 4096x200x1000,1024x200x1000000

A shape is BxWxN: lanes, ids a lane, catalog products (W = 200: the PD/SUB oracle's cards;
36: one category chunk of the verifier's pool at N = 1,000; 10: a listed answer). All
ways' outputs are checked equal before they are timed; times are medians of
``--repeats`` calls after a warm-up.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax import constants as C
from ecomjax import constraints as K
from ecomjax.catalog.synthetic import generate_catalog

sys.path.insert(0, str(Path(__file__).parent))
from rows_io import append_rows  # noqa: E402
from throughput import env_info  # noqa: E402
from timing import compiled, median_s  # noqa: E402

OUT = Path(__file__).parent / "results" / "feasible.jsonl"
SHAPES = "4096x200x1000,4096x36x1000,4096x10x1000,4096x200x100000,1024x200x1000000"


def reference(catalog, pids, attr, op, val):
    known = (pids >= 0) & (pids < catalog.n_products)
    return K.constraint_holds(catalog, pids, attr, op, val).all(-1) & known


WAYS = {
    "reference": reference,
    "table": lambda c, i, a, o, v: K._feasible(c, i, a, o, v, True),
    "columns": lambda c, i, a, o, v: K._feasible(c, i, a, o, v, False),
}


def inputs(catalog, b: int, w: int, seed: int = 0):
    """Generated-looking sets: the category of a random product and 1-5 more constraints
    on attributes of it, values on that product's own; 80% of the ids from that category
    (as the cards of a filtered search and the pool's category chunks are)."""
    rng = np.random.default_rng(seed)
    n = catalog.n_products
    base = rng.integers(0, n, b)
    vals = np.asarray(K.attr_values(catalog, jnp.asarray(base, jnp.int32)))  # [b, NA]
    mc = C.MAX_CONSTRAINTS
    live = np.arange(mc)[None] < 1 + rng.integers(1, 6, b)[:, None]
    attr = np.where(live, rng.integers(0, C.N_ATTRS, (b, mc)), -1)
    attr[:, 0] = C.Attr.CAT
    op = np.where(np.asarray(K.IS_NUMERIC)[np.clip(attr, 0, None)], rng.choice([-1, 1], (b, mc)), 0)
    val = np.take_along_axis(vals, np.clip(attr, 0, None), 1) / K._SCALE[np.clip(attr, 0, None)]
    offsets = np.asarray(catalog.cat_offsets)
    cat = np.asarray(catalog.category)[base]
    pos = offsets[cat][:, None] + (rng.random((b, w)) * np.diff(offsets)[cat][:, None])
    same_cat = np.asarray(catalog.cat_order)[pos.astype(np.int64)]
    ids = np.where(rng.random((b, w)) < 0.8, same_cat, rng.integers(0, n, (b, w)))
    return tuple(
        jnp.asarray(x, dt)
        for x, dt in ((ids, jnp.int32), (attr, jnp.int32), (op, jnp.int32), (val, jnp.float32))
    )


def measure(catalog, b: int, w: int, repeats: int) -> dict:
    args = inputs(catalog, b, w)
    secs, comp, outs = {}, {}, {}
    for way, fn in WAYS.items():
        prog, comp[way] = compiled(
            lambda i, a, o, v, fn=fn: jax.vmap(lambda *x: fn(catalog, *x))(i, a, o, v), *args
        )
        secs[way], out = median_s(prog, lambda _: args, repeats)
        outs[way] = np.asarray(out)
    for way in ("table", "columns"):
        if not np.array_equal(outs[way], outs["reference"]):
            raise AssertionError(f"{way} differs from the reference at {b}x{w}")
    n = catalog.n_products
    row = {
        "kind": "feasible",
        "B": b,
        "W": w,
        "catalog_size": n,
        "repeats": repeats,
        "feasible_share": float(outs["reference"].mean()),
        "chosen": "table" if n <= K.TABLE_MAX_PRODUCTS else "columns",
        **{f"{w_}_us_per_lane": 1e6 * s / b for w_, s in secs.items()},
        **{f"{w_}_compile_s": c for w_, c in comp.items()},
        "reference_over_table": secs["reference"] / secs["table"],
        "reference_over_columns": secs["reference"] / secs["columns"],
    }
    print(
        f"{b}x{w}x{n}: reference {row['reference_us_per_lane']:8.3f} µs/lane, "
        f"table {row['table_us_per_lane']:8.3f} ({row['reference_over_table']:.2f}x), "
        f"columns {row['columns_us_per_lane']:8.3f} ({row['reference_over_columns']:.2f}x), "
        f"chosen {row['chosen']}"
    )
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shapes", default=SHAPES, help="BxWxN, comma-separated")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    info = env_info()
    rows, catalogs = [], {}
    for shape in filter(None, args.shapes.split(",")):
        b, w, n = (int(x) for x in shape.split("x"))
        if n not in catalogs:  # embeddings are not read here, so keep them small
            catalogs[n] = generate_catalog(42, n, embed_dim=8)
        rows.append(info | measure(catalogs[n], b, w, args.repeats))
    append_rows(args.out, rows)
    print(f"wrote {len(rows)} rows to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
