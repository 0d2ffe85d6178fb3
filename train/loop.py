"""Collect -> verify -> curriculum update -> DAPO/GRPO step as ONE jitted function.

PureJaxRL style: ``make_train_step`` returns a pure ``train_step(state, catalog,
schedule, it)`` that plays a whole batch of grouped episodes on device, scores them,
advances the curriculum and takes the gradient steps; a Python loop (``train``) iterates
it with a tqdm bar, JSONL logs and checkpoints. ``schedule`` is traced data
(``train.schedules``), so ``jax.vmap(train_step, (0, None, 0, None))`` runs many schedules
and seeds under one compile (``train.curriculum_study``).

Batch layout (static): per family of the task collection, ``q_f`` training groups of
``G`` episodes, then that family's held-out evaluation episodes (``eval_per`` per d in
``eval_d``). The G members of a group share (env, d, problem key), hence the same problem,
world and customer (SPEC §3); only the agent's sampling key differs. Evaluation episodes
use a key stream that training never draws from and take no part in the loss or the
curriculum. Each turn is one "token" of the losses in ``train.losses``: its log-prob is the
sum over the factors the policy sampled (``train.array_policy``).

    python -m ecomjax.train.loop --minutes 10 --out docs/study/learn_cart
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import serialization, struct

from ecomjax import constants as C
from ecomjax import curriculum as cur
from ecomjax.catalog.synthetic import generate_catalog
from ecomjax.catalog.types import Catalog
from ecomjax.core import reset, verify
from ecomjax.registry import family, resolve_tasks
from ecomjax.rollout import max_turns_for, step_batch
from ecomjax.types import EnvParams, RewardInfo, no_search, zero_reward
from ecomjax.verify import ALL_FAMILIES

from . import losses
from . import schedules as sch
from .array_policy import ALL_TOOLS, CART_TOOLS, Policy, PolicyConfig, PolicyInputs, Samples

F32 = jnp.float32
I32 = jnp.int32
# Key streams of the trainer, apart from each other and from the env's own streams.
TRAIN_PROBLEMS, EVAL_PROBLEMS, AGENT_KEYS, INIT = 0x7A1, 0x7A2, 0x7A3, 0x7A4
ENV_PARAMS = EnvParams()  # SPEC defaults
MAX_TURN_CAP = 24  # JOURNEY may run L_int x T_max turns; the policy answers at the cap


@dataclass(frozen=True)
class TrainConfig:
    """Static (hashable) trainer settings; the schedule and the seed are traced."""

    tasks: str = "C1"
    groups: int = 32  # training groups per step (split equally over the families)
    group_size: int = 8  # G rollouts per problem
    eval_per: int = 0  # held-out episodes per (family, d in eval_d) per step
    eval_d: tuple[int, ...] = (0, 4, 8, 12)
    loss: str = "dapo"  # or "grpo"
    # The group reward. SPEC §7's r_total makes "answer at once with an empty cart" (-0.60)
    # beat every failed longer try (about -0.7 to -0.9) by its efficiency term alone; from
    # scratch the policy then collapses to one-turn episodes before it finds a correct cart
    # (measured: mean turns 3.7 -> 1.0 within 5k episodes). r_task (-1 on a hard fail)
    # gives a failure the same reward however long it took.
    reward: str = "r_task"
    lr: float = 1e-3
    epochs: int = 2  # full-batch gradient steps per collected batch
    eps_low: float = 0.2
    eps_high: float = 0.28
    entropy_coef: float = 0.01
    max_grad_norm: float = 1.0
    turn_cap: int | None = None  # default: min(longest episode of the tasks, MAX_TURN_CAP)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    catalog_size: int = 1000
    catalog_seed: int = 42

    def __post_init__(self) -> None:
        if self.loss not in ("dapo", "grpo"):
            raise ValueError(f"loss must be 'dapo' or 'grpo', got {self.loss!r}")
        if self.reward not in ("r_total", "r_task"):
            raise ValueError(f"reward must be 'r_total' or 'r_task', got {self.reward!r}")
        if self.group_size < 1 or self.groups < 1 or self.epochs < 1:
            raise ValueError("groups, group_size and epochs must be positive")

    @property
    def families(self) -> tuple[str, ...]:
        return resolve_tasks(self.tasks)

    @property
    def cap(self) -> int:
        envs = tuple(family(f).env for f in self.families)
        full = max_turns_for(envs)
        return self.turn_cap if self.turn_cap is not None else min(full, MAX_TURN_CAP)


def default_policy(tasks: str) -> PolicyConfig:
    """CART alone needs no search; any other family gets the full tool set."""
    fams = resolve_tasks(tasks)
    return PolicyConfig(tools=CART_TOOLS if fams == ("CART",) else ALL_TOOLS)


@dataclass(frozen=True)
class Layout:
    """Static batch layout (numpy), see the module docstring."""

    plan: tuple[tuple[str, int], ...]  # (family, episodes) slices in order
    task: np.ndarray  # int32 [B], index into the collection
    train: np.ndarray  # bool [B]
    group: np.ndarray  # int32 [B], training group id, -1 for evaluation episodes
    eval_d: np.ndarray  # int32 [B], fixed d of evaluation episodes, -1 for training
    eval_slot: np.ndarray  # int32 [B], row of (task, eval d) cells, -1 for training
    train_idx: np.ndarray  # int32 [n_groups * G], group-major
    groups_per_task: np.ndarray  # int32 [n_tasks]

    @property
    def batch(self) -> int:
        return int(self.task.shape[0])

    @property
    def n_groups(self) -> int:
        return int(self.groups_per_task.sum())


def make_layout(cfg: TrainConfig) -> Layout:
    fams = cfg.families
    if cfg.groups < len(fams):
        raise ValueError(f"need at least one group per family: groups >= {len(fams)}")
    q, r = divmod(cfg.groups, len(fams))
    per = [q + (i < r) for i in range(len(fams))]
    g, ne = cfg.group_size, len(cfg.eval_d) * cfg.eval_per
    plan, task, train, group, ed, es = [], [], [], [], [], []
    gid = 0
    for i, (name, n) in enumerate(zip(fams, per, strict=True)):
        plan.append((name, n * g + ne))
        task += [i] * (n * g + ne)
        train += [True] * (n * g) + [False] * ne
        group += [gid + j // g for j in range(n * g)] + [-1] * ne
        gid += n
        ed += [-1] * (n * g) + [d for d in cfg.eval_d for _ in range(cfg.eval_per)]
        es += [-1] * (n * g) + [
            i * len(cfg.eval_d) + j for j in range(len(cfg.eval_d)) for _ in range(cfg.eval_per)
        ]
    group_arr = np.asarray(group, np.int32)
    order = np.argsort(np.where(group_arr < 0, np.iinfo(np.int32).max, group_arr), kind="stable")
    n_train = int((group_arr >= 0).sum())
    return Layout(
        plan=tuple(plan),
        task=np.asarray(task, np.int32),
        train=np.asarray(train, bool),
        group=group_arr,
        eval_d=np.asarray(ed, np.int32),
        eval_slot=np.asarray(es, np.int32),
        train_idx=order[:n_train].astype(np.int32),
        groups_per_task=np.asarray(per, np.int32),
    )


@struct.dataclass
class TrainState:
    params: dict
    opt_state: optax.OptState
    cstate: cur.CurriculumState
    key: jax.Array  # uint32 key data (raw, so checkpoints need no typed-key support)
    step: jax.Array  # int32, batches played
    episodes: jax.Array  # int32, training episodes played


@struct.dataclass
class Rollout:
    inputs: PolicyInputs  # [T, B, ...]
    samples: Samples  # [T, B, ...]
    logp: jax.Array  # float32 [T, B], joint log-prob of the turn under the behaviour policy
    live: jax.Array  # bool [T, B], the turn was played
    reward: RewardInfo  # [B]
    turns: jax.Array  # int32 [B]


def _optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
    return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), optax.adam(cfg.lr))


def _generate(plan, keys, d, catalog, env_params):
    """Problems per family slice, concatenated in plan order."""
    outs, a = [], 0
    for name, n in plan:
        gen = family(name).generate
        outs.append(
            jax.vmap(gen, (0, None, 0, None))(keys[a : a + n], catalog, d[a : a + n], env_params)
        )
        a += n
    return jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *outs)


def _score(plan, states, catalog, env_params) -> RewardInfo:
    """Each slice scored by its own family's verifier (JOURNEY needs all of them)."""
    outs, a = [], 0
    for name, n in plan:
        env = int(family(name).env)
        fams = ALL_FAMILIES if env == C.Env.JOURNEY else (env,)
        st = jax.tree_util.tree_map(lambda x, a=a, n=n: x[a : a + n], states)
        r = jax.vmap(lambda s, fams=fams: verify(catalog, s, env_params, fams))(st)
        ended = st.dialogue.termination != C.Termination.RUNNING
        z = jax.vmap(lambda _: zero_reward())(ended)
        outs.append(
            jax.tree_util.tree_map(
                lambda x, y: jnp.where(ended.reshape(ended.shape + (1,) * (x.ndim - 1)), x, y), r, z
            )
        )
        a += n
    return jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *outs)


