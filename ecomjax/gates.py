"""Batch-level gates: which parts of a turn any live episode of a batch needs.

A batched driver computes them once per turn over the whole batch and passes them into
the vmapped ``step`` unbatched, so each gate is a real ``lax.cond`` there: work no episode
needs this turn is skipped instead of computed for every episode and discarded. Every
gated branch would have been a no-op for the episodes that skip it, so results are the
same with or without gates (``tests/test_step_batch.py`` checks this bit for bit).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from ecomjax import constants as C
from ecomjax.tools.execute import slot_tools
from ecomjax.types import Action, Answer


@struct.dataclass
class TurnGates:
    calls: jax.Array  # bool [MAX_TOOL_CALLS, N_TOOLS]: tools some episode calls per slot
    main_ids: jax.Array  # bool: some answer recommends an id in its main entry
    sub_ids: jax.Array  # bool: some answer recommends an id in a JOURNEY sub-goal entry


def _has_sub_ids(answer: Answer) -> jax.Array:
    """bool [B]: the answer has an id in a non-null sub-goal entry."""
    return ((answer.sub.env != -1)[..., None] & (answer.sub.rec != -1)).any((-2, -1))


def turn_gates(actions: Action, live: jax.Array) -> TurnGates:
    """The gates of a batch's turn: ``actions`` batched [B, ...], ``live`` bool [B]."""
    ans = actions.answer
    answering = live & ans.present
    return TurnGates(
        calls=slot_tools(jnp.where(live[:, None], actions.tool, C.Tool.NONE)),
        main_ids=(answering & (ans.main.rec != -1).any(-1)).any(),
        sub_ids=(answering & _has_sub_ids(ans)).any(),
    )
