"""PD / SUB pool witnesses (SPEC §8.1, §8.2 "Witnesses (v1.1)"), shared by both generators.

With one reference, PD's bounds usually admitted the target alone, so ranking and k were
moot and one repeated id scored full marks. After C is drawn (m(d) unchanged), up to
k_rec(d) − 1 further in-stock products of the goal category that meet every discrete
constraint of C and have every numeric attribute C names are drawn keyed, and each
numeric bound is widened to cover them: |F_init| >= min(k_rec(d), 1 + eligible).

The draw is exact (uniform without replacement over all eligible products, however rare),
so it streams the category's run of ``cat_order`` in fixed chunks: O(category size) per
episode, well under the verifier's O(N) pool pass, and chunking never changes the draw.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog
from ecomjax.constraints import IS_NUMERIC, attr_values
from ecomjax.predicates import disc_values
from ecomjax.sampling import in_category

W = C.MAX_K_REC - 1  # witnesses beyond the target (PD) or p1 (SUB)
CHUNK = 64  # category positions per loop step; a 1000-product catalog needs one


def eligible(
    catalog: Catalog, pids: jax.Array, attr: jax.Array, op: jax.Array, units: jax.Array
) -> jax.Array:
    """bool [...]: in stock, every discrete constraint of C holds, every numeric attribute
    C constrains is present (> 0, as for a constraint reference, SPEC §8.0)."""
    p = jnp.clip(pids, 0, catalog.n_products - 1)
    a = jnp.maximum(attr, 0)
    live = attr >= 0
    numeric = jnp.asarray(IS_NUMERIC)[a] & live
    discrete = ~jnp.asarray(IS_NUMERIC)[a] & live & (op == 0)
    disc = jnp.take(disc_values(catalog, p), jnp.minimum(a, C.N_DISC_FILTERS - 1), axis=-1)
    num = jnp.take(attr_values(catalog, p), a, axis=-1)
    ok_disc = ~discrete | ((disc == units) & (disc >= 0))
    ok_num = ~numeric | (~jnp.isnan(num) & (num > 0))
    return (catalog.stock[p] > 0) & (ok_disc & ok_num).all(-1)


def draw_witnesses(
    key: jax.Array,
    catalog: Catalog,
    cat: jax.Array,
    attr: jax.Array,
    op: jax.Array,
    units: jax.Array,
    avoid: jax.Array,
    n: jax.Array,
) -> jax.Array:
    """int32 [W]: up to n eligible products of category ``cat``, none in ``avoid`` (int32,
    -1 pads), uniform without replacement (-1 padded, fewer if fewer are eligible).

    Each category position gets a keyed uniform priority (one key per chunk); the n
    smallest among eligible positions win, kept by a running top-W merge."""
    lo, hi = in_category(catalog, cat)
    inf = jnp.float32(jnp.inf)

    def cond(carry):
        return lo + carry[0] * CHUNK < hi

    def body(carry):
        i, best_pri, best_pid = carry
        pos = lo + i * CHUNK + jnp.arange(CHUNK)
        pid = catalog.cat_order[jnp.clip(pos, 0, catalog.n_products - 1)]
        ok = (pos < hi) & eligible(catalog, pid, attr, op, units)
        ok &= ~(pid[:, None] == avoid[None, :]).any(-1)
        pri = jnp.where(ok, jax.random.uniform(jax.random.fold_in(key, i), (CHUNK,)), inf)
        all_pri = jnp.concatenate([best_pri, pri])
        all_pid = jnp.concatenate([best_pid, pid])
        neg, idx = jax.lax.top_k(-all_pri, W)
        return i + 1, -neg, all_pid[idx]

    init = (jnp.int32(0), jnp.full(W, inf), jnp.full(W, -1, jnp.int32))
    _, pri, pid = jax.lax.while_loop(cond, body, init)
    keep = (pri < inf) & (jnp.arange(W) < n)
    return jnp.where(keep, pid, -1).astype(jnp.int32)
