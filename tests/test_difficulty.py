"""SPEC §2 difficulty axes and knobs against the printed tables (invariant 12, first half).

The tables are transcribed verbatim as strings, so a printed value's precision sets its
tolerance: half a unit of its last printed digit. All printed entries agree with their
formulas at that tolerance (checked when transcribing); were one to disagree, the
formula would be normative and the entry would be annotated here.
"""

from __future__ import annotations

import dataclasses
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ecomjax import difficulty as D
from ecomjax.constants import (
    D_MAX,
    MAX_BUNDLE_SLOTS,
    MAX_CONSTRAINTS,
    MAX_ITEMS,
    MAX_K_REC,
    MAX_ORDERS,
    MAX_SEARCH_RESULTS,
    MAX_SUBGOALS,
    MAX_TOOL_CALLS,
)

# SPEC §2 axis table, verbatim.
AXIS_COLS = (
    "m", "k_rec", "t_max", "p_missing", "p_noise", "p_switch", "top_k", "eps_rank", "p_oos",
    "h_orders", "b_branch", "b_tool",
)  # fmt: skip
AXIS_TABLE = """
| 0 | 2 | 3 | 4 | .095 | 0 | .046 | 200 | 0 | 0 | 1 | 1 | 1 |
| 1 | 2 | 3 | 4 | .167 | .01 | .072 | 190 | .02 | .05 | 1 | 1 | 1 |
| 2 | 3 | 3 | 5 | .271 | .02 | .109 | 180 | .04 | .10 | 2 | 1 | 2 |
| 3 | 3 | 4 | 5 | .400 | .03 | .161 | 170 | .06 | .15 | 2 | 2 | 2 |
| 4 | 4 | 4 | 6 | .529 | .04 | .227 | 160 | .08 | .20 | 3 | 2 | 3 |
| 5 | 4 | 4 | 6 | .633 | .05 | .300 | 150 | .10 | .25 | 3 | 2 | 3 |
| 6 | 5 | 5 | 7 | .705 | .06 | .373 | 140 | .12 | .30 | 4 | 3 | 4 |
| 7 | 5 | 5 | 7 | .748 | .07 | .439 | 130 | .14 | .35 | 4 | 3 | 4 |
| 8 | 6 | 5 | 8 | .772 | .08 | .491 | 120 | .16 | .40 | 5 | 3 | 5 |
| 9 | 6 | 6 | 8 | .786 | .09 | .528 | 110 | .18 | .45 | 5 | 4 | 5 |
| 10 | 7 | 6 | 9 | .793 | .10 | .554 | 100 | .20 | .50 | 6 | 4 | 6 |
| 11 | 7 | 6 | 9 | .796 | .11 | .572 | 90 | .22 | .50 | 6 | 4 | 6 |
| 12 | 8 | 7 | 10 | .798 | .12 | .582 | 80 | .24 | .50 | 7 | 5 | 7 |
| 16 | 10 | 8 | 12 | .800 | .125 | .598 | 40 | .32 | .50 | 9 | 6 | 9 |
| 20 | 12 | 9 | 14 | .800 | .125 | .600 | 20 | .40 | .50 | 11 | 7 | 11 |
"""

# SPEC §2 per-env knob table, verbatim (rows are knobs, columns d = 0, 3, 6, 9, 12).
KNOB_DS = (0, 3, 6, 9, 12)
KNOB_TABLE = {
    "delta_max": ".500 .274 .151 .083 .045",
    "alpha": "4 4 5 6 7",
    "lambda_sim": ".40 .55 .70 .80 .80",
    "n_items": "1 2 3 4 5",
    "p_var": ".209 .661 .935 .991 .999",
    "p_qty": "0 .3 .5 .5 .5",
    "p_edge": ".045 .237 .554 .676 .697",
    "p_ref": ".209 .661 .935 .991 .999",
    "n_slots": "3 4 6 7 9",
    "l_int": "2 2 3 4 5",
    "shock_hazard": "0 .040 .058 .082 .074",
}