def collect(
    policy: Policy,
    params,
    catalog: Catalog,
    env_params: EnvParams,
    plan,
    keys: jax.Array,
    d: jax.Array,
    agent_keys: jax.Array,
    cap: int,
) -> Rollout:
    """Plays every episode of the batch to its end (or the turn cap) and scores it."""
    b = keys.shape[0]
    problems = _generate(plan, keys, d, catalog, env_params)
    states, ts = jax.vmap(reset, (0, None, 0, None))(keys, catalog, problems, env_params)
    mem, h = jax.vmap(lambda _: policy.init_carry())(jnp.arange(b))
    present = tuple(sorted({int(family(n).env) for n, _ in plan}))
    act = jax.vmap(policy.act, (None, 0, 0, 0, None, 0, None))

    # One dry turn traces the per-turn output shapes for the buffers.
    _, _, inp0, smp0, _, _, _ = jax.eval_shape(
        lambda: act(params, mem, h, ts.observation, catalog, agent_keys, jnp.bool_(False))
    )
    buf = jax.tree_util.tree_map(lambda s: jnp.zeros((cap, *s.shape), s.dtype), (inp0, smp0))
    logp = jnp.zeros((cap, b), F32)
    live_buf = jnp.zeros((cap, b), bool)

    def cond(c):
        t, states = c[0], c[1]
        return (t < cap) & (states.dialogue.termination == C.Termination.RUNNING).any()

    def body(c):
        t, states, obs, mem, h, buf, logp, live_buf = c
        live = states.dialogue.termination == C.Termination.RUNNING
        k = jax.vmap(lambda kk: jax.random.fold_in(kk, t))(agent_keys)
        mem, h2, inp, smp, lp, _, action = act(params, mem, h, obs, catalog, k, t == cap - 1)
        h = jnp.where(live[:, None], h2, h)
        action = jax.lax.optimization_barrier(action)
        search = None if policy.cfg.searches else no_search((b,))
        states, ts = step_batch(catalog, states, action, env_params, live, present, search)
        buf = jax.tree_util.tree_map(
            lambda B, x: jax.lax.dynamic_update_index_in_dim(B, x, t, 0), buf, (inp, smp)
        )
        logp = jax.lax.dynamic_update_index_in_dim(logp, jnp.where(live, lp.sum(-1), 0.0), t, 0)
        live_buf = jax.lax.dynamic_update_index_in_dim(live_buf, live, t, 0)
        return t + 1, states, ts.observation, mem, h, buf, logp, live_buf

    carry = (I32(0), states, ts.observation, mem, h, buf, logp, live_buf)
    _, states, _, _, _, buf, logp, live_buf = jax.lax.while_loop(cond, body, carry)
    reward = _score(plan, states, catalog, env_params)
    return Rollout(
        inputs=buf[0],
        samples=buf[1],
        logp=logp,
        live=live_buf,
        reward=reward,
        turns=states.dialogue.turn,
    )


