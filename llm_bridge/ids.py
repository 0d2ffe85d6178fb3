"""Id strings <-> the integer codes the device arrays carry (SPEC §1.1, §1.8, §5.2, §8.3).

Why one module for both directions: the renderer that writes ``ord_001_line_02`` and the
parser that reads it back must agree to the character, so both go through ``IdCodec``.

Codes follow the device conventions:
- products: catalog index; an id string the catalog does not know gets a code <= -2,
  numbered per episode (-2, -3, ...) so that distinct made-up ids stay distinct for the
  hallucination count (SPEC §7) and the tools answer ``unknown_product`` (a business
  error, not a hard fail);
- variants: index in the product's variant list (catalog ``{pid}_v{j}``, j from 1, or the
  3 synthesized CART variants ``{pid}_v_{attr}_{value}``); -1 = null, -2 = unknown or
  not a variant of this product;
- orders ``ord_{k:03d}`` -> k - 1; order lines ``{order_id}_line_{j:02d}`` -> j - 1 within
  that order; cart lines ``line_{n:03d}`` -> n; returns ``ret_{n:03d}`` -> n; anything
  else -> -2 (the tools answer unknown_order / unknown_line / unknown_return).
-1 always means "absent", which the device validator treats as a missing argument.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ecomjax import constants as C

UNKNOWN = -2
MAX_UNKNOWN_IDS = 1 << 16  # distinct made-up product ids numbered per episode, then shared
INT32_MAX = 2**31 - 1
_ORD_RE = re.compile(r"ord_(\d{3,9})")
_CART_LINE_RE = re.compile(r"line_(\d{3,9})")
_RET_RE = re.compile(r"ret_(\d{3,9})")
_SYN_RE = re.compile(r"syn_(\d{6,9})")
_CAT_VAR_RE = re.compile(r"(.+)_v(\d{1,2})")
_RUN_RE = re.compile(r"[^\W_]+")  # alphanumeric runs (Unicode)
_ID_TOKEN_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-.]*[A-Za-z0-9]|[A-Za-z0-9]")


def _norm(s: str) -> str:
    """Filter-value matching (SPEC §1.2, §1.3): trimmed, case-insensitive, "_" as " "."""
    return " ".join(s.strip().lower().replace("_", " ").split())


def _fmt_value(attr: int, value: float, vocab: dict[int, list[str]]) -> str:
    """Variant value text for ids (SPEC §8.3): vocabulary word, or a number without
    trailing zeros; spaces and "/" become "_"; cut to 20 characters."""
    if attr in vocab:
        words = vocab[attr]
        code = int(round(value))
        text = words[code] if 0 <= code < len(words) else str(code)
    else:
        text = f"{float(value):.4f}".rstrip("0").rstrip(".")
    return text.replace(" ", "_").replace("/", "_")[:20]


@dataclass
class CatalogIds:
    """Static, per-catalog string tables (build once, share across episodes)."""

    n_products: int
    product_ids: list[str] | None  # None: synthetic ids syn_{i:06d}
    titles: list[str]
    cat_codes: dict[str, int]  # normalised path / leaf / display name -> category
    brand_codes: dict[str, int]
    store_codes: dict[str, int]
    vocab: dict[int, list[str]]  # Attr -> discrete values
    vocab_codes: dict[int, dict[str, int]]
    embed_dim: int = C.EMBED_DIM
    _id_index: dict[str, int] = field(default_factory=dict, repr=False)
    _title_index: dict[tuple[str, ...], list[tuple[str, int, int]]] = field(
        default_factory=dict, repr=False
    )

    def __post_init__(self) -> None:
        if self.product_ids is not None:
            self._id_index = {}
            for i, s in enumerate(self.product_ids):
                self._id_index.setdefault(s, i)
        # Titles keyed by their first two alphanumeric runs: a message is scanned run by
        # run and only the few titles starting with those runs are compared. An ambiguous
        # title names its lowest index (such products are never targets, SPEC §8.0).
        seen: set[str] = set()
        for i, t in enumerate(self.titles):
            runs = list(_RUN_RE.finditer(t)) if t else []
            if not runs or t in seen:
                continue
            seen.add(t)
            key = tuple(m.group() for m in runs[:2])
            self._title_index.setdefault(key, []).append((t, i, runs[0].start()))
        for bucket in self._title_index.values():
            bucket.sort(key=lambda x: -len(x[0]))  # longest match first

    @classmethod
    def from_catalog(cls, catalog, tables) -> CatalogIds:
        """From a ``Catalog`` (device or host arrays) and its ``CatalogTables``."""
        import jax

        from ecomjax.catalog.synthetic import render_title

        host = jax.device_get(catalog)
        n = int(np.asarray(host.price_cents).shape[0])
        if tables.titles is not None:
            titles = list(tables.titles)
        else:
            adj, brand = np.asarray(host.adj), np.asarray(host.brand)
            noun, model = np.asarray(host.noun), np.asarray(host.model)
            titles = [
                render_title(
                    tables.adjectives[adj[i]],
                    tables.brands[brand[i]],
                    tables.nouns[noun[i]],
                    int(model[i]),
                )
                for i in range(n)
            ]
        cat_codes: dict[str, int] = {}
        # Later names never override earlier ones: display names first, as they are unique.
        for names in (tables.cat_display, tables.cat_paths, tables.cat_leaves):
            for c, name in enumerate(names):
                cat_codes.setdefault(_norm(name), c)
        vocab = {int(a): list(v) for a, v in tables.vocab.items()}
        return cls(
            n_products=n,
            product_ids=None if tables.product_ids is None else list(tables.product_ids),
            titles=titles,
            cat_codes=cat_codes,
            brand_codes=_first_codes(tables.brands),
            store_codes=_first_codes(tables.stores),
            vocab=vocab,
            vocab_codes={a: _first_codes(v) for a, v in vocab.items()},
            embed_dim=int(np.asarray(host.emb).shape[1]),
        )

    # --- products ---------------------------------------------------------------------

    def product_id(self, i: int) -> str:
        return self.product_ids[i] if self.product_ids is not None else f"syn_{i:06d}"

    def known_product(self, s: str) -> int:
        """Catalog index of an id string, or -1 if the catalog does not know it."""
        if not isinstance(s, str):
            return -1
        if self.product_ids is not None:
            return self._id_index.get(s, -1)
        m = _SYN_RE.fullmatch(s)
        if m is None:
            return -1
        i = int(m.group(1))
        return i if i < self.n_products and s == f"syn_{i:06d}" else -1

    def find_titles(self, text: str) -> list[tuple[int, int]]:
        """(position, product) of every exact title in ``text`` at word boundaries."""
        out: list[tuple[int, int]] = []
        runs = list(_RUN_RE.finditer(text))
        for r, m in enumerate(runs):
            keys = [(m.group(),)]
            if r + 1 < len(runs):
                keys.insert(0, (m.group(), runs[r + 1].group()))
            hit = None
            for key in keys:
                for title, i, lead in self._title_index.get(key, ()):
                    start, end = m.start() - lead, m.start() - lead + len(title)
                    if (
                        start >= 0
                        and text.startswith(title, start)
                        and (start == 0 or not (text[start - 1].isalnum() and title[0].isalnum()))
                        and (end == len(text) or not (text[end].isalnum() and title[-1].isalnum()))
                    ):
                        hit = (start, i)
                        break
                if hit:
                    break
            if hit:
                out.append(hit)
        return out

    # --- filter values (SPEC §1.2, §1.3) ----------------------------------------------------

    def filter_code(self, attr: int, value: str) -> int:
        """Code of a discrete filter value; -2 if no product can have it (matches nothing)."""
        key = _norm(value)
        if attr == C.Attr.CAT:
            return self.cat_codes.get(key, UNKNOWN)
        if attr == C.Attr.BRAND:
            return self.brand_codes.get(key, UNKNOWN)
        if attr == C.Attr.STORE:
            return self.store_codes.get(key, UNKNOWN)
        return self.vocab_codes.get(int(attr), {}).get(key, UNKNOWN)


def _first_codes(names: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for i, name in enumerate(names):
        out.setdefault(_norm(name), i)
    return out


@dataclass
class IdCodec:
    """Per-episode codec: the catalog tables plus this episode's order history sizes,
    synthesized variants and the numbering of made-up product ids.

    ``n_orders`` / ``order_n_lines`` may be None (no history known): then any well-formed
    order or line id maps to its index and the device decides whether it exists.
    """

    cat: CatalogIds
    n_orders: int | None = None
    order_n_lines: tuple[int, ...] | None = None
    # product index -> the ids of its 3 synthesized variants, in device variant order.
    synth_variants: dict[int, tuple[str, ...]] = field(default_factory=dict)
    # POLICY: whether the episode's topic is categorical (None: decide from the text).
    policy_categorical: bool | None = None
    _unknown: dict[str, int] = field(default_factory=dict, repr=False)

    @classmethod
    def from_problem(cls, cat: CatalogIds, problem) -> IdCodec:
        """For one (unbatched) ``Problem``: order sizes, CART variants, policy topic kind."""
        import jax

        from ecomjax import policy_rules as P

        p = jax.device_get(problem)
        n_orders = int(np.asarray(p.n_orders))
        n_lines = tuple(int(x) for x in np.asarray(p.order_n_lines)[: max(n_orders, 0)])
        synth: dict[int, tuple[str, ...]] = {}
        item_pid, req = np.asarray(p.item_pid), np.asarray(p.item_var_req)
        attrs, vals = np.asarray(p.item_var_attr), np.asarray(p.item_var_vals)
        for k in range(item_pid.shape[0]):
            pid = int(item_pid[k])
            if pid >= 0 and bool(req[k]):
                base = cat.product_id(pid)
                name = C.ATTR_NAMES[int(attrs[k])]
                synth[pid] = tuple(
                    f"{base}_v_{name}_{_fmt_value(int(attrs[k]), float(v), cat.vocab)}"
                    for v in vals[k]
                )
        topic = int(np.asarray(p.pol_topic))
        categorical = bool(P.TABLES.topic_categorical[topic]) if topic >= 0 else None
        return cls(cat, n_orders, n_lines, synth, categorical)

    # --- encoding (for renderers) -----------------------------------------------------------

    def product_id(self, i: int) -> str:
        return self.cat.product_id(i)

    def variant_id(self, pid: int, j: int) -> str:
        if pid in self.synth_variants:
            return self.synth_variants[pid][j]
        return f"{self.cat.product_id(pid)}_v{j + 1}"

    @staticmethod
    def order_id(o: int) -> str:
        return f"ord_{o + 1:03d}"

    def order_line_id(self, o: int, j: int) -> str:
        return f"{self.order_id(o)}_line_{j + 1:02d}"

    @staticmethod
    def cart_line_id(n: int) -> str:
        return f"line_{n:03d}"

    @staticmethod
    def return_id(n: int) -> str:
        return f"ret_{n:03d}"

    @staticmethod
    def exchange_id(n: int) -> str:
        return f"exc_{n:03d}"

    # --- decoding ---------------------------------------------------------------------------

    def product(self, s: str) -> int:
        """Catalog index, or this episode's code <= -2 for an id the catalog lacks."""
        i = self.cat.known_product(s)
        if i >= 0:
            return i
        code = self._unknown.get(s)
        if code is None:
            code = UNKNOWN - min(len(self._unknown), MAX_UNKNOWN_IDS)
            if len(self._unknown) < MAX_UNKNOWN_IDS:
                self._unknown[s] = code
        return code

    def variant(self, s: str | None, pid: int) -> int:
        """Variant index of ``s`` for product ``pid``; -1 for null; -2 if unknown or not a
        variant of this product (the tool answers unknown_variant)."""
        if s is None:
            return -1
        if pid < 0:
            return UNKNOWN
        synth = self.synth_variants.get(pid)
        if synth is not None:  # this episode shows exactly these 3 (catalog ones hidden)
            return synth.index(s) if s in synth else UNKNOWN
        m = _CAT_VAR_RE.fullmatch(s)
        if m is None or m.group(1) != self.cat.product_id(pid):
            return UNKNOWN
        j = int(m.group(2))
        ok = 1 <= j <= C.MAX_VARIANTS and s == f"{m.group(1)}_v{j}"
        return j - 1 if ok else UNKNOWN

    def order(self, s: str) -> int:
        m = _ORD_RE.fullmatch(s)
        if m is None:
            return UNKNOWN
        k = int(m.group(1))
        limit = self.n_orders if self.n_orders is not None else C.MAX_ORDERS
        return k - 1 if 1 <= k <= limit and s == self.order_id(k - 1) else UNKNOWN

    def order_line(self, s: str, order: int) -> int:
        """Line index of ``{order_id}_line_{j:02d}`` within ``order``; -2 if the id names
        another order, no order, or a line the order lacks."""
        if order < 0:
            return UNKNOWN
        prefix = f"{self.order_id(order)}_line_"
        if not s.startswith(prefix):
            return UNKNOWN
        tail = s[len(prefix) :]
        if not (2 <= len(tail) <= 3 and tail.isdigit() and tail.isascii()):
            return UNKNOWN
        j = int(tail)
        if self.order_n_lines is not None and order < len(self.order_n_lines):
            limit = self.order_n_lines[order]
        else:
            limit = C.MAX_ORDER_LINES
        return j - 1 if 1 <= j <= limit and tail == f"{j:02d}" else UNKNOWN

    def cart_line(self, s: str) -> int:
        m = _CART_LINE_RE.fullmatch(s)
        if m is None:
            return UNKNOWN
        n = int(m.group(1))
        return n if n >= 1 and s == self.cart_line_id(n) else UNKNOWN

    def return_number(self, s: str) -> int:
        m = _RET_RE.fullmatch(s)
        if m is None:
            return UNKNOWN
        n = int(m.group(1))
        return n if n >= 1 and s == self.return_id(n) else UNKNOWN

    def presented(self, text: str, limit: int = C.MAX_PRESENTED) -> list[int]:
        """Products a message presents, by id (or a variant id) or exact title, in order of
        first mention; made-up ids are ignored (text may mention anything)."""
        hits: list[tuple[int, int]] = []
        for m in _ID_TOKEN_RE.finditer(text):
            tok = m.group()
            i = self.cat.known_product(tok)
            if i < 0:
                i = self._variant_owner(tok)
            if i >= 0:
                hits.append((m.start(), i))
        hits.extend(self.cat.find_titles(text))
        hits.sort()
        out: list[int] = []
        for _, i in hits:
            if i not in out:
                out.append(i)
                if len(out) == limit:
                    break
        return out

    def _variant_owner(self, tok: str) -> int:
        if "_v" not in tok:
            return -1
        for pid, ids in self.synth_variants.items():
            if tok in ids:
                return pid
        m = _CAT_VAR_RE.fullmatch(tok)
        if m is None:
            return -1
        pid = self.cat.known_product(m.group(1))
        return pid if pid >= 0 and self.variant(tok, pid) >= 0 else -1
