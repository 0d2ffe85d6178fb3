"""The SPEC §4.4 transcript: system message, assistant echoes, tool results (§5), events.

Why on the host and from arrays: the device returns compact ``ToolResults`` rows (product
indices, quantities, per-call facts); the JSON an agent reads is built here from those
rows, the catalog's host strings and the ids of ``IdCodec``. Nothing here reads the hidden
goal: a tool message says only what its row says.

Also here: ``action_to_turn``, the inverse of ``parse.parse_turn`` for array agents. It
writes an ``Action`` as (message, calls, answer), so a scripted or learned array agent
(the oracle included) can be driven through the text bridge, and tests can check the
text -> arrays -> text round trip.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from ecomjax import constants as C
from ecomjax import policy_rules as P
from ecomjax.catalog.synthetic import product_card, product_desc
from ecomjax.llm_bridge import schemas as SC
from ecomjax.llm_bridge.ids import IdCodec
from ecomjax.llm_bridge.templates import EPOCH, Lexicon, day_text, exact_text
from ecomjax.order_history import INELIGIBLE_NAMES, METHOD_NAMES, REASON_NAMES, OrderStatus
from ecomjax.registry import by_env
from ecomjax.types import Action, ToolResults

T = C.Tool
E = C.Env
TE = C.ToolError

ERROR_MESSAGES: dict[int, str] = {
    TE.UNKNOWN_PRODUCT: "No product has this id.",
    TE.UNKNOWN_VARIANT: "This variant does not exist for this product.",
    TE.OUT_OF_STOCK: "This item is out of stock.",
    TE.INSUFFICIENT_STOCK: "Not enough units are in stock.",
    TE.UNKNOWN_LINE: "No line has this id.",
    TE.UNKNOWN_ORDER: "No order has this id.",
    TE.UNKNOWN_RETURN: "No return has this id.",
    TE.INELIGIBLE: "This line is not eligible for return.",
    TE.ALREADY_RETURNED: "This line already has an active return.",
    TE.ALREADY_CANCELLED: "This return is already cancelled.",
    TE.CART_FULL: f"The cart holds at most {C.MAX_CART_LINES} lines.",
    TE.TOO_MANY_RETURNS: f"An account holds at most {C.MAX_RETURNS} returns.",
}
HARD_FAIL_NAMES: tuple[str, ...] = tuple(h.name.lower() for h in C.HardFail)


def _round(x: float, nd: int) -> float:
    return round(float(x), nd)


def weekday(day: int) -> str:
    return (EPOCH + _dt.timedelta(days=int(day))).strftime("%A")


def system_message(
    env: int | None,
    today: int,
    t_max: int,
    b_tool: int,
    submit_tool: bool = True,
) -> dict:
    """The SPEC §4.4 system message. ``env`` None: the env is not disclosed."""
    lines = [
        "You are a shopping assistant for an online store, talking with one customer.",
        f"Today is {day_text(today)} ({weekday(today)}).",
        f"You have at most {t_max} turns and at most {b_tool} tool calls per turn.",
        "Ask the customer questions only through the ask_user tool (name the slots you ask "
        "about); the customer answers after your turn.",
        "Recommend, add to the cart or exchange only products whose ids a tool returned to "
        "you; never invent ids.",
        "The customer sees the cart and the returns.",
    ]
    if submit_tool:
        lines.append(
            "Finish by calling submit_answer with the answer object (done=false stores an "
            "answer and keeps the conversation going)."
        )
    if env is not None:
        # what the env asks of the agent (SPEC §8): its descriptor's text
        fam = by_env(env)
        name = fam.name
        lines.append(f"Task ({name}): {fam.task_text}")
        schema = json.dumps(SC.answer_schema(name), separators=(",", ":"))
        lines.append(f"Answer schema: {schema}")
    return {"role": "system", "content": "\n".join(lines)}


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(", ", ": "))


def error(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message}}


# --- tool results ------------------------------------------------------------------------------


@dataclass
class ResultRenderer:
    """Renders one episode's ``ToolResults`` rows as SPEC §5 JSON. ``synth`` maps a CART
    variant-required product to its (attribute, three values): the variants the tools
    show for it in this episode (§8.3)."""

    lexicon: Lexicon
    codec: IdCodec
    synth: dict[int, tuple[int, tuple[float, ...]]] = field(default_factory=dict)
    _cards: dict[int, dict] = field(default_factory=dict, repr=False)

    @property
    def catalog(self):
        return self.lexicon.catalog

    @property
    def tables(self):
        return self.lexicon.tables

    def pid(self, i: int) -> str:
        return self.codec.product_id(int(i))

    def title(self, i: int) -> str:
        return self.base_card(i)["title"]

    def price(self, i: int) -> float:
        return self.base_card(i)["price"]

    def base_card(self, i: int) -> dict:
        i = int(i)
        card = self._cards.get(i)
        if card is None:
            # has_variants is the catalog's: marking the CART targets' synthesized variants
            # on every card would single the targets out (catalog_get_variants shows them).
            card = product_card(self.catalog, self.tables, i)
            self._cards[i] = card
        return card

    def card(self, i: int, stock_qty: int, score: float | int | None = None) -> dict:
        c = self.base_card(i)
        out = {k: c[k] for k in ("product_id", "title", "cat", "brand", "store", "price")}
        out.update(
            rating=c["rating"],
            rating_count=c["rating_count"],
            ship_days=c["ship_days"],
            stock_qty=int(stock_qty),
            attrs=dict(c["attrs"]),
            has_variants=c["has_variants"],
        )
        if score is not None:
            out["score"] = score
        return out

    def record(self, i: int, stock_qty: int, variant_count: int) -> dict:
        out = self.card(i, stock_qty)
        out["desc"] = product_desc(self.catalog, self.tables, int(i))
        feats = self.tables.features
        out["features"] = list(feats[int(i)]) if feats is not None else []
        out["variant_count"] = int(variant_count)
        return out

    # -- variants ---------------------------------------------------------------------------

    def variant_info(self, pid: int, j: int) -> dict:
        """variant_id, color, size, attrs, price and description of variant j of pid."""
        pid, j = int(pid), int(j)
        base = self.price(pid)
        if pid in self.synth:
            attr, values = self.synth[pid]
            v = values[j]
            name = C.ATTR_NAMES[attr]
            text = self._value_text(attr, v)
            return {
                "variant_id": self.codec.variant_id(pid, j),
                "color": text if attr == C.Attr.COLOR else None,
                "size": text if attr == C.Attr.SIZE else None,
                "attrs": {name: text if attr < C.Attr.PRICE else float(exact_text(v))},
                "price": base,
                "description": f"{name}: {text}",
            }
        cat = self.catalog
        color = int(cat.var_color[pid, j])
        size = int(cat.var_size[pid, j])
        attrs: dict[str, Any] = {}
        desc = []
        if color >= 0:
            attrs["color"] = self.lexicon.disc_value(C.Attr.COLOR, color)
            desc.append(f"color: {attrs['color']}")
        if size >= 0:
            attrs["size"] = self.lexicon.disc_value(C.Attr.SIZE, size)
            desc.append(f"size: {attrs['size']}")
        return {
            "variant_id": self.codec.variant_id(pid, j),
            "color": attrs.get("color"),
            "size": attrs.get("size"),
            "attrs": attrs,
            "price": _round(base + int(cat.var_price_delta[pid, j]) / 100.0, 2),
            "description": ", ".join(desc),
        }

    def _value_text(self, attr: int, v: float) -> str:
        if attr < C.Attr.PRICE:
            return self.lexicon.disc_value(attr, v)
        return exact_text(v)

    # -- one call ---------------------------------------------------------------------------

    def content(self, res: ToolResults, action: Action, i: int, call: Mapping | None) -> Any:
        """The JSON result of call slot ``i`` (numpy ``res`` / ``action``). ``call`` is the
        parser's record of the call (arguments, rerank candidates), when there is one."""
        tool = int(res.tool[i])
        err = int(res.error[i])
        if err != TE.NONE:
            try:
                code = TE(err).name.lower()
            except ValueError:
                code = f"error_{err}"
            return error(code, ERROR_MESSAGES.get(err, "The call failed."))
        fn = _DISPATCH.get(tool)
        if fn is None:
            return error("unsupported_tool", f"No renderer for tool {tool}.")
        return fn(self, res, action, i, call or {})

    def _search(self, res, action, i, call):
        s = res.search
        mode = int(action.enum_a[i])
        similar = int(action.product[i]) != -1
        out = []
        for j in range(s.ids.shape[-1]):
            pid = int(s.ids[i, j])
            if pid < 0:
                continue
            sc = float(s.score[i, j])
            if similar or mode == C.SortBy.RELEVANCE:
                score: float | int = _round(sc, 4)
            elif mode == C.SortBy.SHIP_DAYS_ASC:
                score = int(round(sc))
            else:
                score = _round(sc, 2)
            out.append(self.card(pid, int(s.stock[i, j]), score))
        return {
            "results": out,
            "top_k_applied": int(s.top_k[i]),
            "total_matches": int(s.total[i]),
        }

    def _rerank(self, res, action, i, call):
        """catalog_rerank is scored here: the device has no rows for it (its candidates
        are text-side only); cos(query, product) over the known candidates."""
        names = list((call.get("arguments") or {}).get("candidate_product_ids") or [])
        codes = list(call.get("candidates") or [])
        q = np.asarray(action.query_emb[i], np.float32)
        emb = np.asarray(self.catalog.emb)
        n = emb.shape[0]
        seen: set[int] = set()
        known: list[int] = []
        unknown: list[str] = []
        for name, c in zip(names, codes, strict=False):
            if 0 <= c < n:
                if c not in seen:
                    seen.add(c)
                    known.append(c)
            elif name not in unknown:
                unknown.append(name)
        scores = emb[known].astype(np.float32) @ q if known else np.zeros(0, np.float32)
        order = sorted(range(len(known)), key=lambda k: (-float(scores[k]), known[k]))
        top = int(np.clip(int(action.qty[i]), 1, 100))
        return {
            "results": [
                {"product_id": self.pid(known[k]), "score": _round(scores[k], 4)}
                for k in order[:top]
            ],
            "unknown_ids": unknown,
        }

    def _product(self, res, action, i, call):
        return self.record(int(res.ids[i, 0]), int(res.qty[i, 0]), int(res.aux[i, 0]))

    def _variants(self, res, action, i, call):
        out = []
        for j in range(int(res.count[i])):
            pid, v = int(res.ids[i, j]), int(res.var[i, j])
            info = self.variant_info(pid, v)
            out.append(
                {
                    "variant_id": info["variant_id"],
                    "product_id": self.pid(pid),
                    "color": info["color"],
                    "size": info["size"],
                    "attrs": info["attrs"],
                    "price": info["price"],
                    "stock_qty": int(res.qty[i, j]),
                    "description": info["description"],
                }
            )
        return out

    def _categories(self, res, action, i, call):
        t = self.tables
        return [
            {
                "cat": t.cat_paths[int(res.ids[i, j])],
                "display_name": t.cat_display[int(res.ids[i, j])],
                "count": int(res.qty[i, j]),
            }
            for j in range(int(res.count[i]))
        ]

    def _cart(self, res, action, i, call):
        lines = []
        total = 0.0
        for j in range(int(res.count[i])):
            pid, v, qty = int(res.ids[i, j]), int(res.var[i, j]), int(res.qty[i, j])
            info = self.variant_info(pid, v) if v >= 0 else None
            price = info["price"] if info else self.price(pid)
            total += price * qty
            lines.append(
                {
                    "line_id": self.codec.cart_line_id(int(res.aux[i, j])),
                    "product_id": self.pid(pid),
                    "variant_id": info["variant_id"] if info else None,
                    "title": self.title(pid),
                    "variant_description": info["description"] if info else None,
                    "qty": qty,
                    "unit_price": price,
                }
            )
        return {"lines": lines, "total_items": int(res.total[i]), "total_price": _round(total, 2)}

    def _order_header(self, res, i: int, o: int) -> dict:
        status = int(res.ord_status[i, o])
        out: dict[str, Any] = {
            "order_id": self.codec.order_id(o),
            "status": OrderStatus(status).name,
            "order_date": day_text(int(res.ord_date[i, o])),
        }
        aux = int(res.ord_aux[i, o])
        if status == OrderStatus.DELIVERED:
            out["delivered_date"] = day_text(aux)
        elif status != OrderStatus.CANCELLED:
            out["eta_date"] = day_text(aux)
        track = int(res.ord_track[i, o])
        if track >= 0:
            out["tracking_number"] = f"TRK{track:09d}"
        return out

    def _order_lines(self, res, i: int) -> dict[int, list[tuple[int, int, int]]]:
        """order index -> [(line index, product, qty)], orders in row order."""
        out: dict[int, list[tuple[int, int, int]]] = {}
        for j in range(int(res.count[i])):
            o = int(res.var[i, j])
            out.setdefault(o, []).append(
                (int(res.aux[i, j]), int(res.ids[i, j]), int(res.qty[i, j]))
            )
        return out

    def _order_list(self, res, action, i, call):
        out = []
        for o, lines in self._order_lines(res, i).items():
            head = self._order_header(res, i, o)
            out.append(
                {
                    "order_id": head["order_id"],
                    "order_date": head["order_date"],
                    "status": head["status"],
                    "item_count": sum(q for _, _, q in lines),
                    "items": [
                        {
                            "line_id": self.codec.order_line_id(o, j),
                            "product_id": self.pid(p),
                            "title": self.title(p),
                            "qty": q,
                        }
                        for j, p, q in lines
                    ],
                }
            )
        return out

    def _order_status(self, res, action, i, call):
        o = int(action.order[i])
        out = self._order_header(res, i, o)
        out["lines"] = [
            {
                "line_id": self.codec.order_line_id(o, j),
                "product_id": self.pid(p),
                "title": self.title(p),
                "qty": q,
                "unit_price": self.price(p),
                "variant_id": None,
            }
            for j, p, q in self._order_lines(res, i).get(o, [])
        ]
        return out

    def _eligibility(self, res, action, i, call):
        info = np.asarray(res.info[i])
        ok = bool(info[0] > 0.5)
        out: dict[str, Any] = {"eligible": ok}
        if not ok:
            out["ineligible_reason"] = INELIGIBLE_NAMES[int(round(info[1]))]
        out.update(
            window_days=int(round(info[2])),
            days_since_purchase=int(round(info[3])),
            product_title=self.title(int(res.ids[i, 0])),
            allowed_reason_codes=list(REASON_NAMES),
            allowed_methods=list(METHOD_NAMES),
            fees={m: _round(info[4 + k], 2) for k, m in enumerate(METHOD_NAMES)},
        )
        return out

    def _initiate(self, res, action, i, call):
        info = np.asarray(res.info[i])
        n = int(round(info[0]))
        o, j = int(action.order[i]), int(action.line[i])
        out = {
            "return_id": self.codec.return_id(n),
            "order_id": self.codec.order_id(o),
            "line_id": self.codec.order_line_id(o, j),
            "reason_code": REASON_NAMES[int(round(info[2]))],
            "method": METHOD_NAMES[int(round(info[3]))],
            "status": "INITIATED",
            "fee": _round(info[1], 2),
        }
        if info[4] > 0.5:
            out["label_url"] = f"https://store.example/returns/{out['return_id']}/label.pdf"
        return out

    def _exchange(self, res, action, i, call):
        info = np.asarray(res.info[i])
        old, new, var = int(res.ids[i, 0]), int(res.ids[i, 1]), int(res.var[i, 1])
        return {
            "exchange_id": self.codec.exchange_id(int(round(info[1]))),
            "return_id": self.codec.return_id(int(round(info[0]))),
            "old_product_id": self.pid(old),
            "new_product_id": self.pid(new),
            "new_variant_id": self.codec.variant_id(new, var) if var >= 0 else None,
            "status": "EXCHANGE_INITIATED",
        }

    def _cancel(self, res, action, i, call):
        return {
            "return_id": self.codec.return_id(int(round(res.info[i, 0]))),
            "status": "CANCELLED",
        }

    def _policy(self, res, action, i, call):
        topics = [int(res.ids[i, j]) for j in range(int(res.count[i]))]
        return {"results": [P.topic_record(t) for t in topics], "total_matches": int(res.total[i])}

    def _datetime(self, res, action, i, call):
        day = int(res.total[i])
        return {"date": day_text(day), "day_of_week": weekday(day), "time": "12:00:00"}

    def _history(self, res, action, i, call):
        return [self.card(int(res.ids[i, j]), int(res.qty[i, j])) for j in range(int(res.count[i]))]

    def _ask(self, res, action, i, call):
        slots = [C.SLOT_NAMES[s] for s in np.flatnonzero(np.asarray(action.slots[i]))]
        return {"status": "sent", "slots": slots}


