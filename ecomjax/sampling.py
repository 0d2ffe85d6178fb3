"""Keyed draws shared by the generators (SPEC §12): the episode key folded by a stream
tag, then by the listed indices. Rejection sampling keeps memory O(tries), not O(N)."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax.bits import below_wide
from ecomjax.catalog.types import Catalog
from ecomjax.compact import compact
from ecomjax.types import EnvParams, Problem, empty_problem

TRIES = 64
CHUNK = 8
N_TODAY = 365


def stream(key: jax.Array, name: str, *indices) -> jax.Array:
    key = jax.random.fold_in(key, C.STREAM[name])
    for i in indices:
        key = jax.random.fold_in(key, i)
    return key


def first_try(
    key: jax.Array,
    draw: Callable[[jax.Array], object],
    ok: Callable[[object], jax.Array],
    tries: int = TRIES,
    chunk: int = CHUNK,
    empty: jax.Array | bool = False,
) -> tuple[jax.Array, object]:
    """(found, value): the first of up to ``tries`` i.i.d. keyed tries that passes ``ok``,
    else the first try. ``draw(k)`` makes ``chunk`` tries (a pytree with a leading
    [chunk] axis) from chunk c's key ``fold_in(key, c)``.

    Tries come a chunk at a time until one passes: most draws pass in their first chunk,
    so hashing and testing every try up front (64 ``randint`` values: 2 words and a key
    split each) spent most of the history-building generators' time. Under ``vmap`` the
    loop runs to the slowest lane's chunk; a lane that is done keeps its answer. A lane
    known to have no valid try (``empty``) draws nothing (zeros), so it cannot hold the
    batch's loop for every chunk."""
    chunk = min(chunk, tries)
    n_chunks = -(-tries // chunk)
    shapes = jax.eval_shape(draw, key)
    value = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape[1:], s.dtype), shapes)

    def more(carry):
        c, found, _ = carry
        return ~found & (c < n_chunks)

    def next_chunk(carry):
        c, _, value = carry
        cand = draw(jax.random.fold_in(key, c))
        good = jax.vmap(ok)(cand) & (c * chunk + jnp.arange(chunk) < tries)
        pick = jnp.where(good.any(), jnp.argmax(good), 0)
        keep = ~good.any() & (c > 0)  # no pass: the first try stays
        new = jax.tree_util.tree_map(lambda x, v: jnp.where(keep, v, x[pick]), cand, value)
        return c + 1, good.any(), new

    start = jnp.where(empty, n_chunks, 0).astype(jnp.int32)
    _, found, value = jax.lax.while_loop(more, next_chunk, (start, jnp.bool_(False), value))
    return found, value


def first_valid(
    key: jax.Array,
    lo: jax.Array,
    hi: jax.Array,
    ok: Callable[[jax.Array], jax.Array],
    tries: int = TRIES,
    chunk: int = CHUNK,
) -> jax.Array:
    """A keyed uniform draw from positions [lo, hi) that satisfy ``ok``; -1 if every try
    fails. Uniform over the valid positions, since tries are i.i.d. (``first_try``; one
    hashed word a try, mapped to a position by multiply-shift)."""
    span = jnp.maximum(hi - lo, 1)

    def draw(k):
        return lo + below_wide(jax.random.bits(k, (min(chunk, tries),), jnp.uint32), span)

    found, pos = first_try(key, draw, ok, tries, chunk, empty=hi <= lo)
    return jnp.where(found, pos, -1)


def in_category(catalog: Catalog, cat: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Bounds of a category's run in ``cat_order``."""
    return catalog.cat_offsets[cat], catalog.cat_offsets[cat + 1]


def base_problem(
    key: jax.Array, d: jax.Array, env: int, params: EnvParams, catalog: Catalog | None = None
) -> Problem:
    """Fields every family shares: env, d, today (TIME), tier (ACCOUNT), T_max; with a
    catalog also the non-CART visit history (6 keyed in-stock products, SPEC §5.2)."""
    diff = D.difficulty(d, params.overrides)
    today = jax.random.randint(stream(key, "TIME"), (), 0, N_TODAY)
    tier = jax.random.randint(stream(key, "ACCOUNT"), (), 0, 3)
    history = (
        random_history(stream(key, "HISTORY"), catalog)
        if catalog is not None
        else jnp.full(C.MAX_HISTORY, -1, jnp.int32)
    )
    return empty_problem().replace(
        env=jnp.int32(env),
        d=jnp.asarray(d, jnp.int32),
        today=today,
        tier=tier,
        t_max=diff.t_max,
        history=history,
    )


def omission(key: jax.Array, sub: int, item: jax.Array, slot: int, p: jax.Array) -> jax.Array:
    """One keyed draw per slot (stream OMIT, uid = 4096·subgoal + 64·item + slot)."""
    uid = 4096 * sub + 64 * item + slot
    return jax.random.uniform(stream(key, "OMIT", uid)) < p


# --- shared by the generators: JOURNEY's one world ---------------------------------------

N_HISTORY = 6  # non-CART visit history: 6 keyed random in-stock products (SPEC §5.2)


def taken_products(problem: Problem) -> jax.Array:
    """int32 [...]: products an earlier sub-goal of a JOURNEY already uses (targets,
    originals, witnesses, order lines, protected products); -1 entries are padding."""
    return jnp.concatenate(
        [
            problem.item_pid,
            problem.pd_target[None],
            problem.sub_original[None],
            problem.sub_witness[None],
            problem.ret_witness[None],
            problem.pool_witness.reshape(-1),
            problem.line_pid.reshape(-1),
            problem.protected,
        ]
    )


def protect(problem: Problem, pid: jax.Array) -> Problem:
    """Adds ``pid`` to the first free slot of ``problem.protected`` (SPEC §6)."""
    free = problem.protected < 0
    slot = jnp.where(free.any() & (pid >= 0), jnp.argmax(free), problem.protected.shape[0])
    return problem.replace(protected=problem.protected.at[slot].set(pid, mode="drop"))


def append_protected(protected: jax.Array, new: jax.Array) -> jax.Array:
    """Writes the valid entries of ``new`` into the -1 entries of ``protected``, in order."""
    free = protected < 0
    rank = jnp.cumsum(free) - 1  # k-th free entry
    valid = new >= 0
    packed = compact(new, valid, new.shape[0])
    n_new = valid.sum()
    take = free & (rank < n_new)
    return jnp.where(take, packed[jnp.clip(rank, 0, new.shape[0] - 1)], protected)


def random_history(key: jax.Array, catalog: Catalog) -> jax.Array:
    """int32 [MAX_HISTORY]: the non-CART visit history, 6 keyed in-stock products."""
    ok = lambda p: catalog.stock[p] > 0

    def draw(picked, j):
        pid = first_valid(
            jax.random.fold_in(key, j),
            0,
            catalog.n_products,
            lambda p: ok(p) & ~(picked == p).any(),
        )
        return picked.at[j].set(pid), None

    picked, _ = jax.lax.scan(draw, jnp.full(C.MAX_HISTORY, -1, jnp.int32), jnp.arange(N_HISTORY))
    return picked
