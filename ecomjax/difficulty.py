"""Difficulty axes and per-env knobs of SPEC §2 as `jnp` functions of a traced `d`.

Every function takes an int32 `d` of any shape and is pure `jnp`, so a curriculum that
moves `d` never retraces. Counts come back as int32 and probabilities as float32.
Linear probabilities are one correctly rounded division of an exact integer (d/20, not
0.05·d): XLA may fuse a·d + b into an FMA under jit but not eagerly, and SPEC §12 wants
jitted and eager runs bitwise equal.
`difficulty(d)` evaluates all of them once into a `Difficulty` pytree for env code.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

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

I32 = jnp.int32
F32 = jnp.float32


def _d(d: jax.typing.ArrayLike) -> jax.Array:
    return jnp.asarray(d, dtype=I32)


def _f(d: jax.typing.ArrayLike) -> jax.Array:
    return _d(d).astype(F32)


def _sigmoid(x: jax.Array) -> jax.Array:
    return jax.nn.sigmoid(x).astype(F32)


_FORMULAS: dict[str, Callable[[jax.Array], jax.Array]] = {}


@functools.cache
def _table(name: str) -> np.ndarray:
    """float32 [D_MAX + 1]: the knob's formula evaluated once per d, op by op, outside any
    trace. XLA rewrites some formulas under jit (x / c into x · (1/c), sigmoid and exp
    fused differently), and even eagerly a vector and a scalar can round apart, which
    moved p_noise, δ_max, λ_sim, p_oos and the shock hazard by an ulp between programs
    (SPEC §12). Every float knob reads this table instead, so all programs agree."""
    with jax.ensure_compile_time_eval():
        fn = _FORMULAS[name]
        return np.asarray([np.asarray(fn(I32(d))) for d in range(D_MAX + 1)], np.float32)


def _tabled(fn: Callable[[jax.Array], jax.Array]) -> Callable[[jax.typing.ArrayLike], jax.Array]:
    """A float knob of d in [0, D_MAX] (``difficulty`` clips d) read from its table."""
    _FORMULAS[fn.__name__] = fn

    @functools.wraps(fn)
    def knob(d: jax.typing.ArrayLike) -> jax.Array:
        return jnp.asarray(_table(fn.__name__))[jnp.clip(_d(d), 0, D_MAX)]

    return knob


# --- the 12 axes -------------------------------------------------------------------------


def m(d: jax.typing.ArrayLike) -> jax.Array:
    """Number of constraints: 2 + ⌊d/2⌋."""
    return 2 + _d(d) // 2


def k_rec(d: jax.typing.ArrayLike) -> jax.Array:
    """Recommendations asked for: min(10, 3 + ⌊d/3⌋)."""
    return jnp.minimum(10, 3 + _d(d) // 3)


def t_max(d: jax.typing.ArrayLike) -> jax.Array:
    """Agent turns: 4 + ⌊d/2⌋ (JOURNEY multiplies by L_int, see `t_max_journey`)."""
    return 4 + _d(d) // 2


@_tabled
def p_missing(d: jax.typing.ArrayLike) -> jax.Array:
    """Per-slot omission: 0.8·σ((d−3)/1.5)."""
    return F32(0.8) * _sigmoid((_f(d) - 3.0) / 1.5)


@_tabled
def p_noise(d: jax.typing.ArrayLike) -> jax.Array:
    """Typo rate: clip(0.01·d, 0, 0.125)."""
    return jnp.clip(_f(d) / 100.0, 0.0, 0.125).astype(F32)


@_tabled
def p_switch(d: jax.typing.ArrayLike) -> jax.Array:
    """JOURNEY context switch: 0.6·σ((d−5)/2)."""
    return F32(0.6) * _sigmoid((_f(d) - 5.0) / 2.0)


def top_k(d: jax.typing.ArrayLike) -> jax.Array:
    """Retrieval depth cap: max(20, 200 − 10·d)."""
    return jnp.maximum(20, 200 - 10 * _d(d))


@_tabled
def eps_rank(d: jax.typing.ArrayLike) -> jax.Array:
    """Distractor share in search results: min(0.4, 0.02·d)."""
    return jnp.minimum(F32(0.4), _f(d) / 50.0)


@_tabled
def p_oos(d: jax.typing.ArrayLike) -> jax.Array:
    """End-of-episode stock-shock probability: min(0.5, 0.05·d)."""
    return jnp.minimum(F32(0.5), _f(d) / 20.0)


def h_orders(d: jax.typing.ArrayLike) -> jax.Array:
    """Order-history length: 1 + ⌊d/2⌋."""
    return 1 + _d(d) // 2


def b_branch(d: jax.typing.ArrayLike) -> jax.Array:
    """Policy complexity: 1 + ⌊d/3⌋."""
    return 1 + _d(d) // 3


def b_tool(d: jax.typing.ArrayLike) -> jax.Array:
    """Tool calls per turn: 1 + ⌊d/2⌋."""
    return 1 + _d(d) // 2


# --- per-env knobs -----------------------------------------------------------------------


@_tabled
def delta_max(d: jax.typing.ArrayLike) -> jax.Array:
    """Numeric constraint slack bound, δ ~ U(0, δ_max): 0.5·e^(−d/5)."""
    return F32(0.5) * jnp.exp(-_f(d) / 5.0)


def alpha(d: jax.typing.ArrayLike) -> jax.Array:
    """PD r_cons exponent: 4 + ⌊d/4⌋ (an integer, so int32)."""
    return 4 + _d(d) // 4


@_tabled
def lambda_sim(d: jax.typing.ArrayLike) -> jax.Array:
    """SUB similarity weight: clip(0.4 + 0.05·d, 0.4, 0.8)."""
    return jnp.clip((8.0 + _f(d)) / 20.0, 0.4, 0.8).astype(F32)


def n_items(d: jax.typing.ArrayLike) -> jax.Array:
    """CART targets: min(5, 1 + ⌊d/3⌋)."""
    return jnp.minimum(5, 1 + _d(d) // 3)


@_tabled
def p_var(d: jax.typing.ArrayLike) -> jax.Array:
    """CART variant requirement: σ((d−2)/1.5)."""
    return _sigmoid((_f(d) - 2.0) / 1.5)


@_tabled
def p_qty(d: jax.typing.ArrayLike) -> jax.Array:
    """CART multi-quantity (qty ~ U{2,3,4}): min(0.5, 0.1·d)."""
    return jnp.minimum(F32(0.5), _f(d) / 10.0)


@_tabled
def p_edge(d: jax.typing.ArrayLike) -> jax.Array:
    """RETURN window-edge purchase date: 0.7·σ((d−4)/1.5)."""
    return F32(0.7) * _sigmoid((_f(d) - 4.0) / 1.5)


@_tabled
def p_ref(d: jax.typing.ArrayLike) -> jax.Array:
    """STATUS indirect order reference: σ((d−2)/1.5)."""
    return _sigmoid((_f(d) - 2.0) / 1.5)


def n_slots(d: jax.typing.ArrayLike, project_cap: jax.typing.ArrayLike | None = None) -> jax.Array:
    """BUNDLE slots: min(12, 3 + ⌊d/2⌋), then capped by the project's list length.

    The cap is per problem (projects list 8-12 leaves), so it may be traced too.
    """
    n = jnp.minimum(12, 3 + _d(d) // 2)
    if project_cap is not None:
        n = jnp.minimum(n, jnp.asarray(project_cap, dtype=I32))
    return n


def l_int(d: jax.typing.ArrayLike) -> jax.Array:
    """JOURNEY sub-goals: min(5, 2 + ⌊d/4⌋)."""
    return jnp.minimum(5, 2 + _d(d) // 4)


def shock_hazard_from(p: jax.typing.ArrayLike, turns: jax.typing.ArrayLike) -> jax.Array:
    """Per-turn hazard q with 1 − (1 − q)^max(1, turns−1) = p (SPEC §6).

    Split out so an overridden p_oos or T_max still yields a consistent hazard.
    """
    p = jnp.asarray(p, dtype=F32)
    n = jnp.maximum(1, jnp.asarray(turns, dtype=I32) - 1).astype(F32)
    # −expm1(log1p(−p)/n) is 1 − (1−p)^(1/n) without cancellation at small p.
    return (-jnp.expm1(jnp.log1p(-p) / n)).astype(F32)


@_tabled
def shock_hazard(d: jax.typing.ArrayLike) -> jax.Array:
    """q(d) = 1 − (1 − p_oos)^(1/max(1, T_max−1))."""
    return shock_hazard_from(p_oos(d), t_max(d))


def t_max_journey(d: jax.typing.ArrayLike) -> jax.Array:
    """JOURNEY turn limit: L_int(d)·T_max(d)."""
    return l_int(d) * t_max(d)


# --- bundled evaluation and per-run overrides --------------------------------------------

_COUNT_FIELDS: tuple[str, ...] = (
    "m", "k_rec", "t_max", "top_k", "h_orders", "b_branch", "b_tool",
    "alpha", "n_items", "n_slots", "l_int",
)  # fmt: skip
_PROB_FIELDS: tuple[str, ...] = (
    "p_missing", "p_noise", "p_switch", "eps_rank", "p_oos",
    "lambda_sim", "p_var", "p_qty", "p_edge", "p_ref", "shock_hazard",
)  # fmt: skip
_FLOAT_FIELDS: tuple[str, ...] = ("delta_max",)

# Static maxima (SPEC §4.8) that padded arrays are sized by; an override must not exceed
# them or it would silently index past the padding.
_COUNT_MAX: dict[str, int] = {
    "m": MAX_CONSTRAINTS,
    "k_rec": MAX_K_REC,
    "top_k": MAX_SEARCH_RESULTS,
    "h_orders": MAX_ORDERS,
    "b_tool": MAX_TOOL_CALLS,
    "n_items": MAX_ITEMS,
    "n_slots": MAX_BUNDLE_SLOTS,
    "l_int": MAX_SUBGOALS,
}

_AXIS_FNS = {
    "m": m,
    "k_rec": k_rec,
    "t_max": t_max,
    "p_missing": p_missing,
    "p_noise": p_noise,
    "p_switch": p_switch,
    "top_k": top_k,
    "eps_rank": eps_rank,
    "p_oos": p_oos,
    "h_orders": h_orders,
    "b_branch": b_branch,
    "b_tool": b_tool,
    "delta_max": delta_max,
    "alpha": alpha,
    "lambda_sim": lambda_sim,
    "n_items": n_items,
    "p_var": p_var,
    "p_qty": p_qty,
    "p_edge": p_edge,
    "p_ref": p_ref,
    "n_slots": n_slots,
    "l_int": l_int,
}


@struct.dataclass
class Difficulty:
    """Every axis and knob at one `d` (any batch shape), so env code evaluates them once."""

    d: jax.Array  # int32, clipped to [0, D_MAX]
    # the 12 axes
    m: jax.Array  # int32
    k_rec: jax.Array  # int32
    t_max: jax.Array  # int32
    p_missing: jax.Array  # float32
    p_noise: jax.Array  # float32
    p_switch: jax.Array  # float32
    top_k: jax.Array  # int32
    eps_rank: jax.Array  # float32
    p_oos: jax.Array  # float32
    h_orders: jax.Array  # int32
    b_branch: jax.Array  # int32
    b_tool: jax.Array  # int32
    # per-env knobs
    delta_max: jax.Array  # float32
    alpha: jax.Array  # int32
    lambda_sim: jax.Array  # float32
    n_items: jax.Array  # int32
    p_var: jax.Array  # float32
    p_qty: jax.Array  # float32
    p_edge: jax.Array  # float32
    p_ref: jax.Array  # float32
    n_slots: jax.Array  # int32, before the per-project cap (see `n_slots_capped`)
    l_int: jax.Array  # int32
    shock_hazard: jax.Array  # float32, q of SPEC §6, from the (possibly overridden) p_oos, t_max
    t_max_journey: jax.Array  # int32, l_int·t_max

    def n_slots_capped(self, project_cap: jax.typing.ArrayLike) -> jax.Array:
        """BUNDLE slots after the project's list-length cap."""
        return jnp.minimum(self.n_slots, jnp.asarray(project_cap, dtype=I32))


