"""Curriculum rounds of B parallel episodes: the engine behind ``ecomjax run``.

Each round samples d per episode from each task's curriculum window, plays the episodes on
device, then feeds the terminal outcomes back to the curriculum. d is traced, so moving the
window never recompiles; the one compile per task is timed apart from steady state.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ecomjax import autoreset
from ecomjax import constants as C
from ecomjax import curriculum as cur
from ecomjax.agents import AGENTS
from ecomjax.agents.oracle import make_oracle
from ecomjax.catalog.sharded_emb import catalog_specs, place_catalog
from ecomjax.catalog.synthetic import generate_catalog
from ecomjax.catalog.types import Catalog
from ecomjax.distributed import barrier, peer_failures
from ecomjax.kernels.sharded import shard_map_compat
from ecomjax.program_cache import compile_program
from ecomjax.registry import family, resolve_tasks
from ecomjax.rollout import run_plan
from ecomjax.sharding import batch_mesh, shard_plan
from ecomjax.types import EnvParams


@dataclass
class RunConfig:
    tasks: str = "C8"
    agent: str = "oracle"
    batch: int = 4096
    rounds: int = 10
    difficulty: int | None = None  # a fixed d instead of the curriculum
    catalog_size: int = 1000
    catalog_seed: int = 42
    seed: int = 0
    convention: str = "default"  # or "rlve"
    # > 0: auto-reset rounds of this many steps (training throughput; ended lanes start
    # their next episode); 0: every round plays fresh episodes to the end (evaluation).
    auto_reset: int = 0
    # Split the catalog's embedding rows over the run's devices (processes x --devices)
    # instead of giving every device the whole table (catalog.sharded_emb).
    shard_catalog: bool = False
    search_chunk: int = 0  # > 0: EnvParams.search_chunk (rows per retrieval chunk)


@dataclass
class TaskStats:
    """Per (task, d) sums over terminal episodes."""

    n: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    sums: dict[int, np.ndarray] = field(default_factory=dict)

    def add(self, d: np.ndarray, cols: np.ndarray) -> None:
        for level in np.unique(d):
            sel = d == level
            self.n[int(level)] += int(sel.sum())
            prev = self.sums.get(int(level), np.zeros(cols.shape[1]))
            self.sums[int(level)] = prev + cols[sel].sum(0)


COLUMNS = ("success", "r_total", "r_task", "r_eff", "r_hall")


@dataclass
class RunResult:
    episodes: int
    env_steps: int
    seconds: float  # steady-state device time, compile excluded
    compile_s: float
    per_task: dict[str, TaskStats]
    curriculum: dict[str, tuple[int, int]]  # task -> (lo, hi) window at the end
    history: list[dict[str, tuple[int, int]]]  # window after every round
    # sha256 over every round's (task, d, outcome columns): equal digests, equal episodes
    digest: str = ""
    # the same over (task, d, success) only: integers, so equal across programs too (the
    # reward floats of two programs may differ in the last bit: docs/limits.md)
    outcome_digest: str = ""
    state: dict[str, list[int]] = field(default_factory=dict)  # final curriculum l, h, a, b
    processes: int = 1
    devices: int = 1  # over which the batch was split (every process's)

    @property
    def episodes_per_s(self) -> float:
        return self.episodes / max(self.seconds, 1e-9)

    def summary(self) -> dict:
        per_task = {}
        for task, st in self.per_task.items():
            n = sum(st.n.values())
            tot = sum(st.sums.values()) if st.sums else np.zeros(len(COLUMNS))
            per_task[task] = {
                "success_rate": float(tot[0] / max(n, 1)),
                "mean_reward": float(tot[1] / max(n, 1)),
                "h": int(self.curriculum[task][1]),
            }
        return {
            "episodes": self.episodes,
            "episodes_per_s": self.episodes_per_s,
            "env_steps_per_s": self.env_steps / max(self.seconds, 1e-9),
            "compile_s": self.compile_s,
            "per_task": per_task,
            "digest": self.digest,
            "outcome_digest": self.outcome_digest,
            "curriculum_state": self.state,
            "processes": self.processes,
            "devices": self.devices,
        }


def _reward_columns(r) -> jax.Array:
    """[B, 5] per-episode columns in ``TaskStats`` order."""
    cols = [r.is_correct.astype(jnp.float32), r.r_total, r.r_task, r.r_eff, r.r_hall]
    return jnp.stack(cols, -1)


@dataclass
class _Tally:
    """What both kinds of round report: per-task stats, counts, steady-state seconds and
    the curriculum window after every round."""

    tasks: tuple[str, ...]
    ccfg: cur.CurriculumConfig
    progress: Callable | None
    stats: dict[str, TaskStats] = field(init=False)
    episodes: int = 0
    steps: int = 0
    seconds: float = 0.0
    history: list[dict[str, tuple[int, int]]] = field(default_factory=list)
    cstate: cur.CurriculumState | None = None
    digest: hashlib._Hash = field(default_factory=hashlib.sha256)
    outcomes: hashlib._Hash = field(default_factory=hashlib.sha256)

    def __post_init__(self) -> None:
        self.stats = {t: TaskStats() for t in self.tasks}

    def timed(self, fn: Callable, *args):
        """``fn(*args)`` blocked until ready; only this time counts as steady state."""
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        self.seconds += time.perf_counter() - t0
        return out

    def record(self, rnd: int, cstate, task: np.ndarray, d, cols, n_steps) -> None:
        """One round's completed episodes: ``task`` indexes ``tasks`` per row."""
        for x, dtype in ((task, np.int32), (d, np.int32), (cols, np.float32)):
            self.digest.update(np.ascontiguousarray(np.asarray(x), dtype).tobytes())
        success = np.asarray(cols)[:, 0] > 0
        for x, dtype in ((task, np.int32), (d, np.int32), (success, np.int8)):
            self.outcomes.update(np.ascontiguousarray(np.asarray(x), dtype).tobytes())
        self.cstate = cstate
        d, cols = np.asarray(d), np.asarray(cols, np.float64)
        for i, name in enumerate(self.tasks):
            sel = task == i
            self.stats[name].add(d[sel], cols[sel])
        self.episodes += int(task.shape[0])
        self.steps += int(n_steps)
        lo, hi = cur.window(cstate, self.ccfg)
        self.history.append({t: (int(lo[i]), int(hi[i])) for i, t in enumerate(self.tasks)})
        if self.progress is not None:
            self.progress(rnd, self.history[-1])

    def result(self, compile_s: float, devices: int = 1) -> RunResult:
        return RunResult(
            episodes=self.episodes,
            env_steps=self.steps,
            seconds=self.seconds,
            compile_s=compile_s,
            per_task=self.stats,
            curriculum=self.history[-1],
            history=self.history,
            digest=self.digest.hexdigest(),
            outcome_digest=self.outcomes.hexdigest(),
            state={
                f.name: np.asarray(getattr(self.cstate, f.name)).tolist()
                for f in dataclasses.fields(self.cstate)
            }
            if self.cstate is not None
            else {},
            processes=jax.process_count(),
            devices=devices,
        )