_DISPATCH = {
    T.CATALOG_SEARCH: ResultRenderer._search,
    T.CATALOG_RERANK: ResultRenderer._rerank,
    T.CATALOG_GET_PRODUCT: ResultRenderer._product,
    T.CATALOG_GET_VARIANTS: ResultRenderer._variants,
    T.CATALOG_LIST_CATEGORIES: ResultRenderer._categories,
    T.CART_VIEW: ResultRenderer._cart,
    T.CART_ADD: ResultRenderer._cart,
    T.CART_REMOVE: ResultRenderer._cart,
    T.CART_SET_QUANTITY: ResultRenderer._cart,
    T.ORDER_LIST: ResultRenderer._order_list,
    T.ORDER_GET_STATUS: ResultRenderer._order_status,
    T.RETURN_CHECK_ELIGIBILITY: ResultRenderer._eligibility,
    T.RETURN_INITIATE: ResultRenderer._initiate,
    T.RETURN_EXCHANGE: ResultRenderer._exchange,
    T.RETURN_CANCEL: ResultRenderer._cancel,
    T.POLICY_SEARCH: ResultRenderer._policy,
    T.DATETIME_NOW: ResultRenderer._datetime,
    T.USER_GET_VISIT_HISTORY: ResultRenderer._history,
    T.ASK_USER: ResultRenderer._ask,
}


