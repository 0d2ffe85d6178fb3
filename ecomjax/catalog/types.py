"""Device catalog arrays and their host string tables (SPEC §1, DESIGN "Data model").

The catalog is an argument of every function and is broadcast across the batch, never
closed over or copied per episode. Each array is held at its smallest exact dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
from flax import struct


@struct.dataclass
class Catalog:
    """Structure of arrays over N products and C categories.

    Money is integer cents and rating integer hundredths, so comparisons are exact.
    """

    price_cents: jax.Array  # int32 [N]
    rating_x100: jax.Array  # int16 [N], 100..500
    rating_count: jax.Array  # int32 [N]
    ship_days: jax.Array  # int8 [N], 1..14
    stock: jax.Array  # int16 [N], base stock before any episode overlay
    category: jax.Array  # int16 [N], leaf index into the taxonomy
    brand: jax.Array  # int16 [N]
    store: jax.Array  # int16 [N]
    adj: jax.Array  # int16 [N] (synthetic; -1 for real catalogs)
    noun: jax.Array  # int16 [N] (global noun index; -1 for real catalogs)
    model: jax.Array  # int16 [N] (synthetic model number; -1 for real catalogs)
    disc: jax.Array  # int16 [N, A_DISC], vocabulary codes, -1 = missing
    num: jax.Array  # float32 [N, A_NUM], NaN = missing
    # Catalog variants (SPEC §1.4): 2-4 per product, distinct colours.
    var_count: jax.Array  # int8 [N]
    var_color: jax.Array  # int16 [N, MAX_VARIANTS], -1 beyond var_count
    var_size: jax.Array  # int16 [N, MAX_VARIANTS], -1 = no size
    var_price_delta: jax.Array  # int32 [N, MAX_VARIANTS], cents
    var_stock: jax.Array  # int16 [N, MAX_VARIANTS]
    # Identifying descriptions (SPEC §8.0) scoped to the whole catalog: the first form that
    # is unique, and one integer key per form so that "matches" is key equality.
    desc_form: jax.Array  # int8 [N], DescForm; NONE = full title not unique (never a target)
    desc_key: jax.Array  # int32 [N, 3], keys of forms SHORT, MEDIUM, TITLE
    emb: jax.Array  # float32 or bfloat16 [N, D], L2-normalised (zero rows stay zero)
    # Category index: product indices sorted by category, and offsets into that order.
    cat_order: jax.Array  # int32 [N]
    cat_offsets: jax.Array  # int32 [C + 1]
    # Per-category tables.
    cat_policy: jax.Array  # int8 [C], index into POLICY_CATEGORIES
    cat_group: jax.Array  # int8 [C], index into vocabulary.GROUPS (-1 = none)
    cat_denied: jax.Array  # bool [C], SPEC §1.1 denied categories (safety backstop)
    cat_emb: jax.Array  # float32 [C, D], embedding of each category's display name
    # Static: rows of the largest category (0 = unknown). A category-filtered search then
    # scans that many rows of ``cat_order`` instead of the whole catalog (same results).
    max_cat_size: int = struct.field(pytree_node=False, default=0)
    # Static: the mesh axis ``emb`` is split on by rows (None: whole). Inside ``shard_map``
    # each device then holds its own block of rows (padded), and every read of ``emb`` goes
    # through ``catalog.sharded_emb``; the other columns stay whole (issue 19).
    emb_axis: str | None = struct.field(pytree_node=False, default=None)

    @property
    def n_products(self) -> int:
        return int(self.price_cents.shape[0])

    @property
    def n_categories(self) -> int:
        return int(self.cat_policy.shape[0])

    @property
    def embed_dim(self) -> int:
        return int(self.emb.shape[1])

    def nbytes(self) -> int:
        return int(sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(self)))


@dataclass
class CatalogTables:
    """Host-side strings indexed by the same codes as the device arrays."""

    product_ids: list[str] | None  # None for synthetic catalogs: ids are syn_{i:06d}
    titles: list[str] | None  # None for synthetic catalogs: rebuilt from codes
    cat_paths: list[str]
    cat_leaves: list[str]
    cat_display: list[str]
    brands: list[str]
    stores: list[str]
    adjectives: list[str] = field(default_factory=list)
    nouns: list[str] = field(default_factory=list)
    vocab: dict[int, list[str]] = field(default_factory=dict)  # Attr -> discrete values
    # Real catalogs only (None for synthetic, whose text is rebuilt from codes).
    descs: list[str] | None = None
    features: list[list[str]] | None = None

    def product_id(self, i: int) -> str:
        return self.product_ids[i] if self.product_ids is not None else f"syn_{i:06d}"
