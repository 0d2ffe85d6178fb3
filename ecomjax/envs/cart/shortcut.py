"""The CART shortcut of SPEC §13 invariant 6b: "pick the card's own attribute value as
the variant".

It plays the oracle's plan (``oracle.py``) except that it never asks for the variant: for
every item whose variant the customer did not state, it lists the variants and adds the one
whose value equals the attribute value on the product's card (in stock for the quantity),
or no variant when none matches. Since v1.1 the wanted variant is uniform over the three,
so on an item whose variant is pending this guess is right about a third of the time.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax.agents.base import Agent
from ecomjax.catalog.types import Catalog
from ecomjax.envs.cart import oracle
from ecomjax.envs.cart.variants import CAND_ATTR, own_values
from ecomjax.types import ToolResults
from ecomjax.world import safe


def card_match(
    mem: oracle.CartMemory, res: ToolResults, pid: jax.Array, catalog: Catalog
) -> jax.Array:
    """bool [B, MI, V]: the stated variant where one was stated, else the variant that
    carries the card's own value of the listed attribute and has stock for the quantity."""
    stated = oracle.stated_match(mem, res, pid, catalog)
    has, own = jax.vmap(lambda p: own_values(catalog, safe(p)))(pid)  # [MI, NC]
    col = jnp.asarray(CAND_ATTR)[None, None, :] == res.var_attr[:, :, None]  # [B, V, NC]
    ci = jnp.argmax(col, -1)  # [B, V]
    card_has = jnp.moveaxis(has[:, ci], 0, 1) & col.any(-1)[:, None, :]  # [B, MI, V]
    card_val = jnp.moveaxis(own[:, ci], 0, 1)
    same = card_has & (jnp.abs(res.var_value[:, None, :] - card_val) < 1e-6)
    v = res.var_attr.shape[1]
    in_stock = res.qty[:, None, :v] >= mem.qty[None, :, None]
    return jnp.where(mem.var_attr[None, :, None] >= 0, stated, same & in_stock)


def _init(key, obs, catalog) -> oracle.CartMemory:
    del key, obs, catalog
    return oracle.init_memory()


def _act(key, mem, obs, catalog):
    del key
    return oracle.act(mem, obs, catalog, ask_variant=False, match=card_match)


own_variant_agent = Agent("cart_own_variant", _init, _act)