def synth_variants(problem) -> dict[int, tuple[int, tuple[float, ...]]]:
    """The episode's synthesized CART variants (SPEC §8.3) from a host ``Problem``: what
    catalog_get_variants shows for those products (not which one is wanted)."""
    p = jax.device_get(problem)
    out = {}
    for k in range(np.asarray(p.item_pid).shape[0]):
        pid = int(p.item_pid[k])
        if pid >= 0 and bool(p.item_var_req[k]):
            vals = tuple(float(v) for v in np.asarray(p.item_var_vals[k]))
            out[pid] = (int(p.item_var_attr[k]), vals)
    return out


# --- messages ------------------------------------------------------------------------------------


def assistant_message(info: Mapping, raw: Any) -> dict:
    """The assistant turn as parsed: content plus tool_calls (ids as parsed, arguments as
    JSON). The answer is echoed as a ``submit_answer`` call. An unparseable turn is echoed
    as its raw text without calls."""
    if info.get("malformed"):
        if isinstance(raw, str):
            content = raw
        else:
            try:
                content = json.dumps(raw, ensure_ascii=False)
            except (TypeError, ValueError):
                content = repr(raw)
        return {"role": "assistant", "content": content}
    calls = []
    for c in info.get("calls", []):
        name = c.get("name") if isinstance(c.get("name"), str) else "invalid"
        if name == SC.SUBMIT_ANSWER:
            continue
        args = c.get("arguments")
        calls.append(_call(c["id"], name, args if isinstance(args, dict) else {}))
    msg: dict[str, Any] = {"role": "assistant", "content": info.get("message") or ""}
    answer = info.get("answer")
    if answer is not None or info.get("answer_error"):
        answer_id = next(
            (c["id"] for c in info.get("calls", []) if c.get("name") == SC.SUBMIT_ANSWER),
            f"call_{info.get('turn', 0)}_answer",
        )
        calls.append(_call(answer_id, SC.SUBMIT_ANSWER, {"answer": answer}))
    if calls:
        msg["tool_calls"] = calls
    return msg


