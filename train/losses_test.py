"""GRPO / DAPO losses: hand-computed cases, hypothesis properties, and empty-mask safety.

Shapes inside the property tests are fixed so each jitted function compiles once per
static configuration; hypothesis varies only the contents.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ecomjax.train.losses import (
    dapo_loss,
    effective_groups,
    group_advantages,
    grpo_loss,
    kept_fraction,
    overlong_penalty,
    policy_loss,
    ppo_clip_objective,
)

SQ3 = np.sqrt(3.0)
PROP = settings(max_examples=40, deadline=None)

_adv = jax.jit(group_advantages, static_argnames=("scale",))
_effective = jax.jit(effective_groups)
_overlong = jax.jit(overlong_penalty)
_objective = jax.jit(ppo_clip_objective)
_grpo = jax.jit(grpo_loss)
_dapo = jax.jit(dapo_loss, static_argnames=("dynamic_sampling",))


@partial(jax.jit, static_argnames=("aggregation",))
def _vg(
    logp_new,
    logp_old,
    adv,
    mask,
    logp_ref=None,
    entropy=None,
    eps_low=0.2,
    eps_high=0.28,
    kl_coef=0.0,
    entropy_coef=0.0,
    group_mask=None,
    aggregation="token",
):
    """(loss, metrics, d loss / d logp_new, d loss / d entropy) of policy_loss, one compile
    per static configuration."""

    def f(x, h):
        return policy_loss(
            x,
            logp_old,
            adv,
            mask,
            eps_low=eps_low,
            eps_high=eps_high,
            aggregation=aggregation,
            group_mask=group_mask,
            logp_ref=logp_ref,
            kl_coef=kl_coef,
            entropy=h,
            entropy_coef=entropy_coef,
        )

    (loss, metrics), (g, gh) = jax.value_and_grad(f, argnums=(0, 1), has_aux=True)(
        logp_new, entropy
    )
    return loss, metrics, g, gh


def f32(x):
    return np.asarray(x, np.float32)


def floats(lo, hi):
    lo, hi = float(np.float32(lo)), float(np.float32(hi))
    return st.floats(lo, hi, width=32, allow_subnormal=False)


# --------------------------------------------------------------------------------------
# Hand-computed cases


def test_group_advantages_hand():
    # [1, 0, 0, 1]: mean 0.5, population std 0.5 -> exactly +-1 with eps = 0.
    np.testing.assert_array_equal(_adv(f32([1, 0, 0, 1]), 0.0), [1, -1, -1, 1])
    # Default eps = 1e-6: +-0.5 / (0.5 + 1e-6).
    np.testing.assert_allclose(_adv(f32([1, 0, 0, 1])), [1, -1, -1, 1], rtol=3e-6)
    # scale=False: just r - mean.
    np.testing.assert_array_equal(_adv(f32([1, 0, 0, 1]), scale=False), [0.5, -0.5, -0.5, 0.5])
    # [0, 0, 0, 3]: mean 3/4, var (3 * 9/16 + 81/16) / 4 = 27/16, std = 3 sqrt(3) / 4,
    # so the 3 gets (9/4) / std = sqrt(3) and each 0 gets -(3/4) / std = -1 / sqrt(3).
    # Ints are accepted; the batch axis is independent, and an equal group is all zero.
    got = _adv(np.array([[0, 0, 0, 3], [2, 2, 2, 2]]))
    np.testing.assert_allclose(got[0], [-1 / SQ3, -1 / SQ3, -1 / SQ3, SQ3], rtol=1e-5)
    np.testing.assert_array_equal(got[1], 0.0)


def test_equal_rewards_exactly_zero_despite_rounding():
    # float32 mean of three 0.1s is not 0.1: naive (r - mean) / (std + eps) gives ~ -7e-3.
    r = jnp.full((3,), 0.1, jnp.float32)
    assert float((r - r.mean())[0]) != 0.0  # the residue this guards against
    for scale in (True, False):
        np.testing.assert_array_equal(_adv(r, scale=scale), 0.0)


def test_effective_groups_hand():
    rewards = f32([[1, 0, 0, 1], [2, 2, 2, 2], [0, 0, 0, 1e-3], [-1, -1, -1, -1]])
    np.testing.assert_array_equal(_effective(rewards), [True, False, True, False])
    assert float(kept_fraction(rewards)) == 0.5
    assert float(kept_fraction(f32([[1, 0], [1, 0], [3, 3]]))) == pytest.approx(2 / 3)
    assert float(kept_fraction(np.zeros((0, 4), np.float32))) == 0.0
    assert not bool(effective_groups(f32([[5.0]]))[0])  # one rollout carries no signal


def test_overlong_penalty_regimes_and_boundaries():
    # max_len 100, cache 20: free up to 80, ramp (80 - L) / 20 on (80, 100], -1 beyond.
    lengths = np.array([0, 79, 80, 81, 90, 99, 100, 101, 1000], np.int32)
    want = [0, 0, 0, -0.05, -0.5, -0.95, -1, -1, -1]
    np.testing.assert_allclose(_overlong(lengths, 100, 20), want, rtol=1e-6)
    # cache_len = 0 is a hard cut-off at max_len (no 0/0).
    np.testing.assert_array_equal(_overlong(np.array([100, 101]), 100, 0), [0, -1])
    with pytest.raises(ValueError):
        overlong_penalty(np.array([1]), 10, 20)
    with pytest.raises(ValueError):
        overlong_penalty(np.array([1]), 10, -1)


def test_clipped_ratio_hand():
    # Two sequences, same ratios r = [1.5, 0.5, 1.1, 0.9], A = +1 and A = -1,
    # eps_low 0.2, eps_high 0.28 -> clip range [0.8, 1.28].
    #   A = +1: min(r, clip(r)) = [1.28, 0.5, 1.1, 0.9], sum 3.78 (1.5 clipped high)
    #   A = -1: min(-r, -clip(r)) = [-1.5, -0.8, -1.1, -0.9], sum -4.3 (0.5 clipped low)
    # token loss = -(3.78 - 4.3) / 8 = 0.065
    # sequence loss = -(3.78 / 4 - 4.3 / 4) / 2 = 0.065 too (equal lengths)
    ratio = f32([[1.5, 0.5, 1.1, 0.9]] * 2)
    old = f32(np.full((2, 4), -2.0))
    new = f32(old + np.log(ratio))
    adv = f32([1, -1])
    mask = np.ones((2, 4), bool)
    for agg in ("token", "sequence"):
        loss, m, g, _ = _vg(new, old, adv, mask, aggregation=agg)
        assert float(loss) == pytest.approx(0.065, abs=1e-6)
        assert float(m["clip_frac_high"]) == pytest.approx(1 / 8)
        assert float(m["clip_frac_low"]) == pytest.approx(1 / 8)
        assert float(m["ratio_mean"]) == pytest.approx(1.0, abs=1e-6)
        assert float(m["valid_tokens"]) == 8
        # d loss / d logp_new = -r A / 8 where unclipped (d r / d logp = r), 0 where clipped.
        want = [[0, -0.5, -1.1, -0.9], [1.5, 0, 1.1, 0.9]]
        np.testing.assert_allclose(g, np.array(want) / 8, atol=1e-6)


def test_token_vs_sequence_aggregation_hand():
    # Ratio 1 so each valid token's objective is its advantage. Row 0 has 1 valid token
    # (A = 2), row 1 has 3 (A = -1), row 2 is pure padding. Pads hold junk.
    mask = np.array([[1, 0, 0], [1, 1, 1], [0, 0, 0]], bool)
    old = np.where(mask, -1.0, -np.inf).astype(np.float32)
    new = np.where(mask, -1.0, 50.0).astype(np.float32)
    adv = f32([2, -1, 7])
    # token: -(2 * 1 + (-1) * 3) / 4 = 0.25
    loss, m, _, _ = _vg(new, old, adv, mask, aggregation="token")
    assert float(loss) == pytest.approx(0.25)
    assert float(m["valid_tokens"]) == 4
    # sequence: -(2 + (-1)) / 2 = -0.5  (the empty row 2 does not count as a sequence)
    loss, _, _, _ = _vg(new, old, adv, mask, aggregation="sequence")
    assert float(loss) == pytest.approx(-0.5)
    # Dropping row 1 by group mask leaves row 0 alone: -2 both ways.
    for agg in ("token", "sequence"):
        loss, m, _, _ = _vg(new, old, adv, mask, group_mask=f32([1, 0, 1]), aggregation=agg)
        assert float(loss) == pytest.approx(-2.0)
        assert float(m["valid_tokens"]) == 1


def test_kl_and_entropy_hand():
    # One sequence, 2 valid tokens + 1 pad, A = 0 so the surrogate is 0.
    # ref - new = [ln 2, 0] -> k3 = [2 - ln 2 - 1, 0] = [0.3068528, 0], mean 0.1534264.
    # entropy [1, 3] -> mean 2.  loss = 0.5 * 0.1534264 - 0.1 * 2 = -0.1232868.
    new = f32([[np.log(0.5), np.log(0.5), 9.0]])
    ref = f32([[0.0, np.log(0.5), np.nan]])
    ent = f32([[1.0, 3.0, 99.0]])
    mask = np.array([[1, 1, 0]], bool)
    loss, m, g, gh = _vg(
        new, new, f32([0]), mask, logp_ref=ref, entropy=ent, kl_coef=0.5, entropy_coef=0.1
    )
    assert float(loss) == pytest.approx(-0.1232868, abs=1e-6)
    assert float(m["kl"]) == pytest.approx(0.1534264, abs=1e-6)
    assert float(m["entropy"]) == pytest.approx(2.0)
    assert float(m["pg_loss"]) == 0.0
    # d k3 / d new = 1 - exp(ref - new) = [-1, 0]; times kl_coef / N = 0.5 / 2.
    np.testing.assert_allclose(g, [[-0.25, 0, 0]], atol=1e-6)
    # d loss / d entropy = -entropy_coef / N at valid tokens.
    np.testing.assert_allclose(gh, [[-0.05, -0.05, 0]], atol=1e-7)


def test_grpo_vs_dapo_hand():
    # Group 0 rewards [1, 0, 0, 0] -> A = [sqrt3, -1/sqrt3, -1/sqrt3, -1/sqrt3]
    # (mean 1/4, std sqrt3/4); group 1 all equal -> A = 0 (and dropped by DAPO).
    # Valid lengths [4, 1, 1, 1 | 4, 4, 4, 4]; ratio 1.25 on sequence 0, 1 elsewhere.
    rewards = f32([[1, 0, 0, 0], [1, 1, 1, 1]])
    lengths = np.array([4, 1, 1, 1, 4, 4, 4, 4])
    mask = np.arange(4)[None, :] < lengths[:, None]
    old = np.full((8, 4), -1.5, np.float32)
    new = old.copy()
    new[0] += np.log(1.25)
    # GRPO (eps 0.2, sequence means): seq 0 is clipped to 1.2 * sqrt3, then
    # (1.2 sqrt3 - 3 / sqrt3 + 0 * 4) / 8 = 0.2 sqrt3 / 8 -> loss -0.0433013.
    loss, m = _grpo(new, old, rewards, mask)
    assert float(loss) == pytest.approx(-0.2 * SQ3 / 8, rel=1e-5)
    assert float(m["clip_frac_high"]) == pytest.approx(4 / 23)
    # DAPO (eps_high 0.28 does not clip 1.25; token sum over group 0 only):
    # (4 * 1.25 sqrt3 - 3 / sqrt3) / 7 = 4 sqrt3 / 7 -> loss -0.989743.
    loss, m = _dapo(new, old, rewards, mask)
    assert float(loss) == pytest.approx(-4 * SQ3 / 7, rel=1e-5)
    assert float(m["clip_frac_high"]) == 0.0
    assert float(m["valid_tokens"]) == 7
    assert float(m["kept_fraction"]) == 0.5
    # Without dynamic sampling the 16 zero-advantage tokens dilute the normaliser.
    loss, _ = _dapo(new, old, rewards, mask, dynamic_sampling=False)
    assert float(loss) == pytest.approx(-4 * SQ3 / 23, rel=1e-5)


def test_argument_errors():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="aggregation"):
        policy_loss(x, x, x[:, 0], x, aggregation="mean")
    with pytest.raises(ValueError, match="logp_ref"):
        policy_loss(x, x, x[:, 0], x, kl_coef=0.1)
    with pytest.raises(ValueError, match="entropy"):
        policy_loss(x, x, x[:, 0], x, entropy_coef=0.1)
    with pytest.raises(ValueError, match="mask"):
        policy_loss(x, x, x[:, 0], x[:, :2])
    with pytest.raises(ValueError, match="advantages"):
        policy_loss(x, x, np.zeros(3, np.float32), x)
    with pytest.raises(ValueError, match="flatten"):
        dapo_loss(x, x, np.zeros((1, 3), np.float32), x)


# --------------------------------------------------------------------------------------
# Properties


@PROP
@given(hnp.arrays(np.float32, (5,), elements=floats(-1e6, 1e6)), st.booleans())
def test_prop_equal_rewards_zero_advantage(values, scale):
    rewards = np.repeat(values[:, None], 7, axis=1)  # G = 7: the mean does not round-trip
    np.testing.assert_array_equal(_adv(rewards, scale=scale), 0.0)
    assert not np.asarray(_effective(rewards)).any()


@PROP
@given(hnp.arrays(np.float32, (4, 6), elements=floats(-10, 10)))
def test_prop_advantages_zero_mean_unit_std(rewards):
    r = rewards.astype(np.float64)
    spread = r.max(-1) - r.min(-1)
    std = r.std(-1)
    for scale in (True, False):
        a = np.asarray(_adv(rewards, scale=scale), np.float64)
        # Float error of the group mean, amplified by the 1 / std scaling.
        amp = np.maximum(1.0, np.abs(r).max(-1) / np.maximum(std, 1e-30)) if scale else 1.0
        tol = 1e-5 * np.maximum(amp, np.abs(r).max(-1))
        assert (np.abs(a.mean(-1)) <= tol).all()
        np.testing.assert_array_equal(a[spread == 0], 0.0)
    a = np.asarray(_adv(rewards), np.float64)
    wide = std > 1e-2
    np.testing.assert_allclose(a.std(-1)[wide], 1.0, rtol=1e-3)
    np.testing.assert_allclose(
        np.asarray(_adv(rewards, scale=False)), r - r.mean(-1, keepdims=True), atol=1e-5
    )


B, T = 4, 5


@PROP
@given(
    hnp.arrays(np.float32, (B, T), elements=floats(-6, 0)),
    hnp.arrays(np.float32, (B, T), elements=floats(-1, 1)),
    hnp.arrays(np.float32, (B,), elements=floats(-3, 3)),
    hnp.arrays(bool, (B, T)),
    floats(0.05, 0.5),
    floats(0.05, 0.5),
)
def test_prop_clip_bounds(old, log_ratio, adv, mask, eps_low, eps_high):
    new = old + log_ratio
    loss, m, g, _ = _vg(new, old, adv, mask, eps_low=eps_low, eps_high=eps_high)
    g = np.asarray(g)
    r = np.exp(new.astype(np.float64) - old)
    a = np.broadcast_to(adv[:, None], (B, T)).astype(np.float64)
    hi, lo = 1.0 + eps_high, 1.0 - eps_low
    n = max(mask.sum(), 1)
    margin = 1e-4
    # Where the clip binds (with a margin for float rounding) the gradient is exactly 0.
    binds_hi = mask & (a > 0) & (r > hi + margin)
    binds_lo = mask & (a < 0) & (r < lo - margin)
    np.testing.assert_array_equal(g[binds_hi | binds_lo], 0.0)
    np.testing.assert_array_equal(g[~mask], 0.0)
    # Elsewhere it is the unclipped -r A / N: the clip only ever removes gradient.
    near_hi = mask & (a > 0) & (r > hi - margin)
    near_lo = mask & (a < 0) & (r < lo + margin)
    free = mask & ~near_hi & ~near_lo
    np.testing.assert_allclose(g[free], (-r * a / n)[free], rtol=1e-4, atol=1e-7)
    # The binding metrics count exactly those tokens (up to the margin band).
    assert binds_hi.sum() - 1e-3 <= float(m["clip_frac_high"]) * n <= near_hi.sum() + 1e-3
    assert binds_lo.sum() - 1e-3 <= float(m["clip_frac_low"]) * n <= near_lo.sum() + 1e-3
    # The objective never exceeds either the clipped or the unclipped surrogate, and is one.
    obj = np.asarray(_objective(r.astype(np.float32), a.astype(np.float32), eps_low, eps_high))
    clipped = np.clip(r, lo, hi) * a
    assert (obj <= clipped + 1e-5).all() and (obj <= r * a + 1e-5).all()
    assert (np.isclose(obj, clipped, atol=1e-5) | np.isclose(obj, r * a, atol=1e-5)).all()
    # So the loss is at least the negated clipped surrogate, averaged over valid tokens.
    assert float(loss) >= -(clipped * mask).sum() / n - 1e-5


def _reference(new, old, adv, mask, ref, ent, el, eh, kl_coef, ent_coef, agg):
    """Plain float64 loops over sequences and tokens, straight from the definitions."""
    per_seq, total, count = [], 0.0, 0
    for b in range(new.shape[0]):
        terms = []
        for t in range(new.shape[1]):
            if not mask[b, t]:
                continue
            r = np.exp(float(new[b, t]) - float(old[b, t]))
            obj = min(r * adv[b], min(max(r, 1 - el), 1 + eh) * adv[b])
            d = float(ref[b, t]) - float(new[b, t])
            terms.append(-obj + kl_coef * (np.exp(d) - d - 1) - ent_coef * ent[b, t])
        total += sum(terms)
        count += len(terms)
        if terms:
            per_seq.append(sum(terms) / len(terms))
    if agg == "token":
        return total / count if count else 0.0
    return sum(per_seq) / len(per_seq) if per_seq else 0.0


@PROP
@given(st.integers(0, 2**31 - 1))
def test_prop_matches_reference(seed):
    rng = np.random.default_rng(seed)
    old = f32(rng.uniform(-5, 0, (B, T)))
    new = f32(old + rng.uniform(-0.6, 0.6, (B, T)))
    ref = f32(new + rng.uniform(-1, 1, (B, T)))
    ent = f32(rng.uniform(0, 3, (B, T)))
    adv = f32(rng.normal(size=B))
    lengths = rng.integers(0, T + 1, B)
    mask = np.arange(T)[None, :] < lengths[:, None]
    for agg in ("token", "sequence"):
        loss, _, _, _ = _vg(new, old, adv, mask, ref, ent, 0.2, 0.28, 0.05, 0.01, aggregation=agg)
        want = _reference(new, old, adv, mask, ref, ent, 0.2, 0.28, 0.05, 0.01, agg)
        assert float(loss) == pytest.approx(want, rel=1e-4, abs=1e-5)


PAD = 3
junk = st.floats(width=32, allow_nan=True, allow_infinity=True)


@PROP
@given(
    hnp.arrays(np.float32, (4, B, T), elements=floats(-3, 0)),
    hnp.arrays(np.float32, (B, T), elements=floats(-2, 2)),
    hnp.arrays(bool, (B, T)),
    hnp.arrays(np.float32, (5, B, T + PAD), elements=junk),
)
def test_prop_padding_invariance(vals, adv, mask, garbage):
    # new, old, ref, entropy, per-token advantages; the new policy stays near the old one.
    new, old, ref, ent = vals
    new = f32(old + 0.2 * (new + 1.5))
    clean = [np.where(mask, x, 0).astype(np.float32) for x in (new, old, ref, ent, adv)]
    dirty = [np.where(mask, x, j[:, :T]) for x, j in zip(clean, garbage, strict=True)]
    wide = [np.concatenate([x, j[:, T:]], 1) for x, j in zip(dirty, garbage, strict=True)]
    wide_mask = np.concatenate([mask, np.zeros((B, PAD), bool)], 1)

    def run(arrays, m, agg):
        n, o, r, h, a = arrays
        return _vg(n, o, a, m, r, h, 0.2, 0.28, 0.1, 0.01, aggregation=agg)

    for agg in ("token", "sequence"):
        base = run(clean, mask, agg)
        for arrays, m in ((dirty, mask), (wide, wide_mask)):
            loss, metrics, g, gh = run(arrays, m, agg)
            assert np.isfinite(float(loss))
            assert float(loss) == pytest.approx(float(base[0]), rel=1e-6, abs=1e-7)
            for k, v in metrics.items():
                assert float(v) == pytest.approx(float(base[1][k]), rel=1e-6, abs=1e-7), k
            for grad, grad0 in ((g, base[2]), (gh, base[3])):
                grad = np.asarray(grad)
                np.testing.assert_array_equal(grad[~m], 0.0)
                np.testing.assert_allclose(grad[:, :T], grad0, rtol=1e-6, atol=1e-9)


G = 3


@PROP
@given(
    hnp.arrays(np.float32, (6, G), elements=st.sampled_from([0.0, 1.0])),
    hnp.arrays(np.float32, (2, 6 * G, T), elements=floats(-2, 0)),
)
def test_prop_dynamic_sampling_drops_exactly_equal_groups(rewards, logps):
    keep = np.array([len(set(row.tolist())) > 1 for row in rewards])
    np.testing.assert_array_equal(_effective(rewards), keep)
    assert float(kept_fraction(rewards)) == pytest.approx(keep.mean())
    adv = np.asarray(_adv(rewards))
    np.testing.assert_array_equal(adv[~keep], 0.0)
    assert (np.abs(adv[keep]) > 0.1).all()  # 0/1 groups: every rollout gets signal
    # dapo_loss = token-level policy_loss with those groups' rows masked out.
    new, old = logps
    mask = np.ones((6 * G, T), bool)
    loss, m = _dapo(new, old, rewards, mask)
    want, _, _, _ = _vg(new, old, adv.reshape(-1), mask, group_mask=np.repeat(keep, G))
    assert float(loss) == pytest.approx(float(want), rel=1e-6, abs=1e-7)
    assert float(m["valid_tokens"]) == keep.sum() * G * T


# --------------------------------------------------------------------------------------
# Empty masks


@pytest.mark.parametrize("agg", ["token", "sequence"])
def test_all_zero_mask_jit_grad_finite(agg):
    bad = np.array([[np.nan, np.inf, -np.inf], [1e30, -1e30, 0.0]], np.float32)
    mask = np.zeros((2, 3), bool)
    loss, metrics, g, gh = _vg(
        bad, bad, f32([np.nan, 1.0]), mask, bad, bad, 0.2, 0.28, 0.1, 0.01, aggregation=agg
    )
    assert float(loss) == 0.0
    assert all(float(v) == 0.0 for v in metrics.values())
    np.testing.assert_array_equal(g, 0.0)
    np.testing.assert_array_equal(gh, 0.0)


def test_all_dropped_groups_grpo_dapo_finite():
    # Every group all-equal: DAPO drops everything, GRPO has zero advantage everywhere.
    rewards = f32([[1, 1], [0, 0]])
    new = np.full((4, 3), -1.0, np.float32)
    for fn in (_grpo, _dapo):
        (loss, metrics), g = jax.value_and_grad(fn, has_aux=True)(
            new, new - 0.3, rewards, np.ones((4, 3), bool)
        )
        assert float(loss) == 0.0
        assert all(np.isfinite(float(v)) for v in metrics.values())
        np.testing.assert_array_equal(g, 0.0)
        (loss, _), g = jax.value_and_grad(fn, has_aux=True)(
            new, new, rewards, np.zeros((4, 3), bool)
        )
        assert float(loss) == 0.0 and np.isfinite(np.asarray(g)).all()