def _compiled(
    name: str, fn, args: tuple, static: str, donate=(), mesh: Mesh | None = None, out=None
) -> tuple[Callable, float]:
    """``fn`` compiled for ``args`` (through the program cache when an entry point turned
    it on), and the seconds it took (reported apart from the steady state). Over a
    ``mesh`` the outputs are placed by ``out`` (default: every output replicated), and the
    program is not kept (jax.export's entries are single-process)."""
    if mesh is None:
        program, seconds, _ = compile_program(name, fn, args, static, donate)
        return program, seconds
    t0 = time.perf_counter()
    out = NamedSharding(mesh, PartitionSpec()) if out is None else out
    jitted = jax.jit(fn, out_shardings=out, donate_argnums=donate)
    compiled = jitted.lower(*args).compile()
    return compiled, time.perf_counter() - t0


def _static(plan, agent, params: EnvParams, ccfg, mode: str, *extra) -> str:
    """What a round closes over, for the program cache's key."""
    return repr((tuple(plan), agent.name, params, ccfg, mode, extra))


WHOLE = PartitionSpec()  # a catalog in_spec: every leaf whole on every device


def _player(plan, agent, params: EnvParams, mesh: Mesh | None, spec=WHOLE) -> Callable:
    """``(catalog, keys, d) -> ([B, 5] outcome columns in plan order, env steps)``.

    Over a mesh, device j plays part j of every slice (``sharding.shard_plan``), and the
    columns are then all-gathered: the round's one collective (20 bytes an episode), so
    every process updates the curriculum with the whole batch in plan order. ``spec`` is
    the catalog's in_spec (``sharded_emb.catalog_specs``: whole, or ``emb`` split)."""

    if mesh is None:

        def play(catalog, keys, d):
            res = run_plan(catalog, keys, d, plan, agent, params)
            return _reward_columns(res.state.reward), res.env_steps

        return play
    axis = mesh.axis_names[0]
    local, perm = shard_plan(plan, mesh.shape[axis])
    inv = np.argsort(perm)

    def per_device(catalog, keys, d):
        res = run_plan(catalog, keys, d, local, agent, params)
        return _reward_columns(res.state.reward), jax.lax.psum(res.env_steps, axis)

    sharded = shard_map_compat(
        per_device,
        mesh,
        in_specs=(spec, PartitionSpec(axis), PartitionSpec(axis)),
        out_specs=(PartitionSpec(axis), PartitionSpec()),
    )

    def play(catalog, keys, d):
        cols, steps = sharded(catalog, keys[perm], d[perm])
        # all-gather
        cols = jax.lax.with_sharding_constraint(cols, NamedSharding(mesh, PartitionSpec()))
        return cols[inv], steps

    return play


