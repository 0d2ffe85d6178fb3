"""Traced programs kept between launches, beside JAX's persistent compilation cache.

JAX's cache skips XLA's compile, but a second launch still traces and lowers in Python
before it can look anything up, and for a CART round that was most of a warm start
(benchmarks/README.md, start-up). This cache stores
the lowered program itself (``jax.export``, StableHLO), so a warm launch deserialises it
and goes straight to the compilation cache.

An entry is keyed on everything that shapes the trace: the source of ``ecomjax`` and its
kernels, the JAX version, backend and devices, the x64 and matmul-precision settings, the
argument tree with every leaf's shape and dtype (static pytree fields included), the
donated arguments, and a caller's description of the values it closes over (tasks, agent,
params, curriculum config). A stale, foreign or unreadable entry is never used: it is
rebuilt. The directory is ``programs/`` inside the compilation cache's, and is off when
that is.

Programs run on flat argument lists (typed PRNG keys as raw key data), so no pytree type
needs an export serialiser; the output tree is stored beside the program (pickled: the
cache directory is trusted like JAX's own).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from ecomjax import compile_cache, registry

FORMAT = 1  # bump when the entry layout changes


def directory() -> Path | None:
    """Where programs are kept: ``<compilation cache>/programs``, or None when off. Off
    too while a family outside the package is registered (``registry.register``): its code
    is not in the source digest that keys an entry. JAX's cache keys on the program itself,
    so it stays on."""
    base = compile_cache.chosen()
    if base is None or registry.next_env() > len(registry.BUILTIN):
        return None
    return base / "programs"


def _source_roots() -> list[Path]:
    import ecomjax

    return [Path(p) for p in ecomjax.__path__]


_digest: list[str] = []


def source_digest() -> str:
    """sha256 of every Python file of the core, its kernels included (once per process)."""
    if not _digest:
        h = hashlib.sha256()
        for root in _source_roots():
            for path in sorted(root.rglob("*.py")):
                h.update(str(path.relative_to(root)).encode() + b"\0")
                h.update(path.read_bytes() + b"\0")
        _digest.append(h.hexdigest())
    return _digest[0]


def _is_key(x: Any) -> bool:
    dtype = getattr(x, "dtype", None)
    return dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key)


def _raw(leaves: list, keys: list) -> list:
    return [jax.random.key_data(x) if k else x for x, k in zip(leaves, keys, strict=True)]


def _typed(leaves: list, impls: list) -> list:
    return [
        jax.random.wrap_key_data(x, impl=i) if i else x for x, i in zip(leaves, impls, strict=True)
    ]


def _impls(leaves: list) -> list[str | None]:
    return [str(jax.random.key_impl(x)) if _is_key(x) else None for x in leaves]


def entry_key(args: tuple, static: str, donate_argnums: tuple[int, ...]) -> str:
    leaves, tree = jax.tree_util.tree_flatten(args)
    avals = [
        (tuple(jnp.shape(x)), str(jnp.result_type(x)), i)
        for x, i in zip(leaves, _impls(leaves), strict=True)
    ]
    devices = [(d.platform, d.device_kind) for d in jax.devices()]
    parts = (
        FORMAT,
        source_digest(),
        jax.__version__,
        jax.default_backend(),
        devices,
        bool(jax.config.jax_enable_x64),
        str(jax.config.jax_default_matmul_precision),
        str(tree),
        avals,
        tuple(donate_argnums),
        static,
    )
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _export(fn: Callable, args: tuple) -> tuple[bytes, Any, list]:
    leaves, in_tree = jax.tree_util.tree_flatten(args)
    impls = _impls(leaves)
    box: dict[str, Any] = {}

    def flat(*raw):
        out = fn(*jax.tree_util.tree_unflatten(in_tree, _typed(list(raw), impls)))
        out_leaves, box["tree"] = jax.tree_util.tree_flatten(out)
        box["impls"] = _impls(out_leaves)
        return _raw(out_leaves, box["impls"])

    exported = jax.export.export(jax.jit(flat))(*_raw(leaves, impls))
    return bytes(exported.serialize()), box["tree"], box["impls"]


def _write(path: Path, entry: tuple) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        pickle.dump(entry, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)  # readers see a whole entry or none


def _read(path: Path) -> tuple | None:
    try:
        with open(path, "rb") as f:
            blob, tree, impls = pickle.load(f)
        return jax.export.deserialize(bytearray(blob)), tree, impls
    except Exception:  # a truncated or foreign entry: rebuild it
        return None


def compile_program(
    name: str,
    fn: Callable,
    args: tuple,
    static: str,
    donate_argnums: tuple[int, ...] = (),
    compiler_options: dict[str, Any] | None = None,
) -> tuple[Callable, float, bool]:
    """``fn`` compiled for ``args``: (callable, seconds to get it, whether it was loaded).

    ``static`` must describe every value ``fn`` closes over that changes its trace. With
    the cache off this is ``jax.jit(fn).lower(*args).compile()``."""
    t0 = time.perf_counter()
    where = directory()
    if where is None:
        lowered = jax.jit(fn, donate_argnums=donate_argnums).lower(*args)
        return lowered.compile(compiler_options), time.perf_counter() - t0, False
    path = where / f"{name}-{entry_key(args, static, donate_argnums)[:40]}.jaxprog"
    entry = _read(path) if path.exists() else None
    loaded = entry is not None
    if entry is None:
        blob, tree, impls = _export(fn, args)
        # A read-only or full cache directory costs only the next launch's reuse.
        with contextlib.suppress(OSError):
            _write(path, (blob, tree, impls))
        entry = jax.export.deserialize(bytearray(blob)), tree, impls
    exported, out_tree, out_impls = entry
    leaves, _ = jax.tree_util.tree_flatten(args)
    in_impls = _impls(leaves)
    starts = [0]
    for a in args:
        starts.append(starts[-1] + len(jax.tree_util.tree_leaves(a)))
    donated = tuple(i for a in donate_argnums for i in range(starts[a], starts[a + 1]))

    def program(*raw):
        return exported.call(*raw)

    program.__name__ = program.__qualname__ = name.replace("-", "_")  # JAX's logs name it
    lowered = jax.jit(program, donate_argnums=donated).lower(*_raw(leaves, in_impls))
    compiled = lowered.compile(compiler_options)

    def call(*call_args):
        flat_args = jax.tree_util.tree_leaves(call_args)
        out = compiled(*_raw(flat_args, in_impls))
        return jax.tree_util.tree_unflatten(out_tree, _typed(list(out), out_impls))

    return call, time.perf_counter() - t0, loaded


class KeptJit:
    """``jax.jit(fn, static_argnums=static)`` whose programs are kept between launches
    (when an entry point turned the cache on): one program per static values and argument
    avals, compiled on first call. The static arguments' ``repr`` goes into the key."""

    def __init__(self, name: str, fn: Callable, static: tuple[int, ...], options=None):
        self._name, self._fn, self._static = name, fn, tuple(sorted(static))
        self._options = dict(options) if options else None
        self._programs: dict[tuple, Callable] = {}

    def __call__(self, *args):
        if directory() is None:  # cache off: exactly jax.jit, with its own dispatch
            sig = ("jit",)
            if sig not in self._programs:
                self._programs[sig] = jax.jit(
                    self._fn, static_argnums=self._static, compiler_options=self._options
                )
            return self._programs[sig](*args)
        statics = tuple(args[i] for i in self._static)
        dynamic = tuple(a for i, a in enumerate(args) if i not in self._static)
        leaves, tree = jax.tree_util.tree_flatten(dynamic)
        avals = tuple((jnp.shape(x), str(jnp.result_type(x)), _weak(x)) for x in leaves)
        sig = (statics, tree, avals)
        call = self._programs.get(sig)
        if call is None:
            call = self._compile(statics, dynamic)
            self._programs[sig] = call
        return call(*dynamic)

    def _compile(self, statics: tuple, dynamic: tuple) -> Callable:
        fn, where = self._fn, self._static

        def bound(*dyn):
            full, rest = [], iter(dyn)
            for i in range(len(dyn) + len(where)):
                full.append(statics[where.index(i)] if i in where else next(rest))
            return fn(*full)

        call, _, _ = compile_program(
            self._name, bound, dynamic, repr(statics), compiler_options=self._options
        )
        return call

    def _cache_size(self) -> int:
        jitted = self._programs.get(("jit",))
        kept = len(self._programs) - (jitted is not None)
        return kept + (jitted._cache_size() if jitted is not None else 0)


def _weak(x: Any) -> bool:
    return bool(getattr(x, "weak_type", isinstance(x, (bool, int, float, complex))))