def replay(policy: Policy, params, inputs, samples, live):
    """Log-probs [T, B] and entropies [T, B] of stored turns under ``params`` (the GRU is
    re-run from the start of each episode)."""
    b = live.shape[1]
    h0 = jnp.zeros((b, policy.cfg.memory), F32)
    score = jax.vmap(policy.score, (None, 0, 0, 0))

    def body(h, x):
        inp, smp, lv = x
        h2, lp, ent = score(params, inp, h, smp)
        return jnp.where(lv[:, None], h2, h), (lp.sum(-1), ent)

    _, (lp, ent) = jax.lax.scan(body, h0, (inputs, samples, live))
    return lp, ent


def make_train_step(cfg: TrainConfig, env_params: EnvParams = ENV_PARAMS):
    """(policy, layout, init_state(key, catalog), train_step, batch_keys)."""
    pcfg = cfg.policy
    policy = Policy(pcfg)
    lay = make_layout(cfg)
    opt = _optimizer(cfg)
    n_tasks, g = len(cfg.families), cfg.group_size
    n_groups, cap = lay.n_groups, cfg.cap
    task = jnp.asarray(lay.task)
    is_train = jnp.asarray(lay.train)
    group = jnp.asarray(lay.group)
    train_idx = jnp.asarray(lay.train_idx)
    eval_d = jnp.asarray(lay.eval_d)
    eval_slot = jnp.asarray(lay.eval_slot)
    n_eval_cells = n_tasks * len(cfg.eval_d)
    b = lay.batch

    def init_state(key: jax.Array, catalog: Catalog) -> TrainState:
        k = jax.random.fold_in(key, INIT)
        gen = family(cfg.families[0]).generate
        prob = gen(k, catalog, I32(0), env_params)
        _, ts = reset(k, catalog, prob, env_params)
        params = policy.init_params(k, catalog, ts.observation)
        return TrainState(
            params=params,
            opt_state=opt.init(params),
            cstate=cur.init(n_tasks),
            key=jax.random.key_data(key),
            step=I32(0),
            episodes=I32(0),
        )

    def loss_fn(params, roll: Rollout, rewards):
        pick = lambda x: jnp.take(x, train_idx, axis=1)
        inputs = jax.tree_util.tree_map(pick, roll.inputs)
        samples = jax.tree_util.tree_map(pick, roll.samples)
        live = pick(roll.live)
        lp, ent = replay(policy, params, inputs, samples, live)
        args = (lp.T, pick(roll.logp).T, rewards, live.T)
        kw = dict(entropy=ent.T, entropy_coef=cfg.entropy_coef)
        if cfg.loss == "dapo":
            return losses.dapo_loss(*args, eps_low=cfg.eps_low, eps_high=cfg.eps_high, **kw)
        return losses.grpo_loss(*args, eps=cfg.eps_low, **kw)

    def batch_keys(state: TrainState, schedule: sch.Schedule):
        """(d [B], problem keys [B], agent keys [B]) of the next batch. A training group's
        members share d and the problem key; evaluation episodes draw held-out keys."""
        key = jax.random.wrap_key_data(state.key)
        step_key = jax.random.fold_in(key, state.step)
        gids = state.step * n_groups + jnp.maximum(group, 0)
        d_train = sch.sample(step_key, state.cstate, schedule, task, gids)
        d = jnp.where(is_train, d_train, eval_d)
        idx = state.step * b + jnp.arange(b)
        stream = lambda s: jax.vmap(lambda i: jax.random.fold_in(jax.random.fold_in(key, s), i))
        pkeys = jnp.where(
            is_train[:, None],
            jax.random.key_data(stream(TRAIN_PROBLEMS)(gids)),
            jax.random.key_data(stream(EVAL_PROBLEMS)(idx)),
        )
        return d, jax.random.wrap_key_data(pkeys), stream(AGENT_KEYS)(idx)

    def train_step(state: TrainState, catalog: Catalog, schedule: sch.Schedule, it):
        """One batch. ``it`` (untraced by vmap) only names the step for logging."""
        del it
        d, pkeys, akeys = batch_keys(state, schedule)
        roll = collect(policy, state.params, catalog, env_params, lay.plan, pkeys, d, akeys, cap)
        r = roll.reward
        correct = r.is_correct
        # Curriculum: training episodes only, in array order (SPEC §3).
        cstate = sch.update(state.cstate, schedule, task, d, correct, is_train)
        gstats = cur.group_stats(task, d, correct, group, is_train, n_tasks, C.D_MAX, n_groups)
        reward = (
            r.r_total if cfg.reward == "r_total" else jnp.where(r.hard_fail != 0, -1.0, r.r_task)
        )
        rewards = jnp.take(reward, train_idx).reshape(n_groups, g)
        correct_g = jnp.take(correct, train_idx).reshape(n_groups, g)

        def epoch(carry, _):
            params, opt_state = carry
            (loss, m), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, roll, rewards)
            updates, opt_state = opt.update(grads, opt_state, params)
            norm = jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in jax.tree_util.tree_leaves(grads)))
            m = {**m, "loss": loss, "grad_norm": norm}
            return (optax.apply_updates(params, updates), opt_state), m

        (params, opt_state), ms = jax.lax.scan(
            epoch, (state.params, state.opt_state), None, length=cfg.epochs
        )
        ms = jax.tree_util.tree_map(lambda x: x[0], ms)  # the first epoch is on-policy
        tf = is_train.astype(F32)
        per_task = lambda x: (
            jax.ops.segment_sum(x * tf, task, n_tasks)
            / jnp.maximum(jax.ops.segment_sum(tf, task, n_tasks), 1.0)
        )
        ef = (~is_train).astype(F32)
        cell = jnp.where(is_train, n_eval_cells, eval_slot)
        cell_mean = lambda x: (
            jax.ops.segment_sum(x * ef, cell, n_eval_cells + 1)[:n_eval_cells]
            / jnp.maximum(jax.ops.segment_sum(ef, cell, n_eval_cells + 1)[:n_eval_cells], 1.0)
        ).reshape(n_tasks, len(cfg.eval_d))
        lo, hi = sch.window(cstate, schedule)
        metrics = {
            "success": per_task(correct.astype(F32)),
            "r_total": per_task(r.r_total),
            "d_mean": per_task(d.astype(F32)),
            "hard_fail": per_task((r.hard_fail != 0).astype(F32)),
            "turns": per_task(roll.turns.astype(F32)),
            "lo": lo,
            "h": hi,
            "kept_fraction": losses.kept_fraction(rewards),
            "kept_fraction_correct": losses.kept_fraction(correct_g),
            "saturated": gstats.saturated,
            "starved": gstats.starved,
            "mixed": gstats.mixed,
            "eval_success": cell_mean(correct.astype(F32)),
            "eval_r_total": cell_mean(r.r_total),
            **{k: ms[k] for k in ("loss", "pg_loss", "entropy", "clip_frac", "grad_norm")},
        }
        new = TrainState(
            params=params,
            opt_state=opt_state,
            cstate=cstate,
            key=state.key,
            step=state.step + 1,
            episodes=state.episodes + n_groups * g,
        )
        return new, metrics

    return policy, lay, init_state, train_step, batch_keys