def _call(id_: str, name: str, args: dict) -> dict:
    return {
        "id": id_,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
    }


def tool_message(call_id: str, name: str, content: Any) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": dumps(content)}


def event_message(product_id: str) -> dict:
    return {"role": "event", "content": dumps({"type": "out_of_stock", "product_id": product_id})}


def store_notice(product_ids: Sequence[str]) -> str:
    """Events folded into a user message, for chat templates without an event role."""
    return "\n".join(f"[Store notice] {p} is now out of stock." for p in product_ids)


# --- the inverse of parse_turn, for array agents -------------------------------------------------


class NotRenderable(ValueError):
    """An Action field that has no text form (e.g. a query embedding of unknown text)."""


def _query_text(q: np.ndarray, cat_emb: np.ndarray, cat_display: Sequence[str]) -> str:
    hits = np.flatnonzero((cat_emb == q[None, :]).all(-1))
    if hits.size:
        return cat_display[int(hits[0])]
    raise NotRenderable("a search query embedding that is no category's name")


def _policy_query(tokens: np.ndarray) -> str:
    toks = [int(t) for t in tokens if t != -1]
    for t, row in enumerate(P.QUESTION_TOKENS):
        if [int(x) for x in row if x != -1] == toks:
            return P.TOPICS[t].question
    words = [P.QUESTION_WORDS[t] if t >= 0 else f"zzq{k}" for k, t in enumerate(toks)]
    if not words:
        raise NotRenderable("an empty policy query")
    return " ".join(words)


