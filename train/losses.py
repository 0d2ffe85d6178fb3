"""Policy-gradient losses for RL on LLM agents: GRPO and DAPO.

Shapes used throughout:

* ``B`` sequences (rollouts) of ``T`` tokens each; per-token arrays are ``[B, T]``.
* Rollouts come in groups of ``G`` answers to the same problem. Group-level arrays are
  ``[num_groups, G]`` and sequence ``b`` of a ``[B, T]`` batch is rollout ``b % G`` of group
  ``b // G`` (row-major flatten, ``B = num_groups * G``).
* ``mask`` is a ``[B, T]`` 0/1 (or bool) loss mask: 1 for agent tokens that the policy
  produced, 0 for padding, prompts and environment/customer turns.

Every function is pure and jittable (string and bool options are static) and safe to
differentiate: masked-out positions may hold any value, even ``inf`` or ``nan``, and never
reach the loss, the gradient or the metrics.
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
from jax import Array
from jax.typing import ArrayLike

Aggregation = Literal["token", "sequence"]
_AGGREGATIONS = ("token", "sequence")

__all__ = [
    "Aggregation",
    "dapo_loss",
    "effective_groups",
    "group_advantages",
    "grpo_loss",
    "kept_fraction",
    "overlong_penalty",
    "policy_loss",
    "ppo_clip_objective",
]


def _as_float(x: ArrayLike) -> Array:
    """At least float32: losses accumulate over many tokens, so bf16/int inputs are upcast."""
    x = jnp.asarray(x)
    return x.astype(jnp.promote_types(x.dtype, jnp.float32))


def _safe_div(num: Array, den: Array) -> Array:
    """num / den with 0 where den == 0, so empty masks give 0 rather than nan (grads too)."""
    ok = den != 0
    return jnp.where(ok, num / jnp.where(ok, den, 1), 0)


# --------------------------------------------------------------------------------------
# Rewards -> advantages


def effective_groups(rewards: ArrayLike) -> Array:
    """bool ``[...]``: True for groups whose ``G`` rewards (last axis) are not all equal.

    An all-equal group has zero GRPO advantage and so no policy gradient; DAPO's dynamic
    sampling keeps only the effective groups so they do not dilute the loss normaliser.
    A group of one rollout is never effective.
    """
    r = jnp.asarray(rewards)
    return jnp.any(r != r[..., :1], axis=-1)


def kept_fraction(rewards: ArrayLike) -> Array:
    """Fraction (float scalar) of the groups in ``rewards [..., G]`` that dynamic sampling
    keeps; 0 when there are no groups. Logged to watch the batch going stale as the policy
    saturates (every group all-correct or all-wrong)."""
    keep = effective_groups(rewards)
    if keep.size == 0:
        return jnp.zeros((), jnp.float32)
    return jnp.mean(keep.astype(jnp.float32))


def group_advantages(rewards: ArrayLike, eps: float = 1e-6, scale: bool = True) -> Array:
    """GRPO group-normalised advantages, same shape as ``rewards [..., G]``.

    ``A = (r - mean) / (std + eps)`` over the last (group) axis with the population std, or
    ``A = r - mean`` when ``scale`` is False (Dr. GRPO: scaling by std up-weights
    near-uniform groups). The group's own mean is the baseline, so no value network is
    needed. A group whose rewards are all equal gets exactly 0: float rounding in the mean
    would otherwise leave tiny residues that ``1 / eps`` blows up into spurious signal.
    """
    r = _as_float(rewards)
    centred = r - jnp.mean(r, axis=-1, keepdims=True)
    constant = ~effective_groups(r)[..., None]
    if scale:
        var = jnp.mean(jnp.square(centred), axis=-1, keepdims=True)
        pos = var > 0
        std = jnp.where(pos, jnp.sqrt(jnp.where(pos, var, 1)), 0)  # sqrt'(0) is inf
        centred = centred / (std + eps)
    return jnp.where(constant, jnp.zeros_like(centred), centred)


def overlong_penalty(lengths: ArrayLike, max_len: ArrayLike, cache_len: ArrayLike) -> Array:
    """DAPO soft overlong punishment, a float array shaped like ``lengths``; add it to the
    task reward.

    ``0`` for ``L <= max_len - cache_len``, a linear ramp ``(max_len - cache_len - L) /
    cache_len`` from 0 down to -1 over the last ``cache_len`` tokens, and ``-1`` beyond
    ``max_len``. The ramp tells the policy that length itself costs, instead of punishing a
    truncated but otherwise sound answer as hard as a wrong one. ``cache_len = 0`` is a hard
    cut-off.
    """
    static = isinstance(cache_len, int | float) and isinstance(max_len, int | float)
    if static and not 0 <= cache_len <= max_len:
        raise ValueError(f"need 0 <= cache_len <= max_len, got {cache_len}, {max_len}")
    n = jnp.asarray(lengths)
    start = max_len - cache_len  # exact in the lengths' own (integer) dtype
    ramp = _as_float(start - n) / jnp.where(jnp.asarray(cache_len) > 0, cache_len, 1)
    out = jnp.where(n <= start, 0.0, jnp.where(n <= max_len, ramp, -1.0))
    return out.astype(ramp.dtype)


# --------------------------------------------------------------------------------------
# Losses


def ppo_clip_objective(
    ratio: ArrayLike, advantages: ArrayLike, eps_low: float = 0.2, eps_high: float = 0.28
) -> Array:
    """Per-token clipped surrogate ``min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)``.

    The pessimistic min removes the incentive to move the ratio past the trust region: for
    A > 0 the objective is flat (zero gradient) above ``1 + eps_high``, for A < 0 below
    ``1 - eps_low``. A larger ``eps_high`` (DAPO clip-higher) lets low-probability tokens
    grow, which keeps entropy from collapsing.
    """
    ratio = jnp.asarray(ratio)
    advantages = jnp.asarray(advantages)
    clipped = jnp.minimum(jnp.maximum(ratio, 1.0 - eps_low), 1.0 + eps_high)
    return jnp.minimum(ratio * advantages, clipped * advantages)


def _aggregate(x: Array, w: Array, aggregation: str) -> Array:
    """Reduce per-token ``x [B, T]`` with 0/1 weights ``w``; see ``policy_loss``."""
    if aggregation == "token":
        return _safe_div(jnp.sum(w * x), jnp.sum(w))
    per_seq = _safe_div(jnp.sum(w * x, axis=-1), jnp.sum(w, axis=-1))
    n_seq = jnp.sum(jnp.sum(w, axis=-1) > 0).astype(x.dtype)
    return _safe_div(jnp.sum(per_seq), n_seq)


def _check_coef(coef: ArrayLike, value: ArrayLike | None, name: str, needs: str) -> None:
    if value is None and isinstance(coef, int | float) and coef != 0:
        raise ValueError(f"{name}={coef} needs {needs}")


def policy_loss(
    logp_new: ArrayLike,
    logp_old: ArrayLike,
    advantages: ArrayLike,
    mask: ArrayLike,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    aggregation: Aggregation = "token",
    group_mask: ArrayLike | None = None,
    logp_ref: ArrayLike | None = None,
    kl_coef: float = 0.0,
    entropy: ArrayLike | None = None,
    entropy_coef: float = 0.0,
) -> tuple[Array, dict[str, Array]]:
    """Clipped policy-gradient loss (to minimise) and a dict of scalar metrics.

    Args:
      logp_new: ``[B, T]`` log-probs of the sampled tokens under the policy being trained
        (the only input that carries gradient, besides ``entropy``).
      logp_old: ``[B, T]`` log-probs under the policy that sampled the rollouts.
      advantages: ``[B]`` per-sequence (broadcast over tokens) or ``[B, T]`` per-token.
      mask: ``[B, T]`` loss mask, nonzero for tokens that count.
      eps_low, eps_high: clip range ``[1 - eps_low, 1 + eps_high]`` of the ratio.
      aggregation: static. ``"token"`` (DAPO): sum over every valid token of the batch /
        number of valid tokens, so long answers weigh in proportion to their length.
        ``"sequence"`` (GRPO): mean over each sequence's valid tokens, then mean over the
        sequences that have any, so every answer weighs the same.
      group_mask: optional ``[B]``; sequences where it is 0 leave both the loss and its
        normaliser (DAPO dynamic sampling).
      logp_ref: optional ``[B, T]`` reference-policy log-probs for a KL penalty with the k3
        estimator ``exp(ref - new) - (ref - new) - 1`` (unbiased, always >= 0).
      kl_coef: weight of the KL penalty (needs ``logp_ref`` when nonzero).
      entropy: optional ``[B, T]`` per-token policy entropy for an exploration bonus.
      entropy_coef: weight of the bonus (``loss -= entropy_coef * entropy``).

    The KL and entropy terms are added per token and aggregated with the same
    ``aggregation`` as the surrogate (in GRPO the KL sits inside the per-sequence mean);
    with ``"token"`` that is the plain mean over valid tokens. ``logp_old``, ``logp_ref``
    and ``advantages`` are treated as constants (stop_gradient).

    Metrics (all scalars, token means over valid tokens whatever the aggregation):
    ``pg_loss`` (surrogate term alone, aggregated), ``kl`` (k3; 0 without ``logp_ref``),
    ``entropy`` (0 without ``entropy``), ``clip_frac_low`` / ``clip_frac_high`` (tokens
    where the lower clip binds, A < 0 and ratio < 1 - eps_low, resp. the upper one, A > 0
    and ratio > 1 + eps_high: their gradient is zero), ``clip_frac`` (their sum),
    ``ratio_mean`` and ``valid_tokens``. With no valid token the loss, its gradient and
    every metric are 0.
    """
    if aggregation not in _AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {_AGGREGATIONS}, got {aggregation!r}")
    _check_coef(kl_coef, logp_ref, "kl_coef", "logp_ref")
    _check_coef(entropy_coef, entropy, "entropy_coef", "entropy")

    logp_new = _as_float(logp_new)
    dtype = logp_new.dtype
    if logp_new.ndim != 2:
        raise ValueError(f"logp_new must be [B, T], got shape {logp_new.shape}")
    shape = logp_new.shape
    logp_old = jax.lax.stop_gradient(jnp.asarray(logp_old).astype(dtype))
    mask = jnp.asarray(mask)
    for name, arr in (("logp_old", logp_old), ("mask", mask)):
        if arr.shape != shape:
            raise ValueError(f"{name} has shape {arr.shape}, expected {shape}")

    valid = mask != 0
    if group_mask is not None:
        group_mask = jnp.asarray(group_mask)
        if group_mask.shape != shape[:1]:
            raise ValueError(f"group_mask has shape {group_mask.shape}, expected {shape[:1]}")
        valid = valid & (group_mask != 0)[:, None]
    w = valid.astype(dtype)

    def masked(x: ArrayLike, name: str) -> Array:
        """x [B, T] with invalid positions replaced by 0 before any arithmetic, so a pad's
        inf/nan can neither appear in the forward pass nor leak nan into the gradient."""
        x = jnp.asarray(x).astype(dtype)
        if x.shape != shape:
            raise ValueError(f"{name} has shape {x.shape}, expected {shape}")
        return jnp.where(valid, x, 0)

    adv = jax.lax.stop_gradient(jnp.asarray(advantages).astype(dtype))
    if adv.shape == shape[:1]:
        adv = jnp.broadcast_to(adv[:, None], shape)
    adv = masked(adv, "advantages")

    ratio = jnp.exp(masked(logp_new - logp_old, "log-ratio"))
    per_token = -ppo_clip_objective(ratio, adv, eps_low, eps_high)
    pg_loss = _aggregate(per_token, w, aggregation)

    def token_mean(x: Array) -> Array:
        return _safe_div(jnp.sum(w * x), jnp.sum(w))

    zero = jnp.zeros((), dtype)
    kl = ent = zero
    total = per_token
    if logp_ref is not None:
        ref = jax.lax.stop_gradient(jnp.asarray(logp_ref).astype(dtype))
        d = masked(ref - logp_new, "logp_ref")
        k3 = jnp.exp(d) - d - 1
        total = total + kl_coef * k3
        kl = token_mean(k3)
    if entropy is not None:
        h = masked(entropy, "entropy")
        total = total - entropy_coef * h
        ent = token_mean(h)
    loss = _aggregate(total, w, aggregation)

    clip_low = (adv < 0) & (ratio < 1.0 - eps_low)
    clip_high = (adv > 0) & (ratio > 1.0 + eps_high)
    metrics = {
        "pg_loss": pg_loss,
        "kl": kl,
        "entropy": ent,
        "clip_frac_low": token_mean(clip_low.astype(dtype)),
        "clip_frac_high": token_mean(clip_high.astype(dtype)),
        "ratio_mean": token_mean(ratio),
        "valid_tokens": jnp.sum(w),
    }
    metrics["clip_frac"] = metrics["clip_frac_low"] + metrics["clip_frac_high"]
    metrics = {k: jax.lax.stop_gradient(v) for k, v in metrics.items()}
    return loss, metrics


def _group_size(rewards: Array, batch: int) -> int:
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [num_groups, G], got shape {rewards.shape}")
    if rewards.size != batch:
        raise ValueError(f"rewards {rewards.shape} do not flatten to the batch of {batch}")
    return rewards.shape[1]


def grpo_loss(
    logp_new: ArrayLike,
    logp_old: ArrayLike,
    rewards: ArrayLike,
    mask: ArrayLike,
    *,
    eps: float = 0.2,
    adv_eps: float = 1e-6,
    logp_ref: ArrayLike | None = None,
    kl_coef: float = 0.0,
    entropy: ArrayLike | None = None,
    entropy_coef: float = 0.0,
) -> tuple[Array, dict[str, Array]]:
    """GRPO: group-normalised advantages, symmetric clip ``eps``, sequence aggregation.

    ``logp_new``, ``logp_old``, ``mask`` (and ``logp_ref``, ``entropy``) are
    ``[num_groups * G, T]``; ``rewards`` is ``[num_groups, G]`` and row ``b`` of the batch
    is ``rewards.reshape(-1)[b]``. Returns ``policy_loss``'s ``(loss, metrics)``.
    """
    rewards = jnp.asarray(rewards)
    _group_size(rewards, jnp.shape(logp_new)[0])
    adv = group_advantages(rewards, eps=adv_eps).reshape(-1)
    return policy_loss(
        logp_new,
        logp_old,
        adv,
        mask,
        eps_low=eps,
        eps_high=eps,
        aggregation="sequence",
        logp_ref=logp_ref,
        kl_coef=kl_coef,
        entropy=entropy,
        entropy_coef=entropy_coef,
    )


def dapo_loss(
    logp_new: ArrayLike,
    logp_old: ArrayLike,
    rewards: ArrayLike,
    mask: ArrayLike,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    adv_eps: float = 1e-6,
    dynamic_sampling: bool = True,
    logp_ref: ArrayLike | None = None,
    kl_coef: float = 0.0,
    entropy: ArrayLike | None = None,
    entropy_coef: float = 0.0,
) -> tuple[Array, dict[str, Array]]:
    """DAPO: clip-higher (``eps_low`` < ``eps_high``), token aggregation, dynamic sampling.

    Shapes as in ``grpo_loss``: per-token arrays ``[num_groups * G, T]``, ``rewards``
    ``[num_groups, G]`` (already including any ``overlong_penalty``). With
    ``dynamic_sampling`` the groups whose rewards are all equal are dropped from the loss
    and its token normaliser; refilling the batch with fresh groups is the sampler's job.
    Metrics add ``kept_fraction`` (of the groups).
    """
    rewards = jnp.asarray(rewards)
    g = _group_size(rewards, jnp.shape(logp_new)[0])
    adv = group_advantages(rewards, eps=adv_eps).reshape(-1)
    group_mask = jnp.repeat(effective_groups(rewards), g) if dynamic_sampling else None
    loss, metrics = policy_loss(
        logp_new,
        logp_old,
        adv,
        mask,
        eps_low=eps_low,
        eps_high=eps_high,
        aggregation="token",
        group_mask=group_mask,
        logp_ref=logp_ref,
        kl_coef=kl_coef,
        entropy=entropy,
        entropy_coef=entropy_coef,
    )
    metrics["kept_fraction"] = kept_fraction(rewards)
    return loss, metrics
