"""The POLICY oracle plan of SPEC §8.9 as an array policy.

ask_user(topic + every policy field) · policy_search(the topic's question) · evaluate the
returned topic's decision list on the stated context · answer. The first two merge into
one turn when B_tool ≥ 2. It reads only the customer's acts (stated slot values) and the
search rows; the decision lists are the public rule base the search returns.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from ecomjax import constants as C
from ecomjax import policy_rules as P
from ecomjax.catalog.types import Catalog
from ecomjax.envs.policy import generator
from ecomjax.family import slot_mask
from ecomjax.slot_memory import SlotMemory, empty_slots, listen
from ecomjax.types import Action, Observation, empty_action

T = C.Tool
S = C.Slot
TOP_K = 3
ASK_SLOTS = slot_mask(generator.SLOTS)  # the topic and every policy field


@struct.dataclass
class PolicyMemory:
    slots: SlotMemory  # slot values stated so far (POLICY reads known and value)
    asked: jax.Array  # bool
    searched: jax.Array  # bool: a policy_search went out
    found: jax.Array  # int32: the returned topic matching the stated one, -1 until then


def init_memory() -> PolicyMemory:
    return PolicyMemory(
        slots=empty_slots(),
        asked=jnp.bool_(False),
        searched=jnp.bool_(False),
        found=jnp.int32(-1),
    )


def _read_results(mem: PolicyMemory, obs: Observation) -> PolicyMemory:
    res = obs.results
    topic = mem.slots.value[S.TOPIC].astype(jnp.int32)
    rows = (res.tool == T.POLICY_SEARCH)[:, None] & (res.ids == topic) & mem.slots.known[S.TOPIC]
    hit = rows.any()
    return mem.replace(found=jnp.where(hit, res.ids.reshape(-1)[jnp.argmax(rows)], mem.found))


def act(
    mem: PolicyMemory, obs: Observation, catalog: Catalog, sub: jax.Array | int = 0
) -> tuple[PolicyMemory, Action]:
    sub = jnp.asarray(sub, jnp.int32)
    mem = _read_results(mem.replace(slots=listen(mem.slots, obs, sub)), obs)
    budget = obs.tool_budget
    slots = mem.slots
    topic = jnp.clip(slots.value[S.TOPIC].astype(jnp.int32), 0, P.N_TOPICS - 1)
    ready = mem.asked & (mem.found >= 0)
    # Searches go out until the topic comes back (it always does: its question's tokens
    # all lie in its own text, so it scores 1 and ranks first).
    want_search = slots.known[S.TOPIC] & (mem.found < 0) & ~ready
    want_ask = ~mem.asked
    tools = jnp.array([T.ASK_USER, T.POLICY_SEARCH])
    use = jnp.stack([want_ask, want_search & ~(want_ask & (budget < 2))])
    use &= jnp.cumsum(use) <= budget
    order = jnp.argsort(~use, stable=True)
    tools, use = tools[order], use[order]
    action = empty_action(catalog.embed_dim)
    b = C.MAX_TOOL_CALLS
    tool = jnp.full(b, T.NONE, jnp.int32).at[:2].set(jnp.where(use, tools, T.NONE))
    is_ask = tool == T.ASK_USER
    is_search = tool == T.POLICY_SEARCH
    ask_mask = jnp.asarray(ASK_SLOTS)
    q = jnp.asarray(P.QUESTION_TOKENS)[topic]
    ctx = slots.value[jnp.asarray(P.FIELD_SLOT)]
    value = P.evaluate(jnp.maximum(mem.found, 0), ctx)
    answer = action.answer.replace(
        present=ready,
        done=jnp.bool_(True),
        main=action.answer.main.replace(
            env=jnp.int32(C.Env.POLICY), policy_value=value, policy_ok=jnp.bool_(True)
        ),
    )
    action = action.replace(
        has_message=jnp.bool_(True),
        tool=tool,
        qty=jnp.where(is_search, TOP_K, action.qty),
        enum_b=jnp.full(b, -1, jnp.int32),
        has_query=is_search,
        query_tokens=jnp.where(is_search[:, None], q[None, :], -1),
        slots=is_ask[:, None] & ask_mask[None, :],
        answer=answer,
    )
    mem = mem.replace(asked=mem.asked | is_ask.any(), searched=mem.searched | is_search.any())
    return mem, action
