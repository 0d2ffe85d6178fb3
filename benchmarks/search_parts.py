"""Where one catalog search spends its time: the parts of ``tools.search.resolve_slot``
jitted alone on one chunk of a family's real first searches (the oracle's, at reset),
vmapped as ``resolve_batch`` runs them, medians of ``--repeats`` calls after a warm-up.

    python benchmarks/search_parts.py --family SUB

Parts: the whole slot; the ranking (scores + exact top-R); the scores alone and their
pieces (the embedding dot, the filters, stock and forced-out); the exact top-R set
(``_select_exact``) and its ordering (``_merge``'s two-key sort); everything after the
ranking (``finish_slot``) and its pieces (the distractor mix, the shown scores, the cards'
stock). The parts fuse differently inside the whole, so they need not add up to it.
Rows (microseconds a search) go to ``results/search_parts.jsonl``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax import exposure as X
from ecomjax.agents.base import batch_act
from ecomjax.agents.oracle import make_oracle
from ecomjax.catalog.synthetic import generate_catalog
from ecomjax.core import reset
from ecomjax.kernels.topk import _merge, _select_exact
from ecomjax.predicates import disc_values, filters_pass, num_values_scaled
from ecomjax.registry import family
from ecomjax.tools import search as S
from ecomjax.types import EnvParams
from ecomjax.world import product_stock_qty, safe

sys.path.insert(0, str(Path(__file__).parent))
from rows_io import add_row_args, append_rows  # noqa: E402
from throughput import env_info, episode_inputs  # noqa: E402
from timing import compiled, median_s  # noqa: E402

OUT = Path(__file__).parent / "results" / "search_parts.jsonl"


def first_searches(name: str, catalog, params: EnvParams, batch: int, chunk: int):
    """(states, actions, slots) of ``chunk`` search calls from the oracle's first turn."""
    fam = family(name)
    keys, d = episode_inputs(batch, 1)
    gen = jax.jit(lambda k, dd: jax.vmap(fam.generate, (0, None, 0, None))(k, catalog, dd, params))
    start = jax.jit(lambda k, p: jax.vmap(reset, (0, None, 0, None))(k, catalog, p, params))
    states, ts = start(keys, gen(keys, d))
    agent = make_oracle((fam.env,))
    memory = jax.jit(jax.vmap(agent.init, (0, 0, None)))(keys, ts.observation, catalog)
    _, actions = jax.jit(lambda k, m, o: batch_act(agent)(k, m, o, catalog))(
        keys, memory, ts.observation
    )
    flat = np.flatnonzero(np.asarray(actions.tool == C.Tool.CATALOG_SEARCH).reshape(-1))
    if flat.size < chunk:
        raise SystemExit(f"{name}: {flat.size} searches on the first turn, need {chunk}")
    flat = flat[:chunk]
    ep = jnp.asarray(flat // C.MAX_TOOL_CALLS)
    pick = lambda tree: jax.tree_util.tree_map(lambda x: x[ep], tree)  # noqa: E731
    return pick(states), pick(actions), jnp.asarray(flat % C.MAX_TOOL_CALLS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--family", default="SUB")
    ap.add_argument("--batch", type=int, default=1024, help="episodes reset to find searches")
    add_row_args(ap, OUT, repeats=20, label="")
    args = ap.parse_args(argv)
    catalog = generate_catalog(42, args.catalog_size)
    params = EnvParams()
    chunk = params.search_batch
    st, ac, slot = first_searches(args.family.upper(), catalog, params, args.batch, chunk)
    by_cat = bool(S.category_filtered(catalog, ac)[jnp.arange(chunk), slot].any())
    if by_cat:
        raise SystemExit("category-filtered searches take the category scan; pick another family")
    rows_idx = jnp.arange(catalog.n_products, dtype=jnp.int32)

    def per_query(fn):
        """fn(query) of each search call, vmapped over the chunk."""

        def one(s, a, sl):
            return fn(S.search_query(catalog, s, a, sl))

        return jax.vmap(one)

    ranked = jax.jit(jax.vmap(lambda s, a, sl: S._ranked_candidates(catalog, s, a, sl, params)))
    ids, n_valid, _, _ = ranked(st, ac, slot)
    scores = jax.jit(per_query(lambda q: S.query_scores(catalog, q, catalog.emb, rows_idx)[0]))(
        st, ac, slot
    )
    positions = jnp.broadcast_to(rows_idx, scores.shape)
    top = jax.jit(lambda s: _select_exact(s, positions, S.R))(scores)

    def mix(s, a, sl, i, n):
        n_shown, n_dist = S.search_counts(D.difficulty(s.problem.d, params.overrides), a.qty[sl])
        n_true = jnp.minimum(n, n_shown - n_dist)
        return S._mix_distractors(s.key, catalog, i, n_true, n_dist, S.max_distractors(params))

    mixed = jax.jit(jax.vmap(mix))(st, ac, slot, ids, n_valid)

    def shown(s, a, sl, m):
        qvec, mode = S._query(catalog, a, sl)
        return S.shown_score(catalog, qvec, safe(m), mode)

    def in_stock(q):
        ok = (catalog.stock > 0) & ~X.is_oos(q.overlay, rows_idx)
        return ok & ~(rows_idx[:, None] == q.exhausted).any(-1)

    def filters(q):
        disc, num = disc_values(catalog, rows_idx), num_values_scaled(catalog, rows_idx)
        return filters_pass(disc, num, q.fd, q.fn)

    parts = {
        "whole_slot": (jax.vmap(lambda s, a, sl: S.resolve_slot(catalog, s, a, sl, params)), (st, ac, slot)),  # noqa: E501
        "ranking": (ranked, (st, ac, slot)),
        "scores": (per_query(lambda q: S.query_scores(catalog, q, catalog.emb, rows_idx)), (st, ac, slot)),  # noqa: E501
        "scores_dot": (per_query(lambda q: catalog.emb @ q.qvec), (st, ac, slot)),
        "scores_filters": (per_query(filters), (st, ac, slot)),
        "scores_stock_oos": (per_query(in_stock), (st, ac, slot)),
        "top_set": (lambda s: _select_exact(s, positions, S.R), (scores,)),
        "top_order": (lambda s, i: _merge(s[:, :0], i[:, :0], s, i, S.R), top),
        "finish": (jax.vmap(lambda s, a, sl, i, n: S.finish_slot(catalog, s, a, sl, params, i, n)), (st, ac, slot, ids, n_valid)),  # noqa: E501
        "finish_mix": (jax.vmap(mix), (st, ac, slot, ids, n_valid)),
        "finish_shown_scores": (jax.vmap(shown), (st, ac, slot, mixed)),
        "finish_stock": (jax.vmap(lambda s, m: product_stock_qty(catalog, s.problem, s.world, safe(m))), (st, mixed)),  # noqa: E501
    }  # fmt: skip
    info = env_info()
    rows = []
    for name, (fn, fargs) in parts.items():
        program, _ = compiled(fn, *fargs)
        sec, _ = median_s(program, lambda _, a=fargs: a, args.repeats)
        us = sec / chunk * 1e6
        print(f"{args.family} {name:20s} {us:7.1f} us a search", flush=True)
        rows.append(
            info | {"kind": "search_parts", "label": args.label, "family": args.family.upper(),
                    "catalog_size": args.catalog_size, "searches": chunk, "part": name,
                    "us_per_search": us, "repeats": args.repeats}
        )  # fmt: skip
    append_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
