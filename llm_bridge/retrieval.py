"""Host retrieval for ``catalog_search`` with FAISS (SPEC §1.6, §5.1; DESIGN "Retrieval is a
stage before the step").

``FaissRetriever`` replaces the device ranking (``tools.search._ranked_candidates``) for a
batch of episodes and hands the top ids and |T| to the device's ``finish_slot``
(distractors, top_k(d) cut, unknown similar_to, card scores and stock), so its
``SearchResults`` equal ``resolve_searches`` / ``resolve_batch`` for the same query
embedding. Only the first ``n_true = min(|T|, n - D)`` ids reach the output (SPEC §5.1.4),
so that is all the host ranks.

- Filters apply before ranking: T is computed on the host from the device's own attribute
  values (``disc_values`` / ``num_values_scaled``), with the same float32 comparisons.
- Sorts other than relevance: exact; a precomputed (key desc, index asc) order of the
  whole catalog, keeping the members of T.
- Relevance and similar_to, flat index (default): exact. All such queries of a batch go to
  FAISS together (one ``search`` per depth bucket); a filtered query searches deeper, in
  proportion to 1/selectivity, and drops rows outside T. A query whose T is small, or that
  would need too deep a search, is brute-forced over its filtered subset on the host
  instead (not a FAISS id selector: one selector per query would stop the batching).
  Exactness then rests on the float32 error bound of a dot product, |fl(e.q) - e.q| <=
  eps = gamma_D |q| max|e| for any summation order (Higham, Thm. 3.1):

  1. Complete: a row FAISS did not return scores <= its last score t, so it cannot reach
     the top n_true if the candidate at the cut is more than 4 eps above t. Otherwise the
     query is searched deeper and finally brute-forced over its T.
  2. Ordered: candidates more than 4 eps apart are ordered the same by FAISS and by the
     device. Closer ones (a cluster) are exact ties if the rows are identical wherever q
     is non-zero (one summation scheme for every row then gives them the same bits:
     duplicates, and hashing vectors that agree on the query's buckets); else the
     device itself rescores them
     in the kernel's layout (one [c, D] block of rows against vmapped queries, c =
     min(search_chunk, N)), and they are ordered by (score desc, index asc) as
     ``kernels.topk`` does. That reproduces the kernel's bits when its matmul gives each
     row the same bits whatever the row's position and the number of queries, which the
     retriever checks once per c (``layout_invariant``); where it does not hold (some
     GPU kernels), every query with a cluster is ranked by the device kernel itself.

- Queries with inf / NaN / huge entries are ranked by the device kernel; a zero query (no
  text) ranks T by index, as every cos is then exactly 0.
- Unfiltered relevance queries with an ANN index (``kind="hnsw"`` / ``"ivf"``): the ANN
  candidates by (FAISS score desc, index asc). Approximate, which SPEC §1.6 allows only
  there; filtered, sorted and similar_to searches still take the exact path.

Limit: the bound assumes the device's dot is float32 with float32 accumulation. If the
backend runs the kernel's default-precision matmul in TF32 or bf16 (GPU/TPU), set
``device_roundoff`` to that unit roundoff (e.g. 2**-11).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax.catalog.types import Catalog
from ecomjax.compact import first_true
from ecomjax.exposure import oos_bitmap
from ecomjax.predicates import (
    NUM_FILTER_DIR,
    NUM_FILTER_SCALE,
    NUM_FILTER_SLOT,
    TOL,
    disc_values,
    num_values_scaled,
)
from ecomjax.tools.search import _ranked_candidates, finish_slot, search_counts
from ecomjax.types import Action, EnvParams, EpisodeState, SearchResults, no_search

__all__ = [
    "FaissIndex",
    "FaissRetriever",
    "RetrievalStats",
    "dot_error_bound",
    "layout_invariant",
]

R = C.MAX_SEARCH_RESULTS
B = C.MAX_TOOL_CALLS
_U32 = 2.0**-24  # float32 unit roundoff
_TINY = float(np.finfo(np.float32).tiny)
_HUGE_Q = 1e18  # |q_i| above this could overflow a float32 dot
_SORT_MODES = (C.SortBy.PRICE_ASC, C.SortBy.RATING_DESC, C.SortBy.SHIP_DAYS_ASC)


def _faiss() -> Any:
    try:
        import faiss
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise ImportError("FAISS retrieval needs faiss: pip install 'ecomjax[faiss]'") from e
    return faiss


def dot_error_bound(dim: int, q_norm: float, max_row_norm: float, roundoff: float = _U32) -> float:
    """Bound on |fl(e . q) - e . q| for any summation order, with or without FMA:
    gamma_D sum|e_i q_i| <= gamma_D |q| |e|, gamma_D = D u / (1 - D u)."""
    du = dim * roundoff
    if du >= 0.5:
        return math.inf
    return 1.001 * du / (1.0 - du) * q_norm * max_row_norm + 1e-30


def _canon(s: np.ndarray) -> np.ndarray:
    """As ``kernels.topk._canon``: NaN -> -inf, -0.0 and subnormals -> +0.0."""
    s = np.where(np.isnan(s), np.float32(-np.inf), s).astype(np.float32)
    return np.where(np.abs(s) < _TINY, np.float32(0), s)


# --- device helpers ------------------------------------------------------------------------


@partial(jax.jit, static_argnums=1)
def _kernel_layout_scores(emb: jax.Array, c: int, qs: jax.Array) -> jax.Array:
    """Scores of rows [0, c) as the masked top-k computes them: a row slice against
    vmapped queries."""
    block = jax.lax.dynamic_slice_in_dim(emb, 0, c, 0)
    return jax.vmap(lambda q: block.astype(jnp.float32) @ q)(qs)


@jax.jit
def _block_scores(block: jax.Array, qs: jax.Array) -> jax.Array:
    """float32 [Q, c]: one [c, D] block of gathered rows against vmapped queries."""
    return jax.vmap(lambda q: block @ q)(qs)


def layout_invariant(catalog: Catalog, c: int, seed: int = 0) -> bool:
    """Whether this backend's matmul gives a row the same bits wherever it sits in a
    [c, D] block and however many queries are vmapped (both >= 2), so that rescoring
    gathered rows reproduces the masked top-k kernel. True on XLA:CPU."""
    emb = catalog.emb
    n, d = int(emb.shape[0]), int(emb.shape[1])
    c = min(c, n)
    rng = np.random.default_rng(seed)
    host = np.asarray(emb).astype(np.float32)
    qs = host[rng.integers(0, n, 16)] + rng.standard_normal((16, d)).astype(np.float32) / 8
    ref = np.asarray(_kernel_layout_scores(emb, c, jnp.asarray(qs)))
    perm = rng.permutation(c)
    q2 = np.concatenate([qs, rng.standard_normal((24, d)).astype(np.float32)])[::-1].copy()
    got = np.asarray(_block_scores(jnp.asarray(host[:c][perm]), jnp.asarray(q2)))
    got = got[::-1][:16][:, np.argsort(perm)]
    return bool(np.array_equal(_canon(ref), _canon(got)))


@partial(jax.jit, static_argnums=2)
def _caps(states: EpisodeState, actions: Action, params: EnvParams) -> jax.Array:
    """int32 [B, 11]: n - D per call slot (``tools.search.search_counts``, which
    ``finish_slot`` reads too): at most this many true results can be shown (SPEC §5.1.3-4)."""

    def one(state: EpisodeState, action: Action) -> jax.Array:
        diff = D.difficulty(state.problem.d, params.overrides)

        def slot(qty: jax.Array) -> jax.Array:
            n, n_dist = search_counts(diff, qty)
            return n - n_dist

        return jax.vmap(slot)(action.qty)

    return jax.vmap(one)(states, actions)


@partial(jax.jit, static_argnums=3)
def _device_rank(
    catalog: Catalog,
    states: EpisodeState,
    actions: Action,
    params: EnvParams,
    ep: jax.Array,
    slot: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """The device kernel's own ranking (ids [Q, R], |T| [Q]) for the given call slots."""

    def one(e: jax.Array, s: jax.Array) -> tuple[jax.Array, jax.Array]:
        st = jax.tree_util.tree_map(lambda x: x[e], states)
        ac = jax.tree_util.tree_map(lambda x: x[e], actions)
        ids, n_valid, _, _ = _ranked_candidates(catalog, st, ac, s, params)
        return ids, n_valid

    return jax.vmap(one)(ep, slot)