@dataclass(frozen=True)
class AxisOverrides:
    """Per-run constants that replace an axis or knob at every d (SPEC §2: "MAY be overridden").

    Hashable, so it can be a static jit argument. Derived values (`shock_hazard`,
    `t_max_journey`) follow the overridden inputs unless set themselves.
    """

    m: int | None = None
    k_rec: int | None = None
    t_max: int | None = None
    p_missing: float | None = None
    p_noise: float | None = None
    p_switch: float | None = None
    top_k: int | None = None
    eps_rank: float | None = None
    p_oos: float | None = None
    h_orders: int | None = None
    b_branch: int | None = None
    b_tool: int | None = None
    delta_max: float | None = None
    alpha: int | None = None
    lambda_sim: float | None = None
    n_items: int | None = None
    p_var: float | None = None
    p_qty: float | None = None
    p_edge: float | None = None
    p_ref: float | None = None
    n_slots: int | None = None
    l_int: int | None = None
    shock_hazard: float | None = None
    t_max_journey: int | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None:
                continue
            if f.name in _COUNT_FIELDS or f.name == "t_max_journey":
                if isinstance(v, bool) or int(v) != v or v < 1:
                    raise ValueError(f"override {f.name}={v!r} must be a positive integer")
                cap = _COUNT_MAX.get(f.name)
                if cap is not None and v > cap:
                    raise ValueError(f"override {f.name}={v} exceeds its static maximum {cap}")
            elif f.name in _PROB_FIELDS and not 0.0 <= float(v) <= 1.0:
                raise ValueError(f"override {f.name}={v!r} must lie in [0, 1]")
            elif f.name in _FLOAT_FIELDS and float(v) < 0.0:
                raise ValueError(f"override {f.name}={v!r} must be >= 0")

    def set_fields(self) -> dict[str, int | float]:
        """The overridden fields only."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        }


def _const(like: jax.Array, value: int | float, name: str) -> jax.Array:
    dtype = I32 if name in _COUNT_FIELDS or name == "t_max_journey" else F32
    return jnp.full(jnp.shape(like), value, dtype=dtype)


def difficulty(d: jax.typing.ArrayLike, overrides: AxisOverrides | None = None) -> Difficulty:
    """All axes and knobs at `d`, with per-run overrides applied.

    `d` is clipped to [0, D_MAX] because the static maxima (SPEC §4.8) are sized for
    D_MAX; past it, counts such as m would overflow the padded arrays.
    """
    dc = jnp.clip(_d(d), 0, D_MAX)
    ov = overrides.set_fields() if overrides is not None else {}
    vals = {
        name: (_const(dc, ov[name], name) if name in ov else fn(dc))
        for name, fn in _AXIS_FNS.items()
    }
    if "shock_hazard" in ov:
        vals["shock_hazard"] = _const(dc, ov["shock_hazard"], "shock_hazard")
    elif "p_oos" in ov or "t_max" in ov:  # follows the overridden inputs
        vals["shock_hazard"] = shock_hazard_from(vals["p_oos"], vals["t_max"])
    else:
        vals["shock_hazard"] = shock_hazard(dc)
    vals["t_max_journey"] = (
        _const(dc, ov["t_max_journey"], "t_max_journey")
        if "t_max_journey" in ov
        else vals["l_int"] * vals["t_max"]
    )
    return Difficulty(d=dc, **vals)


__all__ = [
    "AxisOverrides",
    "Difficulty",
    "alpha",
    "b_branch",
    "b_tool",
    "delta_max",
    "difficulty",
    "eps_rank",
    "h_orders",
    "k_rec",
    "l_int",
    "lambda_sim",
    "m",
    "n_items",
    "n_slots",
    "p_edge",
    "p_missing",
    "p_noise",
    "p_oos",
    "p_qty",
    "p_ref",
    "p_switch",
    "p_var",
    "shock_hazard",
    "shock_hazard_from",
    "t_max",
    "t_max_journey",
    "top_k",
]