COUNT_FIELDS = ("m", "k_rec", "t_max", "top_k", "h_orders", "b_branch", "b_tool", "alpha",
                "n_items", "n_slots", "l_int", "t_max_journey")  # fmt: skip
FLOAT_FIELDS = ("p_missing", "p_noise", "p_switch", "eps_rank", "p_oos", "delta_max",
                "lambda_sim", "p_var", "p_qty", "p_edge", "p_ref", "shock_hazard")  # fmt: skip


def _parse_axis_table() -> list[tuple[int, dict[str, str]]]:
    rows = []
    for line in AXIS_TABLE.strip().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append((int(cells[0]), dict(zip(AXIS_COLS, cells[1:], strict=True))))
    return rows


def _assert_printed(name: str, d: int, got: np.ndarray, printed: str) -> None:
    """Compare at half a unit of the last printed digit; an integer print is exact."""
    if "." not in printed:
        assert float(got) == pytest.approx(float(printed), abs=1e-7), (name, d, got, printed)
        return
    tol = 0.5 * 10.0 ** -len(printed.split(".")[1])
    # 1e-6 absorbs float32 rounding of values that sit exactly half a digit away.
    assert abs(float(got) - float(printed)) <= tol + 1e-6, (name, d, float(got), printed)


AXIS_ROWS = _parse_axis_table()


@pytest.mark.parametrize(("d", "row"), AXIS_ROWS, ids=[f"d{d}" for d, _ in AXIS_ROWS])
def test_axis_table(d: int, row: dict[str, str]) -> None:
    diff = D.difficulty(jnp.int32(d))
    for name, printed in row.items():
        got = np.asarray(getattr(diff, name))
        fn_val = np.asarray(getattr(D, name)(jnp.int32(d)))
        assert got == fn_val, name  # the bundle and the single function agree
        if name in COUNT_FIELDS:
            assert got.dtype == np.int32 and int(got) == int(printed), (name, d, got, printed)
        else:
            assert got.dtype == np.float32
            _assert_printed(name, d, got, printed)


@pytest.mark.parametrize("name", sorted(KNOB_TABLE))
def test_knob_table(name: str) -> None:
    ds = jnp.asarray(KNOB_DS, jnp.int32)
    got = np.asarray(getattr(D.difficulty(ds), name))
    fn = D.shock_hazard if name == "shock_hazard" else getattr(D, name)
    np.testing.assert_array_equal(got, np.asarray(fn(ds)))
    for d, g, printed in zip(KNOB_DS, got, KNOB_TABLE[name].split(), strict=True):
        if name in COUNT_FIELDS:
            assert g.dtype == np.int32 and int(g) == int(printed), (name, d, g, printed)
        else:
            assert g.dtype == np.float32
            _assert_printed(name, d, g, printed)


