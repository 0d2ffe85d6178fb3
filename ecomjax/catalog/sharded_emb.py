"""Reads of a row-sharded embedding table, exact and in lockstep (issue 19).

Why only ``emb``: it is most of a catalog (D float32 a row against about 150 bytes of
every other column together), so splitting it by rows over a mesh axis lets a catalog
outgrow one host while filters, prices and stock stay local reads. Every device reaches
the same collectives in the same order, so the episode loop and the retrieval stage run
their trip counts to the mesh-wide maximum (``lockstep_any`` / ``lockstep_max``).

Each function is the plain read when ``catalog.emb_axis`` is None, so one code path
serves both layouts, and a sharded read returns the same bits as the whole-table one
(rows are selected, never summed).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ecomjax.catalog.types import Catalog
from ecomjax.kernels.sharded import shard_rows


def emb_rows(catalog: Catalog, idx: jax.Array) -> jax.Array:
    """float32 [..., D]: ``catalog.emb[idx]`` with jnp's index rules on the [N, D] table
    (negative ids wrap once, the rest clamp to 0..N-1). Sharded, every device sends the
    ids it wants to all, each returns the rows it owns, and the owner's copy is taken:
    S · |idx| · D floats leave each device per call."""
    idx = _wrapped(catalog, idx)
    if catalog.emb_axis is None:
        return catalog.emb[idx].astype(jnp.float32)
    rows, mine = _requested_rows(catalog, idx)
    return _owners_answers(catalog, jnp.where(mine[..., None], rows.astype(jnp.float32), 0.0), idx)


def emb_dots(catalog: Catalog, idx: jax.Array, qvec: jax.Array) -> jax.Array:
    """float32 [K]: ``emb_rows(catalog, idx) @ qvec`` for idx [K], qvec [D] (vmap for a
    batch). Sharded, the owners compute the dots, so K floats come back per query instead
    of K rows: a search's 200 shown scores are 800 bytes, not 300 KB."""
    idx = _wrapped(catalog, idx)
    if catalog.emb_axis is None:
        return _dots(catalog.emb[idx], qvec)
    rows, mine = _requested_rows(catalog, idx)  # [S, K, D]
    dots = jax.vmap(_dots)(rows, lax.all_gather(qvec, catalog.emb_axis))
    return _owners_answers(catalog, jnp.where(mine, dots, 0.0), idx)


def _wrapped(catalog: Catalog, idx: jax.Array) -> jax.Array:
    """jnp's index rules for the whole table, applied once so both layouts read one row."""
    n = catalog.n_products
    idx = jnp.asarray(idx, jnp.int32)
    return jnp.clip(jnp.where(idx < 0, idx + n, idx), 0, max(n - 1, 0))


def _requested_rows(catalog: Catalog, idx: jax.Array) -> tuple[jax.Array, jax.Array]:
    """This device's rows for every device's ``idx`` ([S, ..., D]) and which it owns."""
    n_local = catalog.emb.shape[0]
    me = lax.axis_index(catalog.emb_axis)
    wanted = lax.all_gather(idx, catalog.emb_axis) - me * n_local  # local row numbers
    mine = (wanted >= 0) & (wanted < n_local)
    return catalog.emb[jnp.clip(wanted, 0, n_local - 1)], mine


