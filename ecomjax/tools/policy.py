"""policy_search (SPEC §9.4): the top_k topics whose text best covers the query tokens.

The query arrives as ``action.query_tokens[i]``: policy-vocabulary ids (``-1`` pads, ``-2``
is a word outside the vocabulary, which still counts in |Q|). Tokens are deduplicated to a
set on device (the host's ``tokenize_query`` already sends each unknown word once, so each
``-2`` is one distinct word). score = |Q ∩ W_topic| / |Q|; topics with score > 0 come back
best first, at most top_k = ``action.qty[i]`` of them, ties to the earlier topic.

Row layout: ``ids`` = topic indices (into ``ecomjax.policy_rules.TOPICS``) best first,
``count`` = topics returned, ``total`` = topics with score > 0, ``qty`` = round(score·1e4)
per row, ``aux`` = |Q ∩ W_topic| per row, ``info[0]`` = |Q|. Each topic's full decision
list is public data (``policy_rules.topic_record``), so a row's topic index is the result.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax import policy_rules as P
from ecomjax.tools.rows import Row, _row
from ecomjax.types import Action

tokenize_query = P.tokenize_query
MAX_TOP_K = 10


def search_scores(query: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(|Q ∩ W_topic| [N_TOPICS] int32, |Q| int32) for one query's token ids."""
    q = query.astype(jnp.int32)
    known = (q >= 0) & (q < P.N_QUESTION_WORDS)
    pos = jnp.arange(q.shape[0])
    dup = ((q[None, :] == q[:, None]) & (pos[None, :] < pos[:, None])).any(-1)
    first_known = known & ~dup
    n_q = first_known.sum() + (q == P.OOV).sum()
    hits = jnp.asarray(P.W_TOPIC)[:, jnp.clip(q, 0, P.N_QUESTION_WORDS - 1)] & first_known[None, :]
    return hits.sum(-1).astype(jnp.int32), n_q.astype(jnp.int32)


def policy_search(query: jax.Array, top_k: jax.Array):
    """(topic ids [MAX_TOP_K] -1 padded, score x1e4 [MAX_TOP_K], inter [MAX_TOP_K], count,
    total, |Q|)."""
    inter, n_q = search_scores(query)
    # Ties go to the earlier topic. The keys are distinct (score, then reversed index), so
    # top_k has no tie to break: its own tie order is not promised by every lowering.
    n = inter.shape[0]
    rank_key = inter * n + (n - 1 - jnp.arange(n, dtype=jnp.int32))
    top, _ = jax.lax.top_k(rank_key, MAX_TOP_K)
    hit, best = top // n, n - 1 - top % n
    k = jnp.clip(top_k, 1, MAX_TOP_K)
    live = (hit > 0) & (jnp.arange(MAX_TOP_K) < k)
    score = jnp.where(live, jnp.round(hit * 1e4 / jnp.maximum(n_q, 1)), 0).astype(jnp.int32)
    ids = jnp.where(live, best, -1).astype(jnp.int32)
    return ids, score, jnp.where(live, hit, 0), live.sum(), (inter > 0).sum(), n_q


def policy_search_row(action: Action, i: jax.Array) -> Row:
    ids, score, inter, count, total, n_q = policy_search(action.query_tokens[i], action.qty[i])
    return _row(0, count, total, ids, None, score, inter, info=n_q.astype(jnp.float32)[None])
