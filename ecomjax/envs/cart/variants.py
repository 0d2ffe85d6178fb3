"""Keyed variant synthesis for CART targets (SPEC §8.3): three variants over one attribute,
exactly one of which satisfies the requirement, uniformly any of the three (v1.1)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog
from ecomjax.catalog.vocabulary import VARIANT_POOL_MAX, VARIANT_POOL_TEXT, VOCAB

A = C.Attr
# Candidate attributes in the fallback order of §8.3.
CANDIDATES: tuple[C.Attr, ...] = (
    A.COLOR,
    A.SIZE,
    A.MATERIAL,
    A.CONNECTOR_TYPE,
    A.WATTAGE,
    A.ITEM_FORM,
    A.FINISH_TYPE,
    A.SKIN_TYPE,
)
_LIGHT = (A.COLOR, A.SIZE, A.MATERIAL)  # weight 1.0 when present, else 3.0
_ADDED = (A.COLOR, A.SIZE)  # weight 0.5 when the product lacks them


def _pool_value(attr: C.Attr, v) -> float:
    return float(v) if attr in C.NUM_ATTRS else float(VOCAB[attr].index(v))


POOL = np.zeros((len(CANDIDATES), VARIANT_POOL_MAX), np.float32)
POOL_LEN = np.zeros(len(CANDIDATES), np.int32)
for _i, _a in enumerate(CANDIDATES):
    _vals = [_pool_value(_a, v) for v in VARIANT_POOL_TEXT[_a]]
    POOL[_i, : len(_vals)] = _vals
    POOL_LEN[_i] = len(_vals)
CAND_ATTR = np.array([int(a) for a in CANDIDATES], np.int32)


def own_values(catalog: Catalog, pid: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(has [len(CANDIDATES)], value [len(CANDIDATES)]) of one product."""
    has, val = [], []
    for a in CANDIDATES:
        if a in C.NUM_ATTRS:
            v = catalog.num[pid, C.NUM_ATTRS.index(a)].astype(jnp.float32)
            has.append(~jnp.isnan(v))
            val.append(jnp.nan_to_num(v))
        else:
            v = catalog.disc[pid, C.DISC_ATTRS.index(a)].astype(jnp.int32)
            has.append(v >= 0)
            val.append(v.astype(jnp.float32))
    return jnp.stack(has), jnp.stack(val)


def synthesize(key: jax.Array, catalog: Catalog, pid: jax.Array):
    """(attr, values [3], target index) for one target product.

    The three values are the product's own value (a keyed pool value when it lacks the
    attribute) and two distractors. The target is one of the three by a keyed uniform draw
    (SPEC §8.3, v1.1): the card shows the base product's value, so only the customer can
    tell which variant is wanted.
    """
    has, own = own_values(catalog, pid)
    light = jnp.array([a in _LIGHT for a in CANDIDATES])
    added = jnp.array([a in _ADDED for a in CANDIDATES])
    weight = jnp.where(has, jnp.where(light, 1.0, 3.0), jnp.where(added, 0.5, 0.0))
    k_attr, k_val, k_dist, k_shuf = jax.random.split(key, 4)
    # A folded key of its own, so the attribute, values and order draws stay as in v1.
    k_tgt = jax.random.fold_in(key, 4)
    ci = jax.random.categorical(k_attr, jnp.log(weight))
    pool = jnp.asarray(POOL)[ci]
    n_pool = jnp.asarray(POOL_LEN)[ci]
    drawn = pool[jax.random.randint(k_val, (), 0, n_pool)]
    base = jnp.where(has[ci], own[ci], drawn)
    slots = jnp.arange(VARIANT_POOL_MAX)
    others = (slots < n_pool) & (jnp.abs(pool - base) > 1e-6)
    prio = jnp.where(others, jax.random.uniform(k_dist, (VARIANT_POOL_MAX,)), -1.0)
    distractors = pool[jax.lax.top_k(prio, 2)[1]]
    values = jnp.concatenate([base[None], distractors])
    wanted = jax.random.randint(k_tgt, (), 0, 3)  # index into [own, distractor, distractor]
    perm = jax.random.permutation(k_shuf, 3)  # shown position j holds values[perm[j]]
    return jnp.asarray(CAND_ATTR)[ci], values[perm], jnp.argmax(perm == wanted).astype(jnp.int32)