def _answer_fields(f: Any, i: Any, codec: IdCodec) -> dict | None:
    env = int(np.asarray(f.env)[i])
    if env < 0:
        return None
    fam = by_env(env)
    out: dict[str, Any] = {"env": fam.name}
    keys = {k for k, _ in fam.answer}  # the family's answer keys (its descriptor)
    if "recommended_product_ids" in keys:
        rec = [int(x) for x in np.asarray(f.rec)[i] if x != -1]
        out["recommended_product_ids"] = [
            codec.product_id(x) if x >= 0 else f"unknown_{-x}" for x in rec
        ]
    o = int(np.asarray(f.order)[i])
    if "selected_order_id" in keys:
        out["selected_order_id"] = codec.order_id(o) if o >= 0 else "ord_none"
    if "selected_line_id" in keys:
        j = int(np.asarray(f.line)[i])
        out["selected_line_id"] = codec.order_line_id(o, j) if o >= 0 and j >= 0 else "none"
    if "order_status" in keys:
        out["order_status"] = SC.STATUS_NAMES[int(np.asarray(f.status)[i])]
    if "policy_answer" in keys:
        v = float(np.asarray(f.policy_value)[i])
        if not bool(np.asarray(f.policy_ok)[i]):
            out["policy_answer"] = "unknown"
        elif codec.policy_categorical:
            out["policy_answer"] = P.ANSWER_VOCAB[int(round(v))]
        else:
            out["policy_answer"] = v
    return out


