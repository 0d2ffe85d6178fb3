"""Real-catalog adapter (SPEC §1.1, §1.5): parquet files or iterables of dict rows.

Why on the host: real catalogs arrive as text (titles, category paths, free-form
attributes). Parsing, vocabulary building and the hashing embedder run once here; the
result is the same device ``Catalog`` the synthetic generator builds, so every env runs
unchanged on either.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from typing import Any

import jax.numpy as jnp
import numpy as np

from ecomjax.catalog.embedder import embed_texts
from ecomjax.catalog.types import Catalog, CatalogTables
from ecomjax.catalog.vocabulary import DENIED_CATEGORY_PARTS, GROUPS, VOCAB
from ecomjax.constants import (
    ATTR_NAMES,
    DISC_ATTRS,
    EMBED_DIM,
    MAX_VARIANTS,
    NUM_ATTRS,
    POLICY_CATEGORIES,
    Attr,
    DescForm,
)

__all__ = [
    "DEFAULT_COLUMNS",
    "LoadStats",
    "is_denied",
    "keyed_ship_stock",
    "load_catalog",
    "load_parquet",
    "load_rows",
]

# Field -> candidate source column names; the first one present (and not None) is used.
DEFAULT_COLUMNS: dict[str, tuple[str, ...]] = {
    "product_id": ("product_id", "id", "asin", "parent_asin"),
    "title": ("title", "name"),
    "desc": ("desc", "description"),
    "cat": ("cat", "category", "category_path", "categories"),
    "brand": ("brand",),
    "store": ("store", "seller"),
    "price": ("price",),
    "rating": ("rating", "average_rating"),
    "rating_count": ("rating_count", "num_ratings", "review_count"),
    "ship_days": ("ship_days",),
    "stock": ("stock", "stock_qty"),
    "attrs": ("attrs", "attributes"),
    "features": ("features",),
    "variants": ("variants",),
}
# Source attribute names that mean an allowlist attribute (after lower + '_' folding).
ATTR_ALIASES: dict[str, str] = {
    "colour": "color",
    "connector": "connector_type",
    "form": "item_form",
    "screen_size": "screen_size_inches",
    "screen": "screen_size_inches",
    "weight": "weight_lbs",
    "watts": "wattage",
}
# Discrete attributes that keep their canonical spelling instead of being lower-cased.
_CASED = (Attr.SIZE, Attr.CONNECTOR_TYPE)
_NUMBER_RE = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?|[-+]?\.\d+")
_INT16_MAX = np.iinfo(np.int16).max
_REC_FIELDS = (
    "pid", "title", "desc", "cat", "brand", "store", "price", "rating", "rating_count", "ship",
    "stock", "disc", "num", "features", "variants",
)  # fmt: skip
_DISC_BY_NAME = {ATTR_NAMES[a]: a for a in DISC_ATTRS}
_NUM_BY_NAME = {ATTR_NAMES[a]: a for a in NUM_ATTRS}

PolicyMap = Mapping[str, str] | Callable[[str], str]


@dataclass
class LoadStats:
    """What the loader dropped or filled in, for logging by the caller."""

    rows: int = 0
    denied: int = 0
    duplicate_ids: int = 0
    default_price: int = 0
    default_rating: int = 0
    keyed_ship: int = 0
    keyed_stock: int = 0
    new_vocab: dict[str, list[str]] = field(default_factory=dict)


# --- parsing helpers -----------------------------------------------------------------------


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or v == ""


def _parse_float(v: Any) -> float | None:
    """First number in ``v`` ("$1,299.00" -> 1299.0, "65W" -> 65.0); None if absent."""
    if _missing(v) or isinstance(v, bool):
        return None
    if isinstance(v, int | float | np.integer | np.floating):
        x = float(v)
        return None if math.isnan(x) else x
    m = _NUMBER_RE.search(str(v))
    return float(m.group(0).replace(",", "")) if m else None


def _round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def _cat_parts(v: Any) -> list[str]:
    """Category path as a list of segments: "a/b/c", "a > b > c" or a list of segments."""
    if _missing(v):
        return []
    if isinstance(v, list | tuple | np.ndarray):
        parts = [str(p) for p in v]
    else:
        s = str(v)
        parts = s.split("/") if "/" in s or ">" not in s else s.split(">")
    return [p.strip() for p in parts if p.strip()]


def is_denied(cat_path: str) -> bool:
    """SPEC §1.1: denied if any lower-cased '/'-part is on the denied list."""
    return any(p.strip().lower() in DENIED_CATEGORY_PARTS for p in cat_path.split("/"))


def keyed_ship_stock(product_id: str) -> tuple[int, int]:
    """Keyed (ship_days, stock) of a real product (SPEC §1.1, §1.5).

    Seeded by the first 8 bytes (big-endian) of SHA-256(id), so a product keeps its values
    whatever else is in the catalog. Both draws are always made, in this order, so either
    value is the same whether or not the other was given.
    """
    seed = int.from_bytes(hashlib.sha256(product_id.encode("utf-8")).digest()[:8], "big")
    rng = np.random.Generator(np.random.PCG64(seed))
    ship = int(np.clip(rng.geometric(0.4), 1, 14))
    zero = bool(rng.random() < 0.1)
    pois = int(np.clip(rng.poisson(20.0), 1, 200))
    return ship, 0 if zero else pois


def _as_mapping(v: Any) -> dict[str, Any]:
    if _missing(v):
        return {}
    if isinstance(v, str):
        v = json.loads(v)
    if isinstance(v, Mapping):
        return dict(v)
    if isinstance(v, list):  # e.g. [{"name": ..., "value": ...}] or [(k, v), ...]
        out: dict[str, Any] = {}
        for item in v:
            if isinstance(item, Mapping) and "name" in item:
                out[str(item["name"])] = item.get("value")
            elif isinstance(item, list | tuple) and len(item) == 2:
                out[str(item[0])] = item[1]
        return out
    raise TypeError(f"cannot read attributes from {type(v).__name__}")


def _as_list(v: Any) -> list[Any]:
    if _missing(v):
        return []
    if isinstance(v, str):
        v = json.loads(v) if v.lstrip().startswith("[") else [v]
    return list(v)


def _attr_name(key: str) -> str:
    k = re.sub(r"[\s\-]+", "_", str(key).strip().lower())
    return ATTR_ALIASES.get(k, k)


class _Vocab:
    """Discrete vocabularies: the canonical values first, unknown values appended."""

    def __init__(self) -> None:
        self.values: dict[Attr, list[str]] = {a: list(VOCAB[a]) for a in DISC_ATTRS}
        self.index: dict[Attr, dict[str, int]] = {
            a: {v: j for j, v in enumerate(vals)} for a, vals in self.values.items()
        }
        self.canon: dict[Attr, dict[str, str]] = {
            a: {v.lower(): v for v in VOCAB[a]} for a in _CASED
        }
        self.new: dict[str, list[str]] = {}

    def code(self, attr: Attr, raw: Any) -> int:
        if isinstance(raw, list | tuple):
            raw = raw[0] if raw else None
        if _missing(raw):
            return -1
        s = str(raw).strip()
        if not s:
            return -1
        s = self.canon[attr].get(s.lower(), s) if attr in _CASED else s.lower()
        j = self.index[attr].get(s)
        if j is None:
            j = len(self.values[attr])
            self.values[attr].append(s)
            self.index[attr][s] = j
            self.new.setdefault(ATTR_NAMES[attr], []).append(s)
        return j


def _pick(row: Mapping[str, Any], names: Sequence[str]) -> Any:
    for name in names:
        if name in row and not _missing(row[name]):
            return row[name]
    return None


def _int_dtype(max_code: int) -> Any:
    """int16 where the codes fit (SPEC: smallest exact dtype), else int32."""
    return np.int16 if max_code <= _INT16_MAX else np.int32


def _display_names(paths: list[str]) -> list[str]:
    """Last segment with '_' -> ' '; clashing names grow parent segments until unique."""
    parts = [p.split("/") for p in paths]
    depth = [1] * len(paths)
    while True:
        names = [" ".join(ps[-d:]).replace("_", " ") for ps, d in zip(parts, depth, strict=True)]
        seen: dict[str, list[int]] = {}
        for j, nm in enumerate(names):
            seen.setdefault(nm, []).append(j)
        clash = [j for js in seen.values() if len(js) > 1 for j in js if depth[j] < len(parts[j])]
        if not clash:
            return names
        for j in clash:
            depth[j] += 1


def _policy_of(path: str, policy_map: PolicyMap | None) -> str:
    """User map (full path, then longest '/'-prefix), else the first segment, else home."""
    segs = path.split("/")
    if callable(policy_map):
        pol = policy_map(path)
    else:
        pol = None
        if policy_map:
            for d in range(len(segs), 0, -1):
                pol = policy_map.get("/".join(segs[:d]))
                if pol is not None:
                    break
        if pol is None:
            first = segs[0].lower()
            pol = first if first in POLICY_CATEGORIES else "home"
    if pol not in POLICY_CATEGORIES:
        raise ValueError(f"policy category {pol!r} of {path!r} not in {POLICY_CATEGORIES}")
    return pol


# --- main entry points ---------------------------------------------------------------------


def load_rows(
    rows: Iterable[Mapping[str, Any]],
    *,
    columns: Mapping[str, str | Sequence[str]] | None = None,
    policy_map: PolicyMap | None = None,
    embed_dim: int = EMBED_DIM,
    emb_dtype: Any = jnp.float32,
    stats: LoadStats | None = None,
) -> tuple[Catalog, CatalogTables]:
    """Build (Catalog, CatalogTables) from dict rows (a list, a generator, an HF Dataset).

    ``columns`` overrides DEFAULT_COLUMNS per field (a name or a list of candidates).
    ``policy_map`` maps a category path (or a '/'-prefix of it) to a policy category, or is
    a function of the path. ``stats``, if given, is filled with what was dropped or filled.
    """
    cols = dict(DEFAULT_COLUMNS)
    for k, v in (columns or {}).items():
        if k not in cols:
            raise KeyError(f"unknown catalog field {k!r}; fields are {sorted(cols)}")
        cols[k] = (v,) if isinstance(v, str) else tuple(v)
    st = stats if stats is not None else LoadStats()
    vocab = _Vocab()
    seen_ids: set[str] = set()
    rec: dict[str, list[Any]] = {k: [] for k in _REC_FIELDS}
    attr_cols = (*_DISC_BY_NAME, *_NUM_BY_NAME)

    for row in rows:
        st.rows += 1
        pid_raw = _pick(row, cols["product_id"])
        if pid_raw is None:
            raise ValueError(f"row {st.rows - 1} has no product id (columns {cols['product_id']})")
        pid = str(pid_raw)
        cat = "/".join(_cat_parts(_pick(row, cols["cat"]))) or "uncategorized"
        if is_denied(cat):
            st.denied += 1
            continue
        if pid in seen_ids:
            st.duplicate_ids += 1
            continue
        seen_ids.add(pid)

        price = _parse_float(_pick(row, cols["price"]))
        if price is None or price <= 0:
            price, st.default_price = 9.99, st.default_price + 1
        rating = _parse_float(_pick(row, cols["rating"]))
        if rating is None:
            rating, st.default_rating = 3.0, st.default_rating + 1
        rating = min(max(rating, 1.0), 5.0)
        rcount = _parse_float(_pick(row, cols["rating_count"]))
        ship = _parse_float(_pick(row, cols["ship_days"]))
        stock = _parse_float(_pick(row, cols["stock"]))
        if ship is None or stock is None:
            k_ship, k_stock = keyed_ship_stock(pid)
            if ship is None:
                ship, st.keyed_ship = k_ship, st.keyed_ship + 1
            if stock is None:
                stock, st.keyed_stock = k_stock, st.keyed_stock + 1

        attrs: dict[str, Any] = {}
        for a in attr_cols:  # top-level attribute columns, overridden by the attrs field
            if a in row and not _missing(row[a]):
                attrs[a] = row[a]
        for k, v in _as_mapping(_pick(row, cols["attrs"])).items():
            attrs[_attr_name(k)] = v
        disc = [vocab.code(a, attrs.get(ATTR_NAMES[a])) for a in DISC_ATTRS]
        num = []
        for a in NUM_ATTRS:
            x = _parse_float(attrs.get(ATTR_NAMES[a]))
            num.append(np.nan if x is None else x)

        brand = _pick(row, cols["brand"])
        store = _pick(row, cols["store"])
        rec["pid"].append(pid)
        rec["title"].append(str(_pick(row, cols["title"]) or ""))
        rec["desc"].append(str(_pick(row, cols["desc"]) or ""))
        rec["cat"].append(cat)
        rec["brand"].append(None if brand is None else str(brand).strip().lower() or None)
        rec["store"].append(None if store is None else str(store).strip() or None)
        rec["price"].append(_round_half_up(price * 100.0))
        rec["rating"].append(_round_half_up(rating * 100.0))
        rec["rating_count"].append(max(0, int(rcount)) if rcount is not None else 0)
        rec["ship"].append(int(min(max(ship, 1), 14)))
        rec["stock"].append(int(min(max(stock, 0), _INT16_MAX)))
        rec["disc"].append(disc)
        rec["num"].append(num)
        rec["features"].append([str(f) for f in _as_list(_pick(row, cols["features"]))])
        rec["variants"].append(_as_list(_pick(row, cols["variants"])))

    n = len(rec["pid"])
    if n == 0:
        raise ValueError(f"no products left after filtering {st.rows} rows")
    st.new_vocab = vocab.new
    return _assemble(rec, vocab, policy_map, embed_dim, emb_dtype)


def _assemble(
    rec: dict[str, list[Any]],
    vocab: _Vocab,
    policy_map: PolicyMap | None,
    embed_dim: int,
    emb_dtype: Any,
) -> tuple[Catalog, CatalogTables]:
    """Host lists -> device arrays, taxonomy, description keys and embeddings."""
    n = len(rec["pid"])
    paths = sorted(set(rec["cat"]))
    cat_idx = {p: j for j, p in enumerate(paths)}
    brands = sorted({b for b in rec["brand"] if b is not None})
    stores = sorted({s for s in rec["store"] if s is not None})
    b_idx = {b: j for j, b in enumerate(brands)}
    s_idx = {s: j for j, s in enumerate(stores)}
    category = np.array([cat_idx[c] for c in rec["cat"]], dtype=_int_dtype(len(paths)))
    brand = np.array([b_idx.get(b, -1) for b in rec["brand"]], dtype=_int_dtype(len(brands)))
    store = np.array([s_idx.get(s, -1) for s in rec["store"]], dtype=_int_dtype(len(stores)))
    num = np.array(rec["num"], dtype=np.float32).reshape(n, len(NUM_ATTRS))

    # Variants only where the source gives them (SPEC §1.5); the rest have none.
    var = {
        "count": np.zeros(n, np.int8),
        "color": np.full((n, MAX_VARIANTS), -1, np.int32),
        "size": np.full((n, MAX_VARIANTS), -1, np.int32),
        "delta": np.zeros((n, MAX_VARIANTS), np.int32),
        "stock": np.zeros((n, MAX_VARIANTS), np.int16),
    }
    for i, vs in enumerate(rec["variants"]):
        for j, v in enumerate(vs[:MAX_VARIANTS]):
            v = _as_mapping(v)
            var["color"][i, j] = vocab.code(Attr.COLOR, v.get("color"))
            var["size"][i, j] = vocab.code(Attr.SIZE, v.get("size"))
            delta = _parse_float(v.get("price_delta"))
            vprice = _parse_float(v.get("price"))
            if delta is None and vprice is not None:
                delta = vprice - rec["price"][i] / 100.0
            var["delta"][i, j] = _round_half_up((delta or 0.0) * 100.0)
            vstock = _parse_float(v.get("stock"))
            vstock = rec["stock"][i] if vstock is None else vstock
            var["stock"][i, j] = int(min(max(vstock, 0), _INT16_MAX))
            var["count"][i] = j + 1
    # Codes share one dtype, fixed after variants (which may add vocabulary values).
    vdt = _int_dtype(max(len(v) for v in vocab.values.values()))
    disc = np.array(rec["disc"], dtype=vdt).reshape(n, len(DISC_ATTRS))

    # Identifying-description keys (SPEC §8.0): dense ids of the lower-cased text forms.
    keys = np.zeros((n, 3), dtype=np.int32)
    for col, form in enumerate(_desc_forms(rec["title"], rec["brand"])):
        ids: dict[Any, int] = {}
        keys[:, col] = [ids.setdefault(f, len(ids)) for f in form]
    desc_form = np.full(n, DescForm.NONE, dtype=np.int8)
    for col, f in reversed(list(enumerate((DescForm.SHORT, DescForm.MEDIUM, DescForm.TITLE)))):
        unique = np.bincount(keys[:, col])[keys[:, col]] == 1
        desc_form[unique] = f
    # A product whose full title is shared is never a target, whatever its shorter forms.
    desc_form[np.bincount(keys[:, 2])[keys[:, 2]] != 1] = DescForm.NONE

    texts = [f"{t} {d}" for t, d in zip(rec["title"], rec["desc"], strict=True)]
    emb = embed_texts(texts, embed_dim)
    display = _display_names(paths)
    cat_emb = embed_texts(display, embed_dim)
    counts = np.bincount(category.astype(np.int64), minlength=len(paths))
    first = [p.split("/")[0].lower() for p in paths]

    catalog = Catalog(
        price_cents=jnp.asarray(np.array(rec["price"], dtype=np.int32)),
        rating_x100=jnp.asarray(np.array(rec["rating"], dtype=np.int16)),
        rating_count=jnp.asarray(
            np.minimum(np.array(rec["rating_count"], dtype=np.int64), 2**31 - 1).astype(np.int32)
        ),
        ship_days=jnp.asarray(np.array(rec["ship"], dtype=np.int8)),
        stock=jnp.asarray(np.array(rec["stock"], dtype=np.int16)),
        category=jnp.asarray(category),
        brand=jnp.asarray(brand),
        store=jnp.asarray(store),
        adj=jnp.full(n, -1, jnp.int16),
        noun=jnp.full(n, -1, jnp.int16),
        model=jnp.full(n, -1, jnp.int16),
        disc=jnp.asarray(disc),
        num=jnp.asarray(num),
        var_count=jnp.asarray(var["count"]),
        var_color=jnp.asarray(var["color"].astype(vdt)),
        var_size=jnp.asarray(var["size"].astype(vdt)),
        var_price_delta=jnp.asarray(var["delta"]),
        var_stock=jnp.asarray(var["stock"]),
        desc_form=jnp.asarray(desc_form),
        desc_key=jnp.asarray(keys),
        emb=jnp.asarray(emb, dtype=emb_dtype),
        cat_order=jnp.asarray(np.argsort(category, kind="stable").astype(np.int32)),
        cat_offsets=jnp.asarray(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)),
        cat_policy=jnp.asarray(
            np.array([POLICY_CATEGORIES.index(_policy_of(p, policy_map)) for p in paths], np.int8)
        ),
        cat_group=jnp.asarray(
            np.array([GROUPS.index(f) if f in GROUPS else -1 for f in first], np.int8)
        ),
        cat_denied=jnp.asarray(np.array([is_denied(p) for p in paths], dtype=bool)),
        cat_emb=jnp.asarray(cat_emb, dtype=jnp.float32),
        max_cat_size=int(counts.max()) if counts.size else 0,
    )
    tables = CatalogTables(
        product_ids=rec["pid"],
        titles=rec["title"],
        cat_paths=paths,
        cat_leaves=[p.split("/")[-1] for p in paths],
        cat_display=display,
        brands=brands,
        stores=stores,
        vocab={int(a): vals for a, vals in vocab.values.items()},
        descs=rec["desc"],
        features=rec["features"],
    )
    return catalog, tables


def _desc_forms(titles: list[str], brands: list[str | None]) -> Iterator[list[Any]]:
    """SHORT: (first 3 title words, brand); MEDIUM: first 6 words; TITLE: all words."""
    words = [t.lower().split() for t in titles]
    yield [(tuple(w[:3]), b) for w, b in zip(words, brands, strict=True)]
    yield [tuple(w[:6]) for w in words]
    yield [tuple(w) for w in words]


def load_parquet(
    path: str | PathLike[str], *, batch_size: int = 65536, **kwargs: Any
) -> tuple[Catalog, CatalogTables]:
    """Load a parquet catalog with pyarrow, streaming record batches into ``load_rows``."""
    import pyarrow.parquet as pq

    def rows() -> Iterator[dict[str, Any]]:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_size):
            yield from batch.to_pylist()

    return load_rows(rows(), **kwargs)


def load_catalog(
    source: str | PathLike[str] | Iterable[Mapping[str, Any]], **kwargs: Any
) -> tuple[Catalog, CatalogTables]:
    """A path loads parquet; anything else is iterated as dict rows (e.g. an HF Dataset)."""
    if isinstance(source, str | PathLike):
        return load_parquet(source, **kwargs)
    return load_rows(source, **kwargs)
