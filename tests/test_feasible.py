"""``constraints.feasible`` decides s(p | C) = 1 from bounds merged per attribute; it must
equal the per-constraint reference (every ``constraint_holds`` entry true, and the id
known) bit for bit, on both of its gather paths, for any constraint set an agent or a
generator can produce: repeated attributes, NaN and infinite values, values exactly on a
product's value, ops and attrs out of range, unknown ids."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ecomjax import constants as C
from ecomjax.constraints import _SCALE, _feasible, attr_values, constraint_holds, feasible
from ecomjax.predicates import attr_column

MC = C.MAX_CONSTRAINTS
NA = C.N_ATTRS
SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, -1.0], np.float32)


def reference(catalog, pids, attr, op, val):
    known = (pids >= 0) & (pids < catalog.n_products)
    return constraint_holds(catalog, pids, attr, op, val).all(-1) & known


def draw_sets(catalog, n_sets: int, n_ids: int, seed: int):
    """Constraint sets whose values sit on, just beside, or far from real products' values,
    so every comparison meets its boundary."""
    rng = np.random.default_rng(seed)
    n = catalog.n_products
    table = np.asarray(attr_values(catalog, jnp.arange(n)))  # [N, NA], scaled units
    live = np.arange(MC)[None] < rng.integers(0, 6, n_sets)[:, None]
    attr = rng.integers(0, NA, (n_sets, MC))
    attr[rng.random((n_sets, MC)) < 0.03] = NA + 3  # out of range: clipped to the last attr
    attr = np.where(live, attr, -1).astype(np.int32)
    op = rng.choice(
        np.array([-1, 0, 1, -4, 7], np.int32), (n_sets, MC), p=[0.3, 0.35, 0.3, 0.025, 0.025]
    )
    base = rng.integers(0, n, (n_sets, MC))
    a = np.clip(attr, 0, NA - 1)
    on = table[base, a] / _SCALE[a]
    nudge = rng.choice(np.array([0.0, 0.0, 1e-5, -1e-5, 0.5, -2.0], np.float32), (n_sets, MC))
    val = (on + nudge).astype(np.float32)
    odd = rng.random((n_sets, MC)) < 0.05
    val[odd] = rng.choice(SPECIAL, odd.sum())
    # Half the sets repeat one constraint's attribute in the next slot (two bounds, or two
    # eq values that agree or not).
    rep = rng.random(n_sets) < 0.5
    attr[rep, 1] = np.where(attr[rep, 0] >= 0, attr[rep, 0], attr[rep, 1])
    # Ids drawn mostly among products that meet a set's first constraint's product, with
    # unknown ids mixed in.
    ids = rng.integers(0, n, (n_sets, n_ids))
    ids[:, 0] = base[:, 0]
    bad = rng.random((n_sets, n_ids)) < 0.03
    ids[bad] = rng.choice(np.array([-1, -7, n, n + 5]), bad.sum())
    return (jnp.asarray(x) for x in (ids.astype(np.int32), attr, op, val))


@pytest.mark.parametrize("table", [True, False], ids=["table", "columns"])
def test_merged_bounds_equal_the_per_constraint_reference(catalog, table):
    ids, attr, op, val = draw_sets(catalog, 4096, 48, seed=int(table))

    def both(i, a, o, v):
        return _feasible(catalog, i, a, o, v, table), reference(catalog, i, a, o, v)

    got, want = (np.asarray(x) for x in jax.jit(jax.vmap(both))(ids, attr, op, val))
    # The sweep must reach both outcomes often, or it would prove little.
    assert 0.02 < want.mean() < 0.9, want.mean()
    np.testing.assert_array_equal(got, want)


def test_the_public_path_is_the_table_on_a_small_catalog(catalog):
    ids, attr, op, val = draw_sets(catalog, 256, 16, seed=3)
    got = jax.vmap(lambda i, a, o, v: feasible(catalog, i, a, o, v))(ids, attr, op, val)
    want = jax.vmap(lambda i, a, o, v: reference(catalog, i, a, o, v))(ids, attr, op, val)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


values = st.one_of(
    st.sampled_from([float(x) for x in SPECIAL]),
    st.floats(-5, 2_000, width=32),
    st.integers(0, 60).map(float),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-1, NA + 2), st.integers(-3, 3), values), min_size=MC, max_size=MC
    ),
    st.integers(0, 999),
)
def test_any_single_set_on_a_product_and_its_neighbours(catalog, cons, pid):
    attr, op, val = (np.array(x) for x in zip(*cons, strict=True))
    pids = jnp.asarray([pid, (pid + 1) % 1000, -1, 1000], jnp.int32)
    args = (pids, jnp.int32(attr), jnp.int32(op), jnp.float32(val))
    by_table, by_columns, want = (np.asarray(x) for x in _all_three(catalog, *args))
    np.testing.assert_array_equal(by_table, want)
    np.testing.assert_array_equal(by_columns, want)
    assert not want[2:].any()  # unknown ids satisfy no set, not even an empty one


@jax.jit
def _all_three(catalog, pids, attr, op, val):
    return (
        _feasible(catalog, pids, attr, op, val, True),
        _feasible(catalog, pids, attr, op, val, False),
        reference(catalog, pids, attr, op, val),
    )


def test_one_column_equals_the_whole_row(catalog):
    ids = jnp.asarray([0, 5, 999, 17], jnp.int32)
    rows = np.asarray(attr_values(catalog, ids))
    for k in range(NA):
        np.testing.assert_array_equal(np.asarray(attr_column(catalog, ids, k)), rows[:, k])


def test_a_batch_of_sets_in_one_call_is_refused(catalog):
    attr = jnp.full((2, MC), -1, jnp.int32)
    with pytest.raises(ValueError, match="one constraint set"):
        feasible(catalog, jnp.arange(3), attr, jnp.zeros_like(attr), jnp.zeros((2, MC)))
