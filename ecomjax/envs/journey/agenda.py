"""The JOURNEY agenda (SPEC §8.8): which sub-goal the customer talks about next.

After each turn the first matching rule applies: (1) nothing introduced is open → SWITCH
to the next sub-goal, or DONE when none is left; (2) the active sub-goal was addressed this
turn and an older one is open → SWITCH back to the oldest open one; (3) with probability
p_switch(d) (stream SWITCH, keyed by turn), if the active sub-goal was never interrupted,
one is still to be introduced and the agent worked this turn (a tool call or an answer)
→ SWITCH to it mid-task.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax.sampling import stream
from ecomjax.types import Action, Dialogue, EnvParams, Problem


@struct.dataclass
class Agenda:
    switch: jax.Array  # bool
    intro: jax.Array  # bool: the SWITCH introduces a sub-goal (else it resumes one)
    target: jax.Array  # int32: the sub-goal switched to
    done: jax.Array  # bool: every sub-goal addressed
    introduced: jax.Array  # bool [MAX_SUBGOALS]
    addressed: jax.Array  # bool [MAX_SUBGOALS]
    interrupted: jax.Array  # bool [MAX_SUBGOALS]
    active: jax.Array  # int32


def agenda(
    problem: Problem, dlg: Dialogue, action: Action, key: jax.Array, params: EnvParams
) -> Agenda:
    live = problem.sub_env >= 0
    ans = action.answer
    addressed_now = ans.present & (ans.sub.env != -1) & live & dlg.introduced
    addressed = dlg.addressed | addressed_now
    open_ = dlg.introduced & ~addressed & live
    fresh = live & ~dlg.introduced
    has_new = fresh.any()
    next_new = jnp.argmax(fresh).astype(jnp.int32)
    oldest_open = jnp.argmax(open_).astype(jnp.int32)
    active = dlg.active

    rule1 = ~open_.any()
    rule2 = ~rule1 & addressed_now[active]
    p_switch = D.difficulty(problem.d, params.overrides).p_switch
    u = jax.random.uniform(stream(key, "SWITCH", dlg.turn))
    # "Mid-task" means the agent is working: a turn with no tool call and no answer (a
    # silent turn) is never interrupted, so a silent agent meets SPEC §13.5 exactly.
    working = (action.tool != 0).any() | ans.present
    rule3 = ~rule1 & ~rule2 & (u < p_switch) & ~dlg.interrupted[active] & has_new & open_[active]
    rule3 = rule3 & working

    switch = (rule1 & has_new) | rule2 | rule3
    intro = (rule1 & has_new) | rule3
    target = jnp.where(rule2, oldest_open, next_new)
    introduced = dlg.introduced | ((jnp.arange(C.MAX_SUBGOALS) == target) & intro)
    interrupted = dlg.interrupted.at[active].set(dlg.interrupted[active] | rule3)
    return Agenda(
        switch=switch,
        intro=intro,
        target=target,
        done=rule1 & ~has_new,
        introduced=introduced,
        addressed=addressed,
        interrupted=interrupted,
        active=jnp.where(switch, target, active).astype(jnp.int32),
    )
