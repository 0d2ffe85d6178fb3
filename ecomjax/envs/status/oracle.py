"""The STATUS oracle plan of SPEC §8.9 as an array policy: order_list(365) · answer.

The order reference is critical, so the opening states it: an order index (direct) or the
identifying description of one of the order's lines (indirect), which the plan resolves
against the order_list rows. The status is read from the listed order's row.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog
from ecomjax.order_history import match_line
from ecomjax.types import Action, Observation, empty_action

T = C.Tool
S = C.Slot
I32 = jnp.int32
HISTORY_DAYS = 365


@struct.dataclass
class StatusMemory:
    has_ref: jax.Array  # bool, the order reference was stated
    ref_value: jax.Array  # int32, order index (direct) or -1 (indirect)
    ref_form: jax.Array  # int32
    ref_key: jax.Array  # int32
    listed: jax.Array  # bool
    order: jax.Array  # int32, -1 unknown
    status: jax.Array  # int32, -1 unknown


def init_memory() -> StatusMemory:
    return StatusMemory(
        has_ref=jnp.bool_(False),
        ref_value=I32(-1),
        ref_form=I32(0),
        ref_key=I32(-1),
        listed=jnp.bool_(False),
        order=I32(-1),
        status=I32(-1),
    )


def act(
    mem: StatusMemory, obs: Observation, catalog: Catalog, sub: jax.Array | int = 0
) -> tuple[StatusMemory, Action]:
    sub = jnp.asarray(sub, I32)
    r = obs.reply
    said = r.slot_stated[sub, S.ORDER_REFERENCE]
    ref = said & (r.ref_form[sub] > 0)
    mem = mem.replace(
        has_ref=mem.has_ref | said,
        ref_value=jnp.where(said, r.slot_value[sub, S.ORDER_REFERENCE].astype(I32), mem.ref_value),
        ref_form=jnp.where(ref, r.ref_form[sub], mem.ref_form),
        ref_key=jnp.where(ref, r.ref_key[sub], mem.ref_key),
    )
    res = obs.results
    is_list = (res.tool == T.ORDER_LIST) & (res.error == 0)
    listed = is_list.any()
    slot = jnp.argmax(is_list)
    found, by_desc, _, _ = match_line(catalog, obs, mem.ref_form, mem.ref_key)
    order = jnp.where(mem.ref_value >= 0, mem.ref_value, jnp.where(found, by_desc, -1))
    status = res.ord_status[slot, jnp.clip(order, 0, C.MAX_ORDERS - 1)]
    mem = mem.replace(
        listed=mem.listed | listed,
        order=jnp.where(listed & (order >= 0), order, mem.order),
        status=jnp.where(listed & (order >= 0), status, mem.status),
    )
    ready = mem.listed & (mem.order >= 0) & (mem.status >= 0)
    action = empty_action(catalog.embed_dim)
    first = jnp.arange(C.MAX_TOOL_CALLS) == 0
    tool = jnp.where(first & ~ready, T.ORDER_LIST, T.NONE).astype(I32)
    answer = action.answer.replace(
        present=ready,
        done=jnp.bool_(True),
        main=action.answer.main.replace(
            env=jnp.int32(C.Env.STATUS), order=mem.order, status=mem.status
        ),
    )
    action = action.replace(
        has_message=jnp.bool_(True),
        tool=tool,
        qty=jnp.where(tool == T.ORDER_LIST, HISTORY_DAYS, 1).astype(I32),
        answer=answer,
    )
    return mem, action