def _sig(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_formulas_at_every_d() -> None:
    """Float64 formulas of SPEC §2 at every d in 0..D_MAX (the tables only sample some d)."""
    ds = jnp.arange(D_MAX + 1, dtype=jnp.int32)
    diff = D.difficulty(ds)
    for d in range(D_MAX + 1):
        tm = 4 + d // 2
        po = min(0.5, 0.05 * d)
        ls = min(5, 2 + d // 4)
        want = {
            "m": 2 + d // 2, "k_rec": min(10, 3 + d // 3), "t_max": tm,
            "p_missing": 0.8 * _sig((d - 3) / 1.5), "p_noise": min(max(0.01 * d, 0), 0.125),
            "p_switch": 0.6 * _sig((d - 5) / 2), "top_k": max(20, 200 - 10 * d),
            "eps_rank": min(0.4, 0.02 * d), "p_oos": po, "h_orders": 1 + d // 2,
            "b_branch": 1 + d // 3, "b_tool": 1 + d // 2,
            "delta_max": 0.5 * math.exp(-d / 5), "alpha": 4 + d // 4,
            "lambda_sim": min(max(0.4 + 0.05 * d, 0.4), 0.8), "n_items": min(5, 1 + d // 3),
            "p_var": _sig((d - 2) / 1.5), "p_qty": min(0.5, 0.1 * d),
            "p_edge": 0.7 * _sig((d - 4) / 1.5), "p_ref": _sig((d - 2) / 1.5),
            "n_slots": min(12, 3 + d // 2), "l_int": min(5, 2 + d // 4),
            "shock_hazard": 1 - (1 - po) ** (1 / max(1, tm - 1)), "t_max_journey": ls * tm,
        }  # fmt: skip
        for name, w in want.items():
            g = np.asarray(getattr(diff, name))[d]
            if name in COUNT_FIELDS:
                assert int(g) == w, (name, d)
            else:
                assert float(g) == pytest.approx(w, abs=2e-7, rel=1e-6), (name, d)


def test_dtypes_and_shapes() -> None:
    for d in (jnp.int32(3), jnp.arange(6, dtype=jnp.int32).reshape(2, 3), 7):
        diff = D.difficulty(d)
        for f in dataclasses.fields(diff):
            v = getattr(diff, f.name)
            assert v.shape == jnp.shape(d), f.name
            want = jnp.int32 if f.name in COUNT_FIELDS or f.name == "d" else jnp.float32
            assert v.dtype == want, f.name


def test_no_retrace_under_jit() -> None:
    """A moving d is data, not a shape or a constant: one trace serves every level."""

    @jax.jit
    @chex.assert_max_traces(n=1)
    def f(d: jax.Array) -> D.Difficulty:
        return D.difficulty(d)

    ref = D.difficulty(jnp.arange(D_MAX + 1, dtype=jnp.int32))
    for d in range(D_MAX + 1):
        out = f(jnp.int32(d))
        for name in COUNT_FIELDS + FLOAT_FIELDS:
            assert np.asarray(getattr(out, name)) == np.asarray(getattr(ref, name))[d], name

    @jax.jit
    @chex.assert_max_traces(n=1)
    def g(ds: jax.Array) -> D.Difficulty:
        return jax.vmap(D.difficulty)(ds)

    rng = np.random.default_rng(0)
    for _ in range(5):
        ds = jnp.asarray(rng.integers(0, D_MAX + 1, size=16), jnp.int32)
        out = g(ds)
        direct = D.difficulty(ds)
        for name in COUNT_FIELDS + FLOAT_FIELDS:
            np.testing.assert_array_equal(getattr(out, name), getattr(direct, name))


def test_capacity_conditions() -> None:
    """SPEC §8.9: n_items ≤ B_tool and n_slots ≤ (T_max − 1)·B_tool at every d."""
    for d in range(D_MAX + 1):
        x = D.difficulty(jnp.int32(d))
        assert int(x.n_items) <= int(x.b_tool), d
        assert int(x.n_slots) <= (int(x.t_max) - 1) * int(x.b_tool), d


def test_static_maxima() -> None:
    """SPEC §4.8: no axis exceeds the padded size it indexes, at any d ≤ D_MAX."""
    x = D.difficulty(jnp.arange(D_MAX + 1, dtype=jnp.int32))
    caps = {
        "m": MAX_CONSTRAINTS, "k_rec": MAX_K_REC, "b_tool": MAX_TOOL_CALLS,
        "n_items": MAX_ITEMS, "n_slots": MAX_BUNDLE_SLOTS, "l_int": MAX_SUBGOALS,
        "h_orders": MAX_ORDERS, "top_k": MAX_SEARCH_RESULTS,
    }  # fmt: skip
    for name, cap in caps.items():
        assert int(jnp.max(getattr(x, name))) <= cap, name
    assert int(jnp.max(x.t_max)) == 14 and int(jnp.max(x.t_max_journey)) == 70


def test_shock_hazard_compounds_to_p_oos() -> None:
    """SPEC §6: exposed from turn 1 of a full episode, out of stock with probability p_oos."""
    x = D.difficulty(jnp.arange(D_MAX + 1, dtype=jnp.int32))
    q = np.asarray(x.shock_hazard, np.float64)
    n = np.maximum(1, np.asarray(x.t_max) - 1)
    np.testing.assert_allclose(1 - (1 - q) ** n, np.asarray(x.p_oos), atol=1e-6)


def test_d_clipped_to_d_max() -> None:
    """Past D_MAX the padded maxima would overflow, so difficulty() saturates."""
    hi = D.difficulty(jnp.int32(D_MAX + 7))
    top = D.difficulty(jnp.int32(D_MAX))
    for f in dataclasses.fields(hi):
        assert np.asarray(getattr(hi, f.name)) == np.asarray(getattr(top, f.name)), f.name
    lo = D.difficulty(jnp.int32(-3))
    assert int(lo.d) == 0 and int(lo.m) == 2


def test_n_slots_project_cap() -> None:
    ds = jnp.arange(D_MAX + 1, dtype=jnp.int32)
    for cap in (8, 10, 12):
        np.testing.assert_array_equal(
            D.n_slots(ds, cap), np.minimum(np.asarray(D.n_slots(ds)), cap)
        )
        np.testing.assert_array_equal(D.difficulty(ds).n_slots_capped(cap), D.n_slots(ds, cap))
    # the cap may be per-episode data
    caps = jnp.asarray([8, 10, 12, 8], jnp.int32)
    np.testing.assert_array_equal(
        D.n_slots(jnp.full((4,), 20, jnp.int32), caps), np.asarray([8, 10, 12, 8])
    )
    assert D.n_slots(jnp.int32(20), jnp.int32(10)).dtype == jnp.int32


def test_overrides() -> None:
    ov = D.AxisOverrides(m=3, p_noise=0.0, p_oos=0.5, t_max=6)
    hash(ov)  # static-jit friendly
    assert ov == D.AxisOverrides(m=3, p_noise=0.0, p_oos=0.5, t_max=6)
    ds = jnp.arange(D_MAX + 1, dtype=jnp.int32)
    x = D.difficulty(ds, ov)
    base = D.difficulty(ds)
    np.testing.assert_array_equal(x.m, np.full(D_MAX + 1, 3))
    np.testing.assert_array_equal(x.p_noise, np.zeros(D_MAX + 1))
    np.testing.assert_array_equal(x.t_max, np.full(D_MAX + 1, 6))
    assert x.m.dtype == jnp.int32 and x.p_noise.dtype == jnp.float32
    # untouched axes stay on their formula
    np.testing.assert_array_equal(x.k_rec, base.k_rec)
    np.testing.assert_array_equal(x.p_switch, base.p_switch)
    # derived values follow the overridden inputs
    np.testing.assert_allclose(x.shock_hazard, 1 - 0.5 ** (1 / 5), rtol=1e-6)
    np.testing.assert_array_equal(x.t_max_journey, np.asarray(base.l_int) * 6)
    # ... unless overridden themselves
    y = D.difficulty(ds, D.AxisOverrides(p_oos=0.5, shock_hazard=0.1))
    np.testing.assert_allclose(y.shock_hazard, 0.1)
    # None is the identity
    z = D.difficulty(ds, D.AxisOverrides())
    for f in dataclasses.fields(z):
        np.testing.assert_array_equal(getattr(z, f.name), getattr(base, f.name))


def test_overrides_under_jit_no_retrace_on_d() -> None:
    ov = D.AxisOverrides(k_rec=5, eps_rank=0.1)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def f(d: jax.Array) -> D.Difficulty:
        return D.difficulty(d, ov)

    for d in range(D_MAX + 1):
        out = f(jnp.int32(d))
        assert int(out.k_rec) == 5 and float(out.eps_rank) == pytest.approx(0.1)
        assert int(out.m) == 2 + d // 2

    g = jax.jit(D.difficulty, static_argnums=1)
    assert int(g(jnp.int32(4), D.AxisOverrides(m=7)).m) == 7


@pytest.mark.parametrize(
    "kwargs",
    [{"m": 13}, {"m": 0}, {"k_rec": 2.5}, {"p_oos": 1.5}, {"p_missing": -0.1},
     {"n_items": 6}, {"delta_max": -1.0}, {"b_tool": True}],
)  # fmt: skip
def test_override_validation(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        D.AxisOverrides(**kwargs)
