"""Traced programs kept between launches (``ecomjax.program_cache``): a loaded program
gives bit-identical rounds, and any change to what shapes the trace misses the entry."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ecomjax import program_cache
from ecomjax.runner import RunConfig, run


def _facts(res) -> tuple:
    """Everything a run reports except timings."""
    stats = {
        t: (dict(s.n), {d: v.tolist() for d, v in s.sums.items()}) for t, s in res.per_task.items()
    }
    return res.episodes, res.env_steps, stats, res.history


@pytest.fixture
def programs(monkeypatch, tmp_path):
    where = tmp_path / "programs"
    monkeypatch.setattr(program_cache, "directory", lambda: where)
    return where


@pytest.mark.parametrize("auto_reset", [0, 6])
def test_loaded_programs_play_bit_identical_rounds(monkeypatch, tmp_path, auto_reset):
    cfg = RunConfig(
        tasks="STATUS", batch=16, rounds=2, catalog_size=200, auto_reset=auto_reset, seed=3
    )
    plain = _facts(run(cfg))
    where = tmp_path / "programs"
    monkeypatch.setattr(program_cache, "directory", lambda: where)
    loaded = []
    real = program_cache.compile_program

    def spy(*a, **k):
        out = real(*a, **k)
        loaded.append(out[2])
        return out

    monkeypatch.setattr("ecomjax.runner.compile_program", spy)
    exported = _facts(run(cfg))
    entries = sorted(p.name for p in where.iterdir())
    assert entries and all(p.endswith(".jaxprog") for p in entries)
    again = _facts(run(cfg))
    n = len(loaded) // 2
    assert loaded[:n] == [False] * n and loaded[n:] == [True] * n
    assert sorted(p.name for p in where.iterdir()) == entries  # nothing new written
    assert plain == exported == again


def test_an_unreadable_entry_is_rebuilt(programs):
    def f(x, k):
        return x * 2, jax.random.fold_in(k, 1)

    args = (jnp.arange(4), jax.random.key(5))
    call, _, loaded = program_cache.compile_program("f", f, args, "s")
    assert not loaded
    (entry,) = list(programs.iterdir())
    entry.write_bytes(b"not a program")
    call2, _, loaded2 = program_cache.compile_program("f", f, args, "s")
    assert not loaded2
    out, out2 = call(*args), call2(*args)
    assert (np.asarray(out[0]) == np.arange(4) * 2).all()
    assert jax.random.key_data(out2[1]).tolist() == jax.random.key_data(out[1]).tolist()
    assert jnp.issubdtype(out2[1].dtype, jax.dtypes.prng_key)
    _, _, loaded3 = program_cache.compile_program("f", f, args, "s")
    assert loaded3


def test_the_key_covers_what_shapes_the_trace(monkeypatch):
    args = (jnp.zeros(3, jnp.int32), jax.random.key(0))
    base = program_cache.entry_key(args, "s", ())
    assert program_cache.entry_key(args, "s", ()) == base  # deterministic
    assert program_cache.entry_key(args, "t", ()) != base  # closed-over values
    assert program_cache.entry_key(args, "s", (0,)) != base  # donation
    assert program_cache.entry_key((jnp.zeros(4, jnp.int32), args[1]), "s", ()) != base
    assert program_cache.entry_key((jnp.zeros(3, jnp.float32), args[1]), "s", ()) != base
    unkeyed = (args[0], jax.random.key_data(args[1]))
    assert program_cache.entry_key(unkeyed, "s", ()) != base  # a typed key is not its data
    monkeypatch.setattr(program_cache, "_digest", ["another source tree"])
    assert program_cache.entry_key(args, "s", ()) != base


def test_source_digest_reads_the_kernels_too():
    roots = program_cache._source_roots()
    names = {p.name for r in roots for p in r.rglob("*.py")}
    assert "pool.py" in names and "runner.py" in names


def test_kept_jit_matches_jit_and_is_reused_across_instances(programs):
    def f(x, scale, k):
        return x * scale, jax.random.fold_in(k, scale)

    x, k = jnp.arange(5, dtype=jnp.float32), jax.random.key(2)
    want = jax.jit(f, static_argnums=(1,))(x, 3, k)
    first = program_cache.KeptJit("f", f, (1,))
    got = first(x, 3, k)
    entries = sorted(p.name for p in programs.iterdir())
    assert len(entries) == 1 and first._cache_size() == 1
    second = program_cache.KeptJit("f", f, (1,))  # as a second launch would make it
    again = second(x, 3, k)
    assert sorted(p.name for p in programs.iterdir()) == entries  # loaded, not rewritten
    for out in (got, again):
        assert (np.asarray(out[0]) == np.asarray(want[0])).all()
        assert (jax.random.key_data(out[1]) == jax.random.key_data(want[1])).all()
    second(x, 4, k)  # another static value is another program
    assert len(list(programs.iterdir())) == 2 and second._cache_size() == 2


def test_kept_jit_is_plain_jit_with_the_cache_off(monkeypatch):
    monkeypatch.setattr(program_cache, "directory", lambda: None)
    kept = program_cache.KeptJit("g", lambda x, n: x + n, (1,))
    assert int(kept(jnp.int32(1), 2)) == 3 and int(kept(1, 2)) == 3
    assert kept._cache_size() >= 1


def test_an_unwritable_directory_costs_only_the_kept_copy(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(program_cache, "directory", lambda: blocker / "programs")
    call, _, loaded = program_cache.compile_program("h", lambda x: x + 1, (jnp.int32(1),), "s")
    assert not loaded and int(call(jnp.int32(1))) == 2