# --- checkpoints ---------------------------------------------------------------------------


def save_checkpoint(path: str | os.PathLike, state: TrainState) -> None:
    """flax msgpack of the whole state (params, optimizer, curriculum, key, counters),
    written atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(serialization.to_bytes(jax.device_get(state)))
    tmp.replace(path)


def load_checkpoint(path: str | os.PathLike, template: TrainState) -> TrainState:
    """Restore into ``template``'s structure (e.g. a fresh ``init_state``)."""
    state = serialization.from_bytes(template, Path(path).read_bytes())
    return jax.tree_util.tree_map(jnp.asarray, state)


# --- the host loop -------------------------------------------------------------------------


def to_jsonable(x):
    if isinstance(x, dict):
        return {k: to_jsonable(v) for k, v in x.items()}
    a = np.asarray(x)
    if a.ndim == 0:
        v = a.item()
        return round(v, 6) if isinstance(v, float) else v
    return np.round(a, 6).tolist() if a.dtype.kind == "f" else a.tolist()


def enable_compile_cache(root: str | os.PathLike | None = None) -> None:
    """The persistent XLA cache (``ecomjax.compile_cache``), unless the entry point already
    chose one (``ecomjax study --compile-cache`` / ``--no-compile-cache``)."""
    from ecomjax import compile_cache

    if compile_cache.configured():
        return
    where = Path(root) / ".jax_cache" if root else None
    compile_cache.enable(where, enabled=os.environ.get("ECOMJAX_JAX_CACHE") != "off")


