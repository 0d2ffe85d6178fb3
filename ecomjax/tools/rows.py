"""One call slot's result row, before assembly into ToolResults (types.ToolResults)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from ecomjax import constants as C
from ecomjax.types import N_INFO, SMALL_ROWS

I32 = jnp.int32
V = C.MAX_VARIANTS
MO = C.MAX_ORDERS


@struct.dataclass
class Row:
    error: jax.Array
    count: jax.Array
    total: jax.Array
    ids: jax.Array  # [SMALL_ROWS]
    var: jax.Array
    qty: jax.Array
    aux: jax.Array
    var_attr: jax.Array  # [V]
    var_value: jax.Array
    ord_status: jax.Array  # [MO]
    ord_date: jax.Array
    ord_aux: jax.Array
    ord_track: jax.Array
    info: jax.Array  # float32 [N_INFO]


def _row(
    error=0,
    count=0,
    total=0,
    ids=None,
    var=None,
    qty=None,
    aux=None,
    var_attr=None,
    var_value=None,
    ord_status=None,
    ord_date=None,
    ord_aux=None,
    ord_track=None,
    info=None,
) -> Row:
    def pad(x, fill, n=SMALL_ROWS, dtype=I32):
        if x is None:
            return jnp.full(n, fill, dtype)
        x = jnp.asarray(x, dtype)
        return jnp.concatenate([x, jnp.full(n - x.shape[0], fill, dtype)])

    return Row(
        error=jnp.asarray(error, I32),
        count=jnp.asarray(count, I32),
        total=jnp.asarray(total, I32),
        ids=pad(ids, -1),
        var=pad(var, -1),
        qty=pad(qty, 0),
        aux=pad(aux, 0),
        var_attr=pad(var_attr, -1, V),
        var_value=pad(var_value, 0.0, V, jnp.float32),
        ord_status=pad(ord_status, -1, MO),
        ord_date=pad(ord_date, -1, MO),
        ord_aux=pad(ord_aux, -1, MO),
        ord_track=pad(ord_track, -1, MO),
        info=pad(info, 0.0, N_INFO, jnp.float32),
    )