def action_to_turn(
    action: Action, codec: IdCodec, lexicon: Lexicon
) -> tuple[str, list[tuple[str, dict]], dict | None]:
    """(message, calls, answer) that ``parse_turn`` reads back as ``action``'s meaning:
    pass them to ``parse.format_turn``. Search queries must be category names (what the
    reference agents embed); anything else raises ``NotRenderable``."""
    a = jax.tree_util.tree_map(np.asarray, action)
    if bool(a.malformed):
        raise NotRenderable("a malformed action has no text form")
    cat = lexicon.catalog
    tables = lexicon.tables
    calls: list[tuple[str, dict]] = []
    for i in range(C.MAX_TOOL_CALLS):
        tool = int(a.tool[i])
        if tool == T.NONE:
            continue
        if bool(a.bad_args[i]) or not 0 < tool < C.N_TOOLS:
            raise NotRenderable(f"call slot {i} is invalid")
        name = C.TOOL_NAMES[tool]
        args: dict[str, Any] = {}
        pid = int(a.product[i])
        pid_s = codec.product_id(pid) if pid >= 0 else f"unknown_{-pid}"
        if tool == T.CATALOG_SEARCH:
            args["query"] = _query_text(a.query_emb[i], np.asarray(cat.cat_emb), tables.cat_display)
            filters: dict[str, Any] = {}
            for j, code in enumerate(a.filter_disc[i]):
                if code == -1:
                    continue
                key = SC.DISC_FILTER_NAMES[j]
                filters[key] = (
                    lexicon.disc_value(C.DISC_FILTERS[j], code) if code >= 0 else "zz-unknown"
                )
            for j, v in enumerate(a.filter_num[i]):
                if not np.isnan(v):
                    filters[SC.NUM_FILTER_NAMES[j]] = float(v)
            if filters:
                args["filters"] = filters
            args["top_k"] = int(a.qty[i])
            args["sort_by"] = SC.SORT_NAMES[int(a.enum_a[i])]
            if pid != -1:
                args["similar_to"] = pid_s
            args["in_stock_only"] = bool(a.flag[i])
        elif tool == T.CATALOG_RERANK:
            raise NotRenderable("catalog_rerank candidates have no Action field")
        elif tool in (T.CATALOG_GET_PRODUCT, T.CATALOG_GET_VARIANTS):
            args["product_id"] = pid_s
        elif tool == T.CART_ADD:
            args["product_id"] = pid_s
            v = int(a.variant[i])
            args["variant_id"] = codec.variant_id(pid, v) if v >= 0 and pid >= 0 else None
            if v <= -2:
                args["variant_id"] = f"{pid_s}_v_unknown"
            args["quantity"] = int(a.qty[i])
        elif tool in (T.CART_REMOVE, T.CART_SET_QUANTITY):
            args["line_id"] = codec.cart_line_id(int(a.line[i])) if a.line[i] >= 0 else "line_x"
            if tool == T.CART_SET_QUANTITY:
                args["quantity"] = int(a.qty[i])
        elif tool == T.ORDER_LIST:
            args["days"] = int(a.qty[i])
        elif tool in (T.POLICY_SEARCH,):
            args["query"] = _policy_query(a.query_tokens[i])
            args["top_k"] = int(a.qty[i])
        elif tool == T.RETURN_CANCEL:
            n = int(a.order[i])
            args["return_id"] = codec.return_id(n) if n >= 1 else "ret_x"
        elif tool == T.ASK_USER:
            slots = [C.SLOT_NAMES[s] for s in np.flatnonzero(a.slots[i])]
            args["question"] = "Could you tell me about: " + ", ".join(slots) + "?"
            args["slots"] = slots
            if pid != -1:
                args["product_id"] = pid_s
            if int(a.enum_b[i]) >= 0:
                args["subgoal"] = int(a.enum_b[i])
        if tool in (
            T.ORDER_GET_STATUS,
            T.RETURN_CHECK_ELIGIBILITY,
            T.RETURN_INITIATE,
            T.RETURN_EXCHANGE,
        ):
            o = int(a.order[i])
            args["order_id"] = codec.order_id(o) if o >= 0 else "ord_x"
            if tool != T.ORDER_GET_STATUS:
                j = int(a.line[i])
                args["line_id"] = codec.order_line_id(o, j) if o >= 0 and j >= 0 else "x_line"
        if tool in (T.RETURN_INITIATE, T.RETURN_EXCHANGE):
            if tool == T.RETURN_EXCHANGE:
                args["new_product_id"] = pid_s
                v = int(a.variant[i])
                args["new_variant_id"] = codec.variant_id(pid, v) if v >= 0 and pid >= 0 else None
            args["reason_code"] = REASON_NAMES[int(a.enum_a[i])]
            args["method"] = METHOD_NAMES[int(a.enum_b[i])]
        calls.append((name, args))
    answer = None
    ans = a.answer
    if bool(ans.present):
        main = _answer_fields(ans.main, (), codec)
        if main is None:
            raise NotRenderable("an answer without an env")
        if main["env"] == "JOURNEY":
            subs = [_answer_fields(ans.sub, k, codec) for k in range(C.MAX_SUBGOALS)]
            while len(subs) > 1 and subs[-1] is None:
                subs.pop()
            main["subgoal_answers"] = subs
        if not bool(ans.done):
            main["done"] = False
        answer = main
    message = ""
    if bool(a.has_message):
        shown = [codec.product_id(int(p)) for p in a.present if p >= 0]
        message = "Here is what I found: " + ", ".join(shown) + "." if shown else "Working on it."
    return message, calls, answer
