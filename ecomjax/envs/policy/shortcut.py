"""The POLICY "top rule of the top topic" shortcut of SPEC §13.6b, as an array agent.

It reads the stated topic (a critical slot, so always in the opening INFORM; it is also the
topic ``policy_search`` ranks first for the topic's question) and answers at once with the
value of that topic's rank-1 rule, without evaluating any rule on the context. For the
``sum`` topic (``shipping_surcharge``) that is rule 025's 29.99. It stands for a policy
that learnt "the first rule listed is the answer" instead of reading the decision list;
§9.5's rank spread keeps it at or below 45 % IsCorrect at every d ≥ 2.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax import policy_rules as P
from ecomjax.agents.exploits import topic_table_agent

# float32 [N_TOPICS]: each topic's rank-1 rule value (categorical answers as codes).
TOP_RULE_VALUE: np.ndarray = P.TABLES.rule_value[P.TABLES.topic_rules[:, 0]]


def top_rule_value(topic: jax.Array) -> jax.Array:
    """The shortcut's answer for a topic index (0 where the topic is unknown, < 0)."""
    value = jnp.asarray(TOP_RULE_VALUE)[jnp.clip(topic, 0, P.N_TOPICS - 1)]
    return jnp.where(topic >= 0, value, 0.0)


policy_top_rule_agent = topic_table_agent("policy_top_rule", TOP_RULE_VALUE)