@dataclass(frozen=True)
class Compiled:
    """A config's policy, layout and jitted functions vmapped over a leading run axis."""

    policy: Policy
    layout: Layout
    init: object  # (keys [R], catalog) -> TrainState [R]
    step: object  # (TrainState [R], catalog, Schedule [R], it) -> (TrainState, metrics)


@cache
def compiled(cfg: TrainConfig, env_params: EnvParams = ENV_PARAMS) -> Compiled:
    """One jitted, run-vmapped train step per config (cached, so a process compiles each
    shape once: a single run is a run axis of 1)."""
    policy, lay, init_state, train_step, _ = make_train_step(cfg, env_params)
    init = jax.jit(jax.vmap(init_state, (0, None)))
    stepf = jax.jit(jax.vmap(train_step, (0, None, 0, None)))
    return Compiled(policy, lay, init, stepf)


def train(
    cfg: TrainConfig,
    schedules: sch.Schedule | list[sch.Schedule],
    *,
    steps: int,
    seeds: int | list[int] = 0,
    names: list[str] | None = None,
    minutes: float | None = None,
    out: str | os.PathLike | None = None,
    ckpt_every: int | None = 50,
    resume: bool = False,
    progress: bool = True,
    catalog: Catalog | None = None,
    compiler_options: dict | None = None,
) -> list[dict]:
    """Runs R = len(schedules) runs side by side (vmapped) for up to ``steps`` batches, or
    until ``minutes`` of wall time (compile included) have passed.

    Returns one row per (step, run); with ``out`` also writes them to ``log.jsonl``, with
    ``config.json`` and ``checkpoint.msgpack`` (every ``ckpt_every`` steps and at the end;
    ``resume`` continues from it; ``ckpt_every=None`` writes none). ``compiler_options``
    go to XLA for the step (e.g. ``ecomjax.xla_options.FAST_COMPILE``)."""
    from tqdm import tqdm

    t_start = time.perf_counter()
    scheds = [schedules] if isinstance(schedules, sch.Schedule) else list(schedules)
    seeds = [seeds] * len(scheds) if isinstance(seeds, int) else list(seeds)
    if len(seeds) != len(scheds):
        raise ValueError(f"{len(scheds)} schedules but {len(seeds)} seeds")
    names = names or [f"run{i}" for i in range(len(scheds))]
    stacked = sch.stack(scheds)
    if catalog is None:
        catalog = generate_catalog(cfg.catalog_seed, cfg.catalog_size)
    comp = compiled(cfg)
    out = Path(out) if out else None
    keys = jax.vmap(jax.random.key)(jnp.asarray(seeds, jnp.uint32))
    # Block before compiling the step: an init still running while XLA compiles the step
    # deadlocked once on CPU (every thread idle, jaxlib 0.10.2, C8).
    state = jax.block_until_ready(comp.init(keys, catalog))
    ckpt = out / "checkpoint.msgpack" if out and ckpt_every is not None else None
    if resume and ckpt is not None and ckpt.exists():
        state = load_checkpoint(ckpt, state)
    t0 = time.perf_counter()
    fn = comp.step.lower(state, catalog, stacked, 0).compile(compiler_options)
    compile_s = time.perf_counter() - t0
    if out:
        out.mkdir(parents=True, exist_ok=True)
        meta = {
            "config": _cfg_json(cfg),
            "runs": [
                {"name": n, "seed": s, **to_jsonable(sch.as_dict(sc))}
                for n, s, sc in zip(names, seeds, scheds, strict=True)
            ],
            "compile_s": round(compile_s, 2),
        }
        (out / "config.json").write_text(json.dumps(meta, indent=1))
    log = open(out / "log.jsonl", "a" if resume else "w") if out else None  # noqa: SIM115
    rows: list[dict] = []
    start = int(np.asarray(state.step).reshape(-1)[0])
    bar = tqdm(total=steps, initial=start, desc="train", file=sys.stderr, disable=not progress)
    wall = 0.0
    try:
        for i in range(start, steps):
            t1 = time.perf_counter()
            state, m = fn(state, catalog, stacked, i)
            m = jax.device_get(m)
            wall += time.perf_counter() - t1
            episodes = np.asarray(state.episodes)
            for r, name in enumerate(names):
                row = {
                    "step": i + 1,
                    "run": name,
                    "seed": seeds[r],
                    "episodes": int(episodes[r]),
                    "wall_s": round(wall, 3),
                    **to_jsonable({k: v[r] for k, v in m.items()}),
                }
                rows.append(row)
                if log:
                    log.write(json.dumps(row) + "\n")
            if log:
                log.flush()
            bar.update(1)
            bar.set_postfix(
                succ=f"{np.mean(m['success']):.2f}",
                held_out=f"{np.mean(m['eval_success']):.2f}",
                h=f"{np.mean(m['h']):.1f}",
            )
            if ckpt is not None and (i + 1) % ckpt_every == 0:
                save_checkpoint(ckpt, state)
            if minutes is not None and time.perf_counter() - t_start > 60 * minutes:
                break
    finally:
        bar.close()
        if log:
            log.close()
    if ckpt is not None:
        save_checkpoint(ckpt, state)
    if out:
        meta["wall_s"] = round(wall, 2)
        meta["total_s"] = round(time.perf_counter() - t_start, 2)
        (out / "config.json").write_text(json.dumps(meta, indent=1))
    return rows