def _make_round(
    plan, agent, params: EnvParams, cfg, mode: str, mesh: Mesh | None = None, spec=WHOLE
):
    """One round over a mixed batch: sample d per episode from its task's window, play
    every slice at once, update every task's curriculum. One compile for all tasks. The
    catalog is an argument, not a closure constant, so XLA cannot constant-fold
    catalog-wide work at compile time (minutes at N = 100k). Over a ``mesh`` every process
    samples the same d (same window, same keys) and updates with the same columns."""
    task_ids = np.concatenate([np.full(n, i, np.int32) for i, (_, n) in enumerate(plan)])
    batch = int(task_ids.shape[0])
    play = _player(plan, agent, params, mesh, spec)

    def round_fn(catalog, cstate, key, first_episode, fixed_d, use_fixed):
        idx = first_episode + jnp.arange(batch, dtype=jnp.int32)
        tasks = jnp.asarray(task_ids)
        sampled = cur.sample(key, cstate, tasks, idx, cfg)
        d = jnp.where(use_fixed, fixed_d, sampled)
        keys = jax.vmap(lambda e: jax.random.fold_in(key, e))(idx)
        cols, steps = play(catalog, keys, d)
        cstate = cur.update(cstate, tasks, d, cols[:, 0] > 0, None, cfg, mode=mode)
        return cstate, d, cols, steps

    return round_fn


def _boxed(lanes: autoreset.Lanes) -> autoreset.Lanes:
    """A device's lanes with its scalars given a leading axis of 1, so every leaf of the
    mesh-wide lanes is split on axis 0 (the counter and clock hands are per device)."""
    return lanes.replace(next_episode=lanes.next_episode[None], hand=lanes.hand[None])


def _unboxed(lanes: autoreset.Lanes) -> autoreset.Lanes:
    return lanes.replace(next_episode=lanes.next_episode[0], hand=lanes.hand[0])


def _autoreset_init(plan, agent, params: EnvParams, mesh: Mesh | None, spec=WHOLE) -> Callable:
    """``catalog -> lanes``; over a mesh each device holds the lanes of its local plan."""
    if mesh is None:
        return lambda catalog: autoreset.init(catalog, plan, agent, params)
    axis = mesh.axis_names[0]
    local, _ = shard_plan(plan, mesh.shape[axis])
    return shard_map_compat(
        lambda catalog: _boxed(autoreset.init(catalog, local, agent, params)),
        mesh,
        in_specs=(spec,),
        out_specs=PartitionSpec(axis),
    )