def _owners_answers(catalog: Catalog, answers: jax.Array, idx: jax.Array) -> jax.Array:
    """Send each device its answers ([S requesters, ...] here) and keep, for every id, the
    answer of the device that owns its row."""
    answers = lax.all_to_all(answers, catalog.emb_axis, 0, 0)  # [S owners, ...]
    owner = (idx // catalog.emb.shape[0])[None]
    owner = owner.reshape(owner.shape + (1,) * (answers.ndim - owner.ndim))
    return jnp.take_along_axis(answers, owner, axis=0)[0]


def _dots(rows: jax.Array, qvec: jax.Array) -> jax.Array:
    return rows.astype(jnp.float32) @ qvec.astype(jnp.float32)


def row_offset(catalog: Catalog) -> jax.Array | int:
    """Global index of this device's first ``emb`` row (0 when whole)."""
    if catalog.emb_axis is None:
        return 0
    return lax.axis_index(catalog.emb_axis) * catalog.emb.shape[0]


def lockstep_any(catalog: Catalog, flag: jax.Array) -> jax.Array:
    """``flag`` on any device of the embedding's axis: the condition of a loop whose body
    reads ``emb``, so that no device leaves it while another waits in a collective."""
    if catalog.emb_axis is None:
        return flag
    return lax.psum(flag.astype(jnp.int32), catalog.emb_axis) > 0


def lockstep_max(catalog: Catalog, count: jax.Array) -> jax.Array:
    """The mesh-wide largest trip count of a loop whose body reads ``emb``."""
    if catalog.emb_axis is None:
        return count
    return lax.pmax(count, catalog.emb_axis)


def catalog_specs(catalog: Catalog, axis: str | None) -> Catalog:
    """``shard_map`` in_specs for a catalog: ``emb`` split on ``axis``, the rest whole."""
    whole = jax.tree_util.tree_map(lambda _: PartitionSpec(), catalog)
    return whole if axis is None else whole.replace(emb=PartitionSpec(axis))


def place_catalog(catalog: Catalog, mesh: Mesh, axis: str | None) -> Catalog:
    """The catalog on every device of ``mesh``: whole, or with ``emb`` zero-padded to a
    multiple of the axis size and each process reading only its own devices' rows (so the
    host copy of ``emb`` may be a ``np.memmap``). The padding rows lie past N and never
    match a search (``tools.search`` masks global ids >= N)."""
    rep = NamedSharding(mesh, PartitionSpec())

    def whole(x):
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, rep, lambda idx: host[idx])

    if axis is None:
        return jax.tree_util.tree_map(whole, catalog)
    emb, _ = shard_rows(catalog.emb, mesh, axis)
    rest = jax.tree_util.tree_map(whole, catalog.replace(emb=jnp.zeros((0, 0))))
    return rest.replace(emb=emb, emb_axis=axis)


def check_sharded_emb(n_devices: int | None = None, n_products: int = 203) -> dict:
    """``emb_rows`` over a split table == the whole table's rows, bit for bit, for ids
    below 0, past N and inside, at several shapes and under ``vmap`` (the verifier's and
    the search's reads), with N not a multiple of the device count. Raises AssertionError
    on a difference; run it on simulated devices (``sharding.run_on_host_devices``)."""
    from ecomjax.catalog.synthetic import generate_catalog
    from ecomjax.kernels.sharded import shard_map_compat

    devices = jax.devices()[: n_devices or jax.device_count()]
    mesh = Mesh(np.asarray(devices), ("rows",))
    s = len(devices)
    catalog = generate_catalog(42, n_products)
    placed = place_catalog(catalog, mesh, "rows")
    rng = np.random.default_rng(0)
    shapes = [(s,), (s, 7), (s, 3, 5)]
    for shape in shapes:
        ids = jnp.asarray(rng.integers(-n_products - 3, 2 * n_products, shape), jnp.int32)
        for batched in (False, True):

            def read(c, i, batched=batched):
                return jax.vmap(lambda j: emb_rows(c, j))(i) if batched else emb_rows(c, i)

            fn = shard_map_compat(
                read,
                mesh,
                (catalog_specs(placed, "rows"), PartitionSpec("rows")),
                PartitionSpec("rows"),
            )
            got = np.asarray(jax.jit(fn)(placed, ids))
            want = np.asarray(emb_rows(catalog, ids))
            if not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
                raise AssertionError(f"ids of shape {shape} (vmap {batched}): rows differ")
    ids = jnp.asarray(rng.integers(-5, n_products + 5, (s, 2, 9)), jnp.int32)
    qvec = jnp.asarray(rng.standard_normal((s, 2, catalog.embed_dim)), jnp.float32)

    def dots(c, i, q):
        return jax.vmap(jax.vmap(lambda a, b: emb_dots(c, a, b)))(i, q)

    spec = (catalog_specs(placed, "rows"), PartitionSpec("rows"), PartitionSpec("rows"))
    got = np.asarray(jax.jit(shard_map_compat(dots, mesh, spec, PartitionSpec("rows")))(
        placed, ids, qvec
    ))  # fmt: skip
    want = np.asarray(dots(catalog, ids, qvec))
    if not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
        raise AssertionError("emb_dots differ from the whole table's")
    local = int(placed.emb.addressable_shards[0].data.shape[0])
    return {"devices": s, "n": n_products, "rows_per_device": local, "identical": True}
