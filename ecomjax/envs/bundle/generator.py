"""BUNDLE problem generator (SPEC §8.7): a project, its first n_slots(d) leaves after a
keyed shuffle, and an optional budget that the cheapest in-stock product per slot fits.

Encodings (Problem): ``bundle_cats`` = catalog category indices of S_req (-1 padded);
``budget_cents`` = B in cents (-1 = no budget). Slots: ITEMS (critical; its slot_value is
the project index into ``PROJECTS``, the categories travel in ``bundle_cats``) and BUDGET
(non-critical, in dollars, only when there is a budget).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax.catalog.types import Catalog
from ecomjax.catalog.vocabulary import TAXONOMY
from ecomjax.constraints import grid_value
from ecomjax.sampling import append_protected, base_problem, omission, stream
from ecomjax.types import EnvParams, Problem

S = C.Slot
# The slots the customer can be asked about (SPEC §10.1 knowable fields).
SLOTS = (S.ITEMS, S.BUDGET)
MB = C.MAX_BUNDLE_SLOTS
P_BUDGET = 0.6
U_LO, U_HI = 52429, 98304  # U(0.8, 1.5) on a 2^-16 grid: ⌈0.8·2^16⌉ .. 1.5·2^16 (exclusive)

PROJECTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "home office setup",
        ("desks", "chairs", "monitors", "keyboards", "mice", "headphones", "laptops", "lamps",
         "shelves", "speakers", "smart plugs", "chargers"),
    ),
    (
        "gaming corner",
        ("game consoles", "game controllers", "monitors", "headphones", "chairs", "desks",
         "keyboards", "mice", "speakers", "smart lights", "rugs", "shelves"),
    ),
    (
        "camping trip",
        ("camping gear", "hiking gear", "boots", "sunscreen", "chargers", "action cameras",
         "speakers", "cookware", "men's pants", "women's tops"),
    ),
    (
        "fitness starter pack",
        ("weights", "yoga gear", "sneakers", "men's shirts", "women's tops", "men's pants",
         "headphones", "hiking gear", "shampoo", "moisturizers"),
    ),
    (
        "kitchen refresh",
        ("kitchen appliances", "cookware", "kitchen utensils", "rugs", "shelves", "lamps",
         "smart lights", "smart plugs"),
    ),
)  # fmt: skip
N_PROJECTS = len(PROJECTS)
_DISPLAY = [t[2] for t in TAXONOMY]
# [N_PROJECTS, MB] taxonomy leaf (= synthetic catalog category) indices, -1 padded.
PROJECT_CATS = np.full((N_PROJECTS, MB), -1, np.int32)
for _p, (_, _leaves) in enumerate(PROJECTS):
    PROJECT_CATS[_p, : len(_leaves)] = [_DISPLAY.index(x) for x in _leaves]
PROJECT_LEN = np.array([len(x[1]) for x in PROJECTS], np.int32)


@struct.dataclass
class CategoryPrices:
    """Per category, over in-stock, non-denied products: count, min and median (cents),
    and the cheapest product (ties to the lower catalog index)."""

    count: jax.Array  # int32 [C]
    min_cents: jax.Array  # int32 [C]
    median_cents: jax.Array  # float32 [C]
    median2_cents: jax.Array  # int32 [C], twice the median (exact)
    cheapest: jax.Array  # int32 [C], -1 if none


def category_prices(catalog: Catalog) -> CategoryPrices:
    """One sort over the catalog; it depends on the catalog only, so under vmap it runs
    once for the whole batch."""
    n_cat = catalog.n_categories
    cat = catalog.category.astype(jnp.int32)
    ok = (catalog.stock > 0) & ~catalog.cat_denied[cat]
    price = catalog.price_cents.astype(jnp.int32)
    group = jnp.where(ok, cat, n_cat)  # out-of-stock rows sort after every category
    order = jnp.lexsort((jnp.arange(cat.shape[0]), price, group))
    g_sorted, p_sorted = group[order], price[order]
    cats = jnp.arange(n_cat)
    start = jnp.searchsorted(g_sorted, cats, side="left")
    end = jnp.searchsorted(g_sorted, cats, side="right")
    count = (end - start).astype(jnp.int32)
    last = cat.shape[0] - 1
    lo_mid = jnp.clip(start + (count - 1) // 2, 0, last)
    hi_mid = jnp.clip(start + count // 2, 0, last)
    median2 = p_sorted[lo_mid] + p_sorted[hi_mid]
    first = jnp.clip(start, 0, last)
    has = count > 0
    return CategoryPrices(
        count=count,
        min_cents=jnp.where(has, p_sorted[first], 0),
        median_cents=jnp.where(has, median2.astype(jnp.float32) * 0.5, 0.0),
        median2_cents=jnp.where(has, median2, 0).astype(jnp.int32),
        cheapest=jnp.where(has, order[first], -1).astype(jnp.int32),
    )


def _mul_shift16(u: jax.Array, x: jax.Array) -> jax.Array:
    """int32 ⌊u·x / 2^16⌋ exactly for 0 <= u < 2^17 and 0 <= x < 2^25 (uint32 pieces)."""
    u = u.astype(jnp.uint32)
    x = jnp.maximum(x, 0).astype(jnp.uint32)
    u_hi, u_lo = u >> 16, u & 0xFFFF
    x_hi, x_lo = x >> 16, x & 0xFFFF
    return (u * x_hi + u_hi * x_lo + ((u_lo * x_lo) >> 16)).astype(jnp.int32)


def fill(
    key: jax.Array, catalog: Catalog, d: jax.Array, params: EnvParams, problem: Problem, sub
) -> Problem:
    """Writes the BUNDLE goal into ``problem`` with its slot rows at sub-goal ``sub``."""
    diff = D.difficulty(d, params.overrides)
    k_p, k_s, k_b, k_u = jax.random.split(stream(key, "PROBLEM", C.Env.BUNDLE, sub), 4)
    prices = category_prices(catalog)
    project = jax.random.randint(k_p, (), 0, N_PROJECTS)
    leaves = jnp.asarray(PROJECT_CATS)[project]
    # A leaf without an in-stock product has no price to budget: it never becomes a slot.
    usable = (leaves >= 0) & (leaves < catalog.n_categories)
    usable &= prices.count[jnp.clip(leaves, 0, catalog.n_categories - 1)] > 0
    prio = jnp.where(usable, jax.random.uniform(k_s, (MB,)), 2.0)
    shuffled = leaves[jnp.argsort(prio)]
    n = diff.n_slots_capped(usable.sum())
    cats = jnp.where(jnp.arange(MB) < n, shuffled, -1).astype(jnp.int32)
    live = cats >= 0
    c = jnp.maximum(cats, 0)
    # B = round(max(1.10·Σ min_s, U(0.8, 1.5)·Σ median_s)) in integer cents (SPEC §12):
    # round(1.1·x) = ⌊(11x + 5) / 10⌋, and u = U / 2^16 on a grid, multiplied out exactly.
    sum_min = jnp.where(live, prices.min_cents[c], 0).sum().astype(jnp.int32)
    sum_med2 = jnp.where(live, prices.median2_cents[c], 0).sum().astype(jnp.int32)
    u16 = jax.random.randint(k_b, (), U_LO, U_HI)
    by_min = (11 * sum_min + 5) // 10
    by_median = (_mul_shift16(u16, sum_med2) + 1) // 2  # round(u·Σ median) = ⌊(⌊2uΣ⌋ + 1) / 2⌋
    budget = jnp.maximum(by_min, by_median).astype(jnp.int32)
    has_budget = (diff.d >= 2) & (jax.random.uniform(k_u) < P_BUDGET)
    budget = jnp.where(has_budget, budget, -1)

    has = problem.has_slot.at[sub, 0, S.ITEMS].set(True).at[sub, 0, S.BUDGET].set(has_budget)
    omit = omission(key, sub, 0, S.BUDGET, diff.p_missing)
    pending = problem.pending.at[sub, 0, S.ITEMS].set(False)
    pending = pending.at[sub, 0, S.BUDGET].set(has_budget & omit)
    value = problem.slot_value.at[sub, S.ITEMS].set(project.astype(jnp.float32))
    stated = grid_value(jnp.maximum(budget, 0), jnp.int32(100), jnp.bool_(True))
    value = value.at[sub, S.BUDGET].set(jnp.where(has_budget, stated, 0.0))
    op = problem.slot_op.at[sub, S.ITEMS].set(0).at[sub, S.BUDGET].set(-1)
    # Shocks never touch the cheapest in-stock product of a slot (SPEC §6, JOURNEY): fill
    # the free protected entries in slot order (8 entries; a 12-slot bundle protects 8).
    cheapest = jnp.where(live, prices.cheapest[c], -1)
    protected = append_protected(problem.protected, cheapest)
    return problem.replace(
        has_slot=has,
        pending=pending,
        slot_value=value,
        slot_op=op,
        bundle_cats=cats,
        budget_cents=budget,
        protected=protected,
    )


def generate(key: jax.Array, catalog: Catalog, d: jax.Array, params: EnvParams) -> Problem:
    return fill(key, catalog, d, params, base_problem(key, d, C.Env.BUNDLE, params, catalog), 0)