def _make_autoreset_round(
    plan,
    agent,
    params: EnvParams,
    cfg,
    mode: str,
    steps: int,
    mesh: Mesh | None = None,
    spec=WHOLE,
):
    """One auto-reset round: ``steps`` steps of every lane; every episode completed in them
    updates the curriculum in completion order. Episodes starting inside the round draw d
    from the window as it stood at the round's start.

    Over a mesh of S devices, device j steps its own lanes (part j of every slice, as in
    ``sharding.shard_plan``) with its own recycle slots and id counter (ids ``c * S + j``),
    with no communication inside the round; the completions are then gathered, ordered by
    (step, device, slot), and every process updates the curriculum with all of them."""

    def sampler(cstate, run_key, fixed_d, use_fixed):
        def sample_d(ids, task):
            return jnp.where(use_fixed, fixed_d, cur.sample(run_key, cstate, task, ids, cfg))

        return sample_d

    def advance(catalog, cstate, lanes, run_key, fixed_d, use_fixed):
        sample_d = sampler(cstate, run_key, fixed_d, use_fixed)
        return autoreset.advance(catalog, lanes, run_key, plan, agent, params, sample_d, steps)

    if mesh is not None:
        axis = mesh.axis_names[0]
        n = mesh.shape[axis]
        local, _ = shard_plan(plan, n)
        width = sum(e[1] for e in local)

        def per_device(catalog, cstate, lanes, run_key, fixed_d, use_fixed):
            j = jax.lax.axis_index(axis)
            sample_d = sampler(cstate, run_key, fixed_d, use_fixed)
            lanes, done, taken = autoreset.advance(
                catalog, _unboxed(lanes), run_key, local, agent, params, sample_d, steps,
                ids_of=lambda c: c * n + j,
            )  # fmt: skip
            done = done.replace(lane=done.lane + j * width)  # lanes as the mesh lays them out
            return _boxed(lanes), done, jax.lax.psum(taken, axis)

        rep = PartitionSpec()
        advance = shard_map_compat(
            per_device,
            mesh,
            in_specs=(spec, rep, PartitionSpec(axis), rep, rep, rep),
            out_specs=(PartitionSpec(axis), PartitionSpec(None, axis), rep),
        )

    def round_fn(catalog, cstate, lanes, run_key, fixed_d, use_fixed):
        lanes, done, n_steps = advance(catalog, cstate, lanes, run_key, fixed_d, use_fixed)
        flat = jax.tree_util.tree_map(lambda x: x.reshape((-1,) + x.shape[2:]), done)
        r = flat.reward
        cstate = cur.update(cstate, flat.task, flat.d, r.is_correct, flat.valid, cfg, mode=mode)
        cols = _reward_columns(r)
        return cstate, lanes, flat.valid, flat.task, flat.d, cols, n_steps

    return round_fn


def make_plan(tasks: tuple[str, ...], batch: int) -> tuple[tuple[str, int], ...]:
    """Fixed per-batch quotas (SPEC §3 allows them): an equal share per task, the
    remainder to the first tasks."""
    q, r = divmod(batch, len(tasks))
    return tuple((t, q + (i < r)) for i, t in enumerate(tasks) if q + (i < r) > 0)


def _mesh_for_run(mesh: Mesh | None, plan, n_tasks: int, batch: int) -> Mesh | None:
    """The mesh a run plays over: the one given, else every process's devices when this
    process is one of several, else none (one device, today's program)."""
    if mesh is None and jax.process_count() > 1:
        mesh = batch_mesh()
    if mesh is not None:
        s = mesh.shape[mesh.axis_names[0]]
        if any(n % s for _, n in plan):
            raise ValueError(
                f"over {s} devices the batch must be a multiple of {s * n_tasks} "
                f"(devices x tasks), so every device plays an equal part of every task; "
                f"got {batch}"
            )
    return mesh