def _bucket(n: int, lo: int = 16) -> int:
    return max(lo, 1 << max(0, math.ceil(math.log2(max(n, 1)))))


# --- the index -----------------------------------------------------------------------------


class FaissIndex:
    """Inner-product FAISS index over catalog embeddings [N, D] (float32 copies).

    ``kind="flat"``: ``IndexFlatIP``, exact brute force (SIMD / BLAS). ``"hnsw"``:
    ``IndexHNSWFlat`` (``hnsw_m`` links per node, ``ef_construction``, ``ef_search``).
    ``"ivf"``: ``IndexIVFFlat`` over ``nlist`` k-means cells (default ~4 sqrt(N)), probing
    ``nprobe``. The flat index is always kept too: filtered, sorted and similar_to searches
    must be exact (SPEC §1.6), so only unfiltered relevance searches use the ANN index.
    Builds are deterministic: k-means is seeded, and HNSW is built on one thread (its
    parallel insertion order is not) unless ``deterministic=False``.
    """

    def __init__(
        self,
        emb: np.ndarray,
        kind: str = "flat",
        *,
        nlist: int | None = None,
        nprobe: int = 16,
        hnsw_m: int = 32,
        ef_construction: int = 200,
        ef_search: int = 256,
        seed: int = 0,
        deterministic: bool = True,
    ) -> None:
        faiss = _faiss()
        emb = np.ascontiguousarray(np.asarray(emb).astype(np.float32))
        if emb.ndim != 2 or emb.shape[0] < 1:
            raise ValueError(f"need embeddings [N >= 1, D], got shape {emb.shape}")
        if not np.isfinite(emb).all():
            raise ValueError("embeddings contain NaN or inf")
        if kind not in ("flat", "hnsw", "ivf"):
            raise ValueError(f"kind must be 'flat', 'hnsw' or 'ivf', got {kind!r}")
        self.kind = kind
        self.emb = emb
        self.n, self.dim = emb.shape
        self.max_norm = float(np.sqrt(np.square(emb, dtype=np.float64).sum(1)).max())
        self.flat = faiss.IndexFlatIP(self.dim)
        self.flat.add(emb)
        self.ann: Any = None
        self.params: dict[str, Any] = {}
        if kind == "hnsw":
            self.ann = faiss.IndexHNSWFlat(self.dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
            self.ann.hnsw.efConstruction = ef_construction
            self.ann.hnsw.efSearch = ef_search
            self._add_deterministic(faiss, emb, deterministic)
            self.params = dict(hnsw_m=hnsw_m, ef_construction=ef_construction, ef_search=ef_search)
        elif kind == "ivf":
            nlist = int(nlist or max(1, min(self.n // 39, round(4 * math.sqrt(self.n)))))
            quantizer = faiss.IndexFlatIP(self.dim)
            self.ann = faiss.IndexIVFFlat(quantizer, self.dim, nlist, faiss.METRIC_INNER_PRODUCT)
            self.ann.cp.seed = seed
            self.ann.train(emb)
            self.ann.add(emb)
            self.ann.nprobe = min(nprobe, nlist)
            self._quantizer = quantizer  # the IVF index does not own it
            self.params = dict(nlist=nlist, nprobe=self.ann.nprobe, seed=seed)

    def _add_deterministic(self, faiss: Any, emb: np.ndarray, deterministic: bool) -> None:
        threads = faiss.omp_get_max_threads()
        if deterministic:
            faiss.omp_set_num_threads(1)
        try:
            self.ann.add(emb)
        finally:
            faiss.omp_set_num_threads(threads)

    @classmethod
    def from_catalog(cls, catalog: Catalog, kind: str = "flat", **kwargs: Any) -> FaissIndex:
        return cls(np.asarray(catalog.emb).astype(np.float32), kind, **kwargs)

    def search(self, q: np.ndarray, k: int, ann: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(scores float32 [Q, k], ids int64 [Q, k]); -1 ids past the catalog's end."""
        index = self.ann if ann and self.ann is not None else self.flat
        q = np.ascontiguousarray(q, np.float32)
        return index.search(q, int(k))

    def range_search(self, q: np.ndarray, radius: float) -> tuple[np.ndarray, np.ndarray]:
        """Exact (ids, scores) of the rows scoring above ``radius`` for one query [D]."""
        _, scores, ids = self.flat.range_search(np.ascontiguousarray(q[None], np.float32), radius)
        return ids, scores

    def __repr__(self) -> str:
        return f"FaissIndex(kind={self.kind!r}, n={self.n}, dim={self.dim}, {self.params})"


# --- host copies of what the filters read ----------------------------------------------------


class _HostCatalog:
    """The catalog's filter columns, sort orders and stock on the host, computed with the
    device's own functions so that every comparison sees identical values."""

    def __init__(self, catalog: Catalog) -> None:
        n = catalog.n_products
        idx = jnp.arange(n, dtype=jnp.int32)
        disc, num = jax.jit(lambda c: (disc_values(c, idx), num_values_scaled(c, idx)))(catalog)
        self.n = n
        self.disc = np.asarray(disc)  # int32 [N, N_DISC_FILTERS]
        self.num_f = np.asarray(num)[:, np.asarray(NUM_FILTER_SLOT)]  # float32 [N, N_NUM]
        self.num_nan = np.isnan(self.num_f)
        self.stock = np.asarray(catalog.stock).astype(np.int64)
        self.in_stock = self.stock > 0
        # Sort keys as the device has them (float32, higher is better), then one global
        # (key desc, index asc) order per mode: a query keeps the members of T in order.
        keys = {
            C.SortBy.PRICE_ASC: -np.asarray(catalog.price_cents).astype(np.float32),
            C.SortBy.RATING_DESC: np.asarray(catalog.rating_x100).astype(np.float32),
            C.SortBy.SHIP_DAYS_ASC: -np.asarray(catalog.ship_days).astype(np.float32),
        }
        ar = np.arange(n)
        self.order = {m: np.lexsort((ar, -k)) for m, k in keys.items()}
        self.scale = np.asarray(NUM_FILTER_SCALE, np.float32)
        self.dirn = np.asarray(NUM_FILTER_DIR, np.float32)

    def filter_mask(self, fd: np.ndarray, fn: np.ndarray) -> np.ndarray | None:
        """bool [N] of ``predicates.filters_pass``, or None when no filter is set."""
        mask = None
        for j in np.flatnonzero(fd != -1):
            col = self.disc[:, j]
            ok = (col == fd[j]) & (col >= 0)
            mask = ok if mask is None else mask & ok
        tol = np.float32(TOL)
        for j in np.flatnonzero(~np.isnan(fn)):
            bound = np.float32(fn[j]) * self.scale[j]
            vals = self.num_f[:, j]
            ok = vals >= bound - tol if self.dirn[j] > 0 else vals <= bound + tol
            ok &= ~self.num_nan[:, j]
            mask = ok if mask is None else mask & ok
        return mask


# --- one query through the pipeline ----------------------------------------------------------


@dataclass
class _Query:
    b: int
    s: int
    mode: int  # 0 relevance, else a SortBy
    q: np.ndarray | None  # float32 [D] for relevance
    mask: np.ndarray | None  # bool [N] of the filters and stock, None = all rows
    ref: int  # similar_to reference (never in T), -1 none
    total: int  # |T|
    need: int = 0  # true results the output can show: min(|T|, n - D)
    k: int = 0  # FAISS depth of the current round
    eps: float = 0.0
    ids: np.ndarray | None = None  # the answer, int64 [need]
    path: str = ""

    def in_t(self, rows: np.ndarray) -> np.ndarray:
        ok = self.mask[rows] if self.mask is not None else np.ones(rows.shape, bool)
        return ok & (rows != self.ref)

    def t_rows(self, n: int) -> np.ndarray:
        rows = np.flatnonzero(self.mask) if self.mask is not None else np.arange(n)
        return rows[rows != self.ref]


@dataclass
class _Plan:
    """The candidates that can reach the top ``need``, sorted by (approximate score desc,
    index asc), grouped into clusters whose order within needs the device's bits."""

    query: _Query
    rows: np.ndarray  # int64 [h]
    cluster: np.ndarray  # int64 [h], ascending
    rescore: np.ndarray  # positions in ``rows`` the device must rescore
    tied: bool = False  # some cluster has more than one row
    exact: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))


@dataclass
class RetrievalStats:
    """How the last call resolved its searches (for benchmarks and tests)."""

    paths: Counter = field(default_factory=Counter)
    faiss_calls: int = 0
    rescored_rows: int = 0  # distinct rows the device rescored in the kernel layout
    device_ranked: int = 0  # queries ranked by the device kernel itself


class FaissRetriever:
    """Resolves the catalog_search calls of a batch of episodes with FAISS on the host.

    ``retriever(catalog, state, action, params)`` is the one-episode form (equal to
    ``resolve_searches``); ``retriever.resolve_batch(catalog, states, actions, params,
    live)`` the batched one (equal to ``tools.search.resolve_batch``: live episodes
    resolved, ``no_search`` rows elsewhere). Options: ``margin``, the extra FAISS depth
    past the cut; ``max_candidates``, the deepest FAISS search before brute force over T;
    ``subset_max``, a T this small is brute-forced at once; ``chunk``, search slots per
    step of the device post-processing (as ``resolve_batch``'s); ``device_roundoff``, the
    unit roundoff of the device's matmul (float32 by default).
    """

    def __init__(
        self,
        index: FaissIndex,
        catalog: Catalog,
        *,
        margin: int = 32,
        max_candidates: int = 4096,
        subset_max: int = 2048,
        chunk: int = 256,
        device_roundoff: float = _U32,
    ) -> None:
        if index.n != catalog.n_products or index.dim != catalog.embed_dim:
            raise ValueError(
                f"index is [{index.n}, {index.dim}] but the catalog is "
                f"[{catalog.n_products}, {catalog.embed_dim}]"
            )
        if margin < 0 or max_candidates < 1 or subset_max < 0 or chunk < 1:
            raise ValueError("need margin >= 0, max_candidates >= 1, subset_max >= 0, chunk >= 1")
        self.index = index
        self.catalog = catalog
        self.host = _HostCatalog(catalog)
        self.margin = int(margin)
        self.max_candidates = int(max_candidates)
        self.subset_max = int(subset_max)
        self.chunk = int(chunk)
        self.device_roundoff = float(device_roundoff)
        self.stats = RetrievalStats()
        self._invariant: dict[int, bool] = {}

    @classmethod
    def from_catalog(cls, catalog: Catalog, kind: str = "flat", **kwargs: Any) -> FaissRetriever:
        """Builds the index too; index options (``nlist``, ``hnsw_m``, ...) go to it."""
        keys = (
            "nlist",
            "nprobe",
            "hnsw_m",
            "ef_construction",
            "ef_search",
            "seed",
            "deterministic",
        )
        index_kw = {k: kwargs.pop(k) for k in keys if k in kwargs}
        return cls(FaissIndex.from_catalog(catalog, kind, **index_kw), catalog, **kwargs)

    # -- public API ----------------------------------------------------------------------

    def __call__(
        self, catalog: Catalog, state: EpisodeState, action: Action, params: EnvParams
    ) -> SearchResults:
        """One episode's searches, as ``resolve_searches(catalog, state, action, params)``."""
        add = lambda t: jax.tree_util.tree_map(lambda x: jnp.asarray(x)[None], t)
        ids, n_valid = self.rank(catalog, add(state), add(action), params, np.ones(1, bool))
        return _finish_one(
            catalog, state, action, params, jnp.asarray(ids[0]), jnp.asarray(n_valid[0])
        )

    def resolve_batch(
        self,
        catalog: Catalog,
        states: EpisodeState,
        actions: Action,
        params: EnvParams,
        live: jax.Array | np.ndarray,
    ) -> SearchResults:
        """Every search of the live episodes, as ``tools.search.resolve_batch``."""
        live_np = np.asarray(live, bool)
        ids, n_valid = self.rank(catalog, states, actions, params, live_np)
        args = (jnp.asarray(ids), jnp.asarray(n_valid), jnp.asarray(live_np))
        return _finish_batch(catalog, states, actions, params, *args, self.chunk)

    def rank(
        self,
        catalog: Catalog,
        states: EpisodeState,
        actions: Action,
        params: EnvParams,
        live: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ranking stage alone: top ids int32 [B, 11, R] (-1 padded; only the first
        n_true of a slot are meaningful) and |T| int32 [B, 11]."""
        if catalog is not self.catalog and (
            catalog.n_products != self.index.n or catalog.embed_dim != self.index.dim
        ):
            raise ValueError("this retriever was built for another catalog")
        self.stats = RetrievalStats()
        live = np.asarray(live, bool)
        queries = self._parse(states, actions, live)
        if queries:
            caps = np.asarray(_caps(states, actions, params))
            for qr in queries:
                qr.need = max(0, min(qr.total, int(caps[qr.b, qr.s])))
            self._resolve(catalog, states, actions, params, queries)
        ids = np.full((live.shape[0], B, R), -1, np.int32)
        n_valid = np.zeros((live.shape[0], B), np.int32)
        for qr in queries:
            ids[qr.b, qr.s, : qr.ids.size] = qr.ids
            n_valid[qr.b, qr.s] = qr.total
            self.stats.paths[qr.path] += 1
        return ids, n_valid

    # -- parsing ---------------------------------------------------------------------------

    def _parse(self, states: EpisodeState, actions: Action, live: np.ndarray) -> list[_Query]:
        h, n = self.host, self.host.n
        tool = np.asarray(actions.tool)
        todo = np.argwhere((tool == C.Tool.CATALOG_SEARCH) & live[:, None])
        if todo.size == 0:
            return []
        product = np.asarray(actions.product)
        enum_a = np.asarray(actions.enum_a)
        flag = np.asarray(actions.flag)
        qemb = np.asarray(actions.query_emb)
        fdisc = np.asarray(actions.filter_disc)
        fnum = np.asarray(actions.filter_num)
        world = states.world
        oos = oos_bitmap(world, n) if flag[todo[:, 0], todo[:, 1]].any() else None
        cart = [np.asarray(x) for x in (world.cart_pid, world.cart_var, world.cart_qty)]
        cart_no = np.asarray(world.cart_no)
        cache: dict[bytes, np.ndarray | None] = {}
        out = []
        for b, s in todo.tolist():
            ref = int(product[b, s])
            if ref != -1 and not 0 <= ref < n:  # unknown similar_to: finish_slot errors
                out.append(_Query(b, s, 0, None, None, ref, 0, ids=np.zeros(0, np.int64)))
                out[-1].path = "bad_ref"
                continue
            fd, fn = fdisc[b, s], fnum[b, s].astype(np.float32)
            key = fd.tobytes() + fn.tobytes()
            if key not in cache:
                cache[key] = h.filter_mask(fd, fn)
            mask = cache[key]
            if flag[b, s]:  # in_stock_only, with the stock as it was at the turn's start
                pid, var, qty = (x[b] for x in cart)
                free = np.where(var == -1, h.stock[np.clip(pid, 0, n - 1)] - qty, 1)
                exhausted = pid[(cart_no[b] > 0) & (free <= 0)]
                ok = h.in_stock & ~oos[b]
                ok[exhausted[(exhausted >= 0) & (exhausted < n)]] = False
                mask = ok if mask is None else mask & ok
            if ref != -1:
                mode, q = 0, self.index.emb[ref]
            else:
                mode, q = int(enum_a[b, s]), qemb[b, s].astype(np.float32)
                if mode != C.SortBy.RELEVANCE and mode not in _SORT_MODES:
                    mode = int(C.SortBy.SHIP_DAYS_ASC)  # _sort_key's default branch
            in_t = n if mask is None else int(mask.sum())
            total = in_t - int(ref != -1 and (mask is None or bool(mask[ref])))
            out.append(_Query(b, s, mode, q if mode == 0 else None, mask, ref, total))
        return out

    # -- ranking ----------------------------------------------------------------------------

    def _resolve(
        self,
        catalog: Catalog,
        states: EpisodeState,
        actions: Action,
        params: EnvParams,
        queries: list[_Query],
    ) -> None:
        h, n = self.host, self.host.n
        faiss_q: list[_Query] = []
        brute: list[_Query] = []
        ann: list[_Query] = []
        device: list[_Query] = []
        for qr in queries:
            if qr.ids is not None:
                continue
            if qr.need == 0:
                qr.ids, qr.path = np.zeros(0, np.int64), "none"
            elif qr.mode != C.SortBy.RELEVANCE:
                order = h.order[qr.mode]
                qr.ids, qr.path = order[qr.in_t(order)][: qr.need], "sort"
            elif not np.isfinite(qr.q).all() or np.abs(qr.q).max() > _HUGE_Q:
                device.append(qr)  # NaN/inf scores change |T|: the kernel decides
            elif not np.any(qr.q):
                qr.ids, qr.path = qr.t_rows(n)[: qr.need], "zero_query"
            else:
                q_norm = float(np.linalg.norm(qr.q.astype(np.float64)))
                qr.eps = dot_error_bound(
                    self.index.dim, q_norm, self.index.max_norm, self.device_roundoff
                )
                if qr.mask is None and qr.ref == -1 and self.index.ann is not None:
                    ann.append(qr)
                    continue
                want = (qr.need + self.margin) * n / qr.total * 1.25
                qr.k = _bucket(math.ceil(want), 64)
                if qr.total <= self.subset_max or qr.k > self.max_candidates or qr.k >= n:
                    brute.append(qr)
                else:
                    faiss_q.append(qr)
        plans: list[_Plan] = []
        if ann:
            plans += self._ann_round(ann)
        while faiss_q:
            faiss_q, more_plans, more_brute = self._faiss_round(faiss_q)
            plans += more_plans
            brute += more_brute
        plans += [self._brute_plan(qr) for qr in brute]
        c = min(params.search_chunk, n)
        if c not in self._invariant:
            self._invariant[c] = layout_invariant(self.catalog, c)
        if self._invariant[c]:
            self._rescore(plans, c)
        else:  # the kernel's bits depend on the layout: it ranks every query with a tie
            device += [p.query for p in plans if p.tied]
            plans = [p for p in plans if not p.tied]
        for p in plans:
            key = np.zeros(p.rows.size, np.float32)
            key[p.rescore] = p.exact
            o = np.lexsort((p.rows, -key, p.cluster))
            p.query.ids = p.rows[o][: p.query.need]
        if device:
            self._device(catalog, states, actions, params, device)

    def _ann_round(self, queries: list[_Query]) -> list[_Plan]:
        k = max(qr.need for qr in queries) + self.margin
        scores, ids = self.index.search(np.stack([qr.q for qr in queries]), k, ann=True)
        self.stats.faiss_calls += 1
        plans = []
        for qr, sc, rows in zip(queries, scores, ids, strict=True):
            ok = rows >= 0
            rows, sc = rows[ok].astype(np.int64), sc[ok]
            o = np.lexsort((rows, -sc))[: qr.need]
            qr.path = "ann"
            plans.append(_Plan(qr, rows[o], np.arange(o.size), np.zeros(0, np.int64)))
        return plans

    def _faiss_round(self, queries: list[_Query]) -> tuple[list[_Query], list[_Plan], list[_Query]]:
        """One batched FAISS search per depth bucket: (deeper retries, plans, brute)."""
        retry: list[_Query] = []
        brute: list[_Query] = []
        plans: list[_Plan] = []
        groups: dict[int, list[_Query]] = {}
        for qr in queries:
            groups.setdefault(qr.k, []).append(qr)
        for k, group in sorted(groups.items()):
            scores, ids = self.index.search(np.stack([qr.q for qr in group]), k)
            self.stats.faiss_calls += 1
            for qr, sc, rows in zip(group, scores, ids, strict=True):
                keep = (rows >= 0) & qr.in_t(np.maximum(rows, 0))
                plan = self._plan(qr, rows[keep], sc[keep], t=float(sc[-1]))
                if plan is not None:
                    qr.path = qr.path or "faiss"
                    plans.append(plan)
                elif qr.k * 4 <= self.max_candidates and qr.k * 4 < self.index.n:
                    qr.k *= 4
                    qr.path = "faiss_deep"
                    retry.append(qr)
                else:
                    qr.path = "fallback"
                    brute.append(qr)
        return retry, plans, brute

    def _brute_plan(self, qr: _Query) -> _Plan:
        """Exact over the filtered subset: every row of T scored on the host."""
        rows = qr.t_rows(self.host.n)
        emb = self.index.emb
        approx = (emb[rows] if rows.size < emb.shape[0] else emb) @ qr.q
        qr.path = qr.path or "subset"
        plan = self._plan(qr, rows, approx, t=None)
        assert plan is not None  # all of T is a complete candidate set
        return plan

    def _plan(
        self, qr: _Query, rows: np.ndarray, approx: np.ndarray, t: float | None
    ) -> _Plan | None:
        """Sorts candidates, finds the clusters the device must order, and checks that no
        row outside ``rows`` can reach the top ``need`` (``t``: FAISS's last score; None
        when ``rows`` is all of T). None: search deeper."""
        rows = rows.astype(np.int64)
        approx = approx.astype(np.float64)
        o = np.lexsort((rows, -approx))
        rows, approx = rows[o], approx[o]
        gap = 4.0 * qr.eps  # FAISS and the device each within eps of the exact value
        if rows.size < qr.need:
            return None
        brk = approx[:-1] - approx[1:] > gap
        cluster = np.concatenate([[0], np.cumsum(brk)])
        hi = int(np.searchsorted(cluster, cluster[qr.need - 1], side="right"))
        if t is not None and not approx[hi - 1] - t > gap:
            return None  # scores near the cut reach FAISS's depth
        rows, cluster = rows[:hi], cluster[:hi]
        starts = np.flatnonzero(np.r_[True, cluster[1:] != cluster[:-1]])
        size = np.diff(np.r_[starts, hi])
        if (size == 1).all():
            return _Plan(qr, rows, cluster, np.zeros(0, np.int64))
        # Rows equal wherever q is non-zero tie exactly; other clusters need the device.
        sub = self.index.emb[rows][:, np.flatnonzero(qr.q)]
        same = (sub == sub[starts[cluster]]).all(1)
        tie = np.logical_and.reduceat(same, starts)
        rescore_pos = np.flatnonzero(~tie[cluster])
        return _Plan(qr, rows, cluster, rescore_pos, tied=True)

    def _rescore(self, plans: list[_Plan], c: int) -> None:
        """Device scores of every row to rescore, in the kernel's [c, D] block layout, all
        plans at once: blocks of distinct rows against every query that needs one."""
        todo = [p for p in plans if p.rescore.size]
        if not todo:
            return
        rows = np.unique(np.concatenate([p.rows[p.rescore] for p in todo]))
        self.stats.rescored_rows += int(rows.size)
        qs = np.zeros((_bucket(len(todo)), self.index.dim), np.float32)
        qs[: len(todo)] = np.stack([p.query.q for p in todo])
        scores = np.zeros((len(todo), rows.size), np.float32)
        for s in range(0, rows.size, c):
            part = rows[s : s + c]
            block = np.zeros((c, self.index.dim), np.float32)
            block[: part.size] = self.index.emb[part]
            got = np.asarray(_block_scores(jnp.asarray(block), jnp.asarray(qs)))
            scores[:, s : s + part.size] = got[: len(todo), : part.size]
        scores = _canon(scores)
        for i, p in enumerate(todo):
            p.exact = scores[i, np.searchsorted(rows, p.rows[p.rescore])]

    def _device(
        self,
        catalog: Catalog,
        states: EpisodeState,
        actions: Action,
        params: EnvParams,
        queries: list[_Query],
    ) -> None:
        """The device kernel's ranking for these queries (padded to a bucket size)."""
        m = _bucket(len(queries))
        ep = np.zeros(m, np.int32)
        slot = np.zeros(m, np.int32)
        ep[: len(queries)] = [qr.b for qr in queries]
        slot[: len(queries)] = [qr.s for qr in queries]
        ids, n_valid = _device_rank(
            catalog, states, actions, params, jnp.asarray(ep), jnp.asarray(slot)
        )
        ids, n_valid = np.asarray(ids), np.asarray(n_valid)
        self.stats.device_ranked += len(queries)
        for i, qr in enumerate(queries):
            qr.total = int(n_valid[i])
            qr.ids, qr.path = ids[i][ids[i] >= 0].astype(np.int64), "device"


# --- the device half ---------------------------------------------------------------------------


@partial(jax.jit, static_argnums=3)
def _finish_one(
    catalog: Catalog,
    state: EpisodeState,
    action: Action,
    params: EnvParams,
    ids: jax.Array,
    n_valid: jax.Array,
) -> SearchResults:
    """``resolve_searches`` with the ranking supplied: the same vmap over call slots."""
    slots = jnp.arange(B)
    return jax.vmap(finish_slot, (None, None, None, 0, None, 0, 0))(
        catalog, state, action, slots, params, ids, n_valid
    )


@partial(jax.jit, static_argnums=(3, 7))
def _finish_batch(
    catalog: Catalog,
    states: EpisodeState,
    actions: Action,
    params: EnvParams,
    ids: jax.Array,
    n_valid: jax.Array,
    live: jax.Array,
    chunk: int,
) -> SearchResults:
    """``tools.search.resolve_batch`` with the ranking supplied: the same compaction of
    search slots and the same ``chunk``-wide vmap, so every card is computed alike."""
    b = live.shape[0]
    nb = b * B
    flat = ((actions.tool == C.Tool.CATALOG_SEARCH) & live[:, None]).reshape(-1)
    n_q = flat.sum()
    n_pad = -(-nb // chunk) * chunk
    order = jnp.pad(first_true(flat, nb), (0, n_pad - nb), constant_values=-1)
    out = jax.tree_util.tree_map(lambda x: x.reshape(nb, *x.shape[2:]), no_search((b,)))
    ids = ids.reshape(nb, R)
    n_valid = n_valid.reshape(nb)

    def body(carry):
        i, out = carry
        idx = jax.lax.dynamic_slice(order, (i * chunk,), (chunk,))
        ep, slot = idx // B, idx % B
        st = jax.tree_util.tree_map(lambda x: x[ep], states)
        ac = jax.tree_util.tree_map(lambda x: x[ep], actions)
        res = jax.vmap(finish_slot, (None, 0, 0, 0, None, 0, 0))(
            catalog, st, ac, slot, params, ids[idx], n_valid[idx]
        )
        valid = i * chunk + jnp.arange(chunk) < n_q
        dest = jnp.where(valid, idx, nb)
        out = jax.tree_util.tree_map(lambda o, r: o.at[dest].set(r, mode="drop"), out, res)
        return i + 1, out

    _, out = jax.lax.while_loop(lambda c: c[0] * chunk < n_q, body, (jnp.int32(0), out))
    return jax.tree_util.tree_map(lambda x: x.reshape(b, B, *x.shape[1:]), out)