def _cfg_json(cfg: TrainConfig) -> dict:
    d = asdict(cfg)
    d["policy"]["tools"] = [C.Tool(t).name.lower() for t in cfg.policy.tools]
    return d


def main(argv: list[str] | None = None) -> int:
    """The learning check: CART from scratch, d ~ U{0..4} by default."""
    ap = argparse.ArgumentParser(prog="python -m ecomjax.train.loop", description=main.__doc__)
    ap.add_argument("--tasks", default="C1")
    ap.add_argument("--schedule", default="uniform", choices=sorted(sch.KINDS))
    ap.add_argument("--convention", default="default", choices=["default", "rlve"])
    ap.add_argument("--d-lo", type=int, default=0)
    ap.add_argument("--d-hi", type=int, default=4)
    ap.add_argument("--d-max", type=int, default=C.D_MAX, help="curriculum cap (adaptive)")
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--minutes", type=float, default=None, help="wall-time budget")
    ap.add_argument("--groups", type=int, default=32)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--eval-per", type=int, default=8)
    ap.add_argument("--eval-d", default="0,1,2,3,4")
    ap.add_argument("--loss", default="dapo", choices=["dapo", "grpo"])
    ap.add_argument("--reward", default="r_task", choices=["r_task", "r_total"])
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    enable_compile_cache()
    cfg = TrainConfig(
        tasks=args.tasks,
        groups=args.groups,
        group_size=args.group_size,
        eval_per=args.eval_per,
        eval_d=tuple(int(x) for x in args.eval_d.split(",")),
        loss=args.loss,
        reward=args.reward,
        lr=args.lr,
        epochs=args.epochs,
        policy=default_policy(args.tasks),
    )
    schedule = sch.make_schedule(
        args.schedule,
        convention=args.convention,
        d_lo=args.d_lo,
        d_hi=args.d_hi,
        d_max=args.d_max,
    )
    rows = train(
        cfg,
        schedule,
        steps=args.steps,
        seeds=args.seed,
        names=["learn"],
        minutes=args.minutes,
        out=args.out,
        resume=args.resume,
        progress=not args.no_progress,
    )
    if rows:
        last = rows[-1]
        keys = ("step", "episodes", "wall_s", "success", "eval_success", "h")
        print(json.dumps({k: last[k] for k in keys}))
    return 0


__all__ = [
    "Layout",
    "Rollout",
    "TrainConfig",
    "TrainState",
    "collect",
    "default_policy",
    "enable_compile_cache",
    "load_checkpoint",
    "make_layout",
    "make_train_step",
    "replay",
    "save_checkpoint",
    "train",
]

if __name__ == "__main__":
    raise SystemExit(main())