def run(
    cfg: RunConfig,
    progress: Callable | None = None,
    catalog: Catalog | None = None,
    mesh: Mesh | None = None,
) -> RunResult:
    """Plays ``cfg.rounds`` rounds of ``cfg.batch`` episodes per task.

    In a multi-process run (``ecomjax.distributed``) every process calls this with the
    same arguments; the batch is split over all processes' devices and every process
    returns the same result. ``mesh`` splits it over this process's devices instead."""
    tasks = resolve_tasks(cfg.tasks)
    if cfg.agent not in AGENTS:
        raise ValueError(f"unknown agent {cfg.agent!r}; choose from {sorted(AGENTS)}")
    if cfg.batch < 1 or cfg.rounds < 1:
        raise ValueError("batch and rounds must be positive")
    if cfg.auto_reset < 0:
        raise ValueError("auto_reset must be 0 (off) or a positive number of steps")
    if cfg.difficulty is not None and not 0 <= cfg.difficulty <= C.D_MAX:
        raise ValueError(f"difficulty must lie in 0..{C.D_MAX}")
    ccfg = (
        cur.CurriculumConfig.rlve() if cfg.convention == "rlve" else cur.CurriculumConfig.default()
    )
    mode = "batch" if cfg.convention == "rlve" else "stream"
    catalog = (
        catalog if catalog is not None else generate_catalog(cfg.catalog_seed, cfg.catalog_size)
    )
    if cfg.search_chunk < 0:
        raise ValueError("search_chunk must be 0 (the default) or a positive row count")
    params = EnvParams(search_chunk=cfg.search_chunk) if cfg.search_chunk else EnvParams()
    agent = AGENTS[cfg.agent]
    if cfg.agent == "oracle":  # only the plans of the families in this run
        agent = make_oracle(tuple(family(t).env for t in tasks))
    if cfg.batch < len(tasks):
        raise ValueError(f"batch {cfg.batch} is smaller than the number of tasks {len(tasks)}")
    plan = make_plan(tasks, cfg.batch)
    mesh = _mesh_for_run(mesh, plan, len(tasks), cfg.batch)
    if cfg.shard_catalog and mesh is None:
        raise ValueError(
            "shard_catalog splits the catalog over the run's devices: run several processes "
            "(ecomjax.distributed) or give one process several (--devices K)"
        )
    if mesh is not None:  # every process holds the same catalog (a function of its seed)
        catalog = place_catalog(catalog, mesh, mesh.axis_names[0] if cfg.shard_catalog else None)
    spec = catalog_specs(catalog, catalog.emb_axis)
    if cfg.auto_reset:
        return _run_autoreset(
            cfg, tasks, plan, agent, params, ccfg, mode, catalog, progress, mesh, spec
        )
    cstate = cur.init(len(tasks))
    tally = _Tally(tasks, ccfg, progress)
    fn, compile_s = _compiled(
        "round",
        _make_round(plan, agent, params, ccfg, mode, mesh, spec),
        (catalog, cstate, jax.random.key(0), jnp.int32(0), jnp.int32(0), jnp.bool_(False)),
        _static(plan, agent, params, ccfg, mode),
        mesh=mesh,
    )
    barrier("ecomjax-run-compiled")  # every process compiled before the first collective
    base = jax.random.key(cfg.seed)
    fixed, use_fixed = jnp.int32(cfg.difficulty or 0), jnp.bool_(cfg.difficulty is not None)
    task = np.concatenate([np.full(n, i) for i, (_, n) in enumerate(plan)])
    for rnd in range(cfg.rounds):
        key = jax.random.fold_in(base, rnd)
        first = jnp.int32(rnd * cfg.batch)
        with peer_failures():
            out = tally.timed(fn, catalog, cstate, key, first, fixed, use_fixed)
        cstate, d, cols, n_steps = out
        tally.record(rnd, cstate, task, d, cols, n_steps)
    return tally.result(compile_s, 1 if mesh is None else mesh.size)


def _run_autoreset(
    cfg, tasks, plan, agent, params, ccfg, mode, catalog, progress, mesh: Mesh | None, spec
) -> RunResult:
    """``run`` with auto-reset rounds: lanes carry over between rounds, so every round
    counts the episodes completed in its ``cfg.auto_reset`` steps (the first round starts
    from empty lanes). Episodes still running after the last round are not counted. Over a
    mesh the lanes stay split over the devices between rounds."""
    cstate = cur.init(len(tasks))
    tally = _Tally(tasks, ccfg, progress)
    round_fn = _make_autoreset_round(plan, agent, params, ccfg, mode, cfg.auto_reset, mesh, spec)
    run_key = jax.random.key(cfg.seed)
    fixed, use_fixed = jnp.int32(cfg.difficulty or 0), jnp.bool_(cfg.difficulty is not None)
    static = _static(plan, agent, params, ccfg, mode, cfg.auto_reset)
    split = rep = None
    if mesh is not None:
        split = NamedSharding(mesh, PartitionSpec(mesh.axis_names[0]))
        rep = NamedSharding(mesh, PartitionSpec())
    init, init_s = _compiled(
        "autoreset-init",
        _autoreset_init(plan, agent, params, mesh, spec),
        (catalog,),
        static,
        mesh=mesh,
        out=split,
    )
    lanes = init(catalog)
    fn, compile_s = _compiled(
        "autoreset-round",
        round_fn,
        (catalog, cstate, lanes, run_key, fixed, use_fixed),
        static,
        donate=(2,),
        mesh=mesh,
        out=None if mesh is None else (rep, split, rep, rep, rep, rep, rep),
    )
    barrier("ecomjax-run-compiled")  # every process compiled before the first collective
    for rnd in range(cfg.rounds):
        with peer_failures():
            out = tally.timed(fn, catalog, cstate, lanes, run_key, fixed, use_fixed)
        cstate, lanes, valid, task, d, cols, n_steps = out
        ok = np.asarray(valid)
        rows = (np.asarray(x)[ok] for x in (task, d, cols))
        tally.record(rnd, cstate, *rows, n_steps)
    return tally.result(init_s + compile_s, 1 if mesh is None else mesh.size)
