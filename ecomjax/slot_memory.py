"""What an array policy remembers of the customer's stated slots, and the one rule that
folds a reply into it (``listen``).

The oracle plans (``ecomjax.envs.<family>.oracle``) read the customer only through
``obs.reply``: every INFORM / CLARIFY states some slots of one sub-goal, and an identifying
description (``ref_form``, ``ref_key``) when the sub-goal names a product. A plan keeps the
latest stated value of each slot for its own sub-goal ``sub`` (0 outside JOURNEY).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from ecomjax import constants as C
from ecomjax.types import Observation


@struct.dataclass
class SlotMemory:
    """What the customer has said about one sub-goal's slots."""

    known: jax.Array  # bool [N_SLOTS]
    value: jax.Array  # float32 [N_SLOTS]
    op: jax.Array  # int32 [N_SLOTS]
    ref_form: jax.Array  # int32, the named product's description form (0 none)
    ref_key: jax.Array  # int32


def empty_slots() -> SlotMemory:
    return SlotMemory(
        known=jnp.zeros(C.N_SLOTS, bool),
        value=jnp.zeros(C.N_SLOTS, jnp.float32),
        op=jnp.zeros(C.N_SLOTS, jnp.int32),
        ref_form=jnp.int32(0),
        ref_key=jnp.int32(-1),
    )


def listen(mem: SlotMemory, obs: Observation, sub: jax.Array) -> SlotMemory:
    """Folds the reply's stated slot values (INFORM, CLARIFY) of sub-goal ``sub`` in."""
    r = obs.reply
    said = r.slot_stated[sub]
    ref = r.ref_form[sub] > 0
    return mem.replace(
        known=mem.known | said,
        value=jnp.where(said, r.slot_value[sub], mem.value),
        op=jnp.where(said, r.slot_op[sub], mem.op),
        ref_form=jnp.where(ref, r.ref_form[sub], mem.ref_form),
        ref_key=jnp.where(ref, r.ref_key[sub], mem.ref_key),
    )
