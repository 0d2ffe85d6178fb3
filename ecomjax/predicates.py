"""Attribute values and comparisons shared by search filters and constraints (SPEC §1.2).

Numeric attributes are compared in scaled units (cents, rating hundredths, tenths) with a
small tolerance, so ``price <= 19.99`` holds for a product priced 1999 cents.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog

A = C.Attr
# Scale per numeric attribute, in the order of NUMERIC_ATTR_ORDER.
NUMERIC_ATTR_ORDER: tuple[C.Attr, ...] = (
    A.PRICE,
    A.RATING,
    A.RATING_COUNT,
    A.SHIP_DAYS,
    A.WATTAGE,
    A.WEIGHT_LBS,
    A.SCREEN_SIZE_INCHES,
)
SCALE = {
    A.PRICE: 100.0,
    A.RATING: 100.0,
    A.RATING_COUNT: 1.0,
    A.SHIP_DAYS: 1.0,
    A.WATTAGE: 10.0,
    A.WEIGHT_LBS: 10.0,
    A.SCREEN_SIZE_INCHES: 10.0,
}
TOL = 1e-3  # in scaled units


def disc_values(catalog: Catalog, idx: jax.Array) -> jax.Array:
    """int32 [..., N_DISC_FILTERS]: cat, brand, store, then the discrete attribute codes."""
    return jnp.concatenate(
        [
            catalog.category[idx][..., None].astype(jnp.int32),
            catalog.brand[idx][..., None].astype(jnp.int32),
            catalog.store[idx][..., None].astype(jnp.int32),
            catalog.disc[idx].astype(jnp.int32),
        ],
        axis=-1,
    )


def num_values_scaled(catalog: Catalog, idx: jax.Array) -> jax.Array:
    """float32 [..., 7] in NUMERIC_ATTR_ORDER, scaled; NaN where the product lacks it."""
    num = catalog.num[idx].astype(jnp.float32)
    return jnp.stack(
        [
            catalog.price_cents[idx].astype(jnp.float32),
            catalog.rating_x100[idx].astype(jnp.float32),
            catalog.rating_count[idx].astype(jnp.float32),
            catalog.ship_days[idx].astype(jnp.float32),
            num[..., 0] * SCALE[A.WATTAGE],
            num[..., 1] * SCALE[A.WEIGHT_LBS],
            num[..., 2] * SCALE[A.SCREEN_SIZE_INCHES],
        ],
        axis=-1,
    )


def attr_column(catalog: Catalog, idx: jax.Array, k: int) -> jax.Array:
    """float32 [...]: attribute k (Attr order: ``disc_values`` then ``num_values_scaled``)
    of products idx alone, gathering one column instead of every attribute's."""
    if k < C.N_DISC_FILTERS:
        col = (catalog.category, catalog.brand, catalog.store)[k][idx] if k < 3 else None
        col = catalog.disc[idx, k - 3] if col is None else col
        return col.astype(jnp.int32).astype(jnp.float32)
    a = NUMERIC_ATTR_ORDER[k - C.N_DISC_FILTERS]
    direct = {
        A.PRICE: catalog.price_cents,
        A.RATING: catalog.rating_x100,
        A.RATING_COUNT: catalog.rating_count,
        A.SHIP_DAYS: catalog.ship_days,
    }
    if a in direct:
        return direct[a][idx].astype(jnp.float32)
    j = (A.WATTAGE, A.WEIGHT_LBS, A.SCREEN_SIZE_INCHES).index(a)
    return catalog.num[idx, j].astype(jnp.float32) * SCALE[a]


def num_slot(attr: C.Attr) -> int:
    return NUMERIC_ATTR_ORDER.index(attr)


NUM_FILTER_SLOT = jnp.array([num_slot(a) for _, a, _ in C.NUMERIC_FILTERS], jnp.int32)
NUM_FILTER_DIR = jnp.array([s for _, _, s in C.NUMERIC_FILTERS], jnp.float32)
NUM_FILTER_SCALE = jnp.array([SCALE[a] for _, a, _ in C.NUMERIC_FILTERS], jnp.float32)


def filters_pass(
    disc: jax.Array, num_scaled: jax.Array, filter_disc: jax.Array, filter_num: jax.Array
) -> jax.Array:
    """bool [...]: every set filter holds. A filter on a missing attribute excludes.

    disc [..., N_DISC_FILTERS], num_scaled [..., 7]; filter_disc [N_DISC_FILTERS] with -1
    for no filter (codes <= -2 name unknown values and match nothing); filter_num
    [N_NUM_FILTERS] with NaN for no filter.
    """
    disc_ok = jnp.where(filter_disc == -1, True, (disc == filter_disc) & (disc >= 0))
    vals = num_scaled[..., NUM_FILTER_SLOT]
    bound = filter_num * NUM_FILTER_SCALE
    ge = vals >= bound - TOL
    le = vals <= bound + TOL
    num_ok = jnp.where(NUM_FILTER_DIR > 0, ge, le) & ~jnp.isnan(vals)
    num_ok = jnp.where(jnp.isnan(filter_num), True, num_ok)
    return disc_ok.all(-1) & num_ok.all(-1)
