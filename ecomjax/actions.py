"""Host-side builders for structured actions: tests, scripts and the text bridge use them
to write a turn as a list of calls instead of filling arrays by hand."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import jax.numpy as jnp
import numpy as np

from ecomjax import constants as C
from ecomjax.types import CALL_FIELDS, Action, empty_action


@dataclass
class Call:
    tool: int
    product: int = -1
    variant: int = -1
    line: int = -1
    order: int = -1
    qty: int = 1
    enum_a: int = 0
    enum_b: int = -1
    in_stock_only: bool = False
    query: np.ndarray | None = None
    slots: Sequence[int] = ()
    filter_disc: dict[int, int] = field(default_factory=dict)  # index in DISC_FILTERS -> code
    filter_num: dict[int, float] = field(default_factory=dict)  # index in NUMERIC_FILTERS
    bad_args: bool = False


def make_action(
    calls: Sequence[Call] = (),
    message: bool = True,
    answer_env: int | None = None,
    done: bool = True,
    present: Sequence[int] = (),
    malformed: bool = False,
    embed_dim: int = C.EMBED_DIM,
) -> Action:
    """One agent turn. ``answer_env`` set means the turn carries an answer for that env."""
    if len(calls) > C.MAX_TOOL_CALLS:
        raise ValueError(f"at most {C.MAX_TOOL_CALLS} call slots exist; got {len(calls)}")
    base = empty_action(embed_dim)
    arr = {k: np.array(getattr(base, k)) for k in (*CALL_FIELDS, "present")}
    for i, c in enumerate(calls):
        arr["tool"][i] = c.tool
        arr["bad_args"][i] = c.bad_args
        arr["product"][i], arr["variant"][i], arr["line"][i] = c.product, c.variant, c.line
        arr["order"][i], arr["qty"][i] = c.order, c.qty
        arr["enum_a"][i], arr["enum_b"][i], arr["flag"][i] = c.enum_a, c.enum_b, c.in_stock_only
        if c.query is not None:
            arr["has_query"][i] = True
            arr["query_emb"][i] = np.asarray(c.query, np.float32)
        for s in c.slots:
            arr["slots"][i, s] = True
        for j, v in c.filter_disc.items():
            arr["filter_disc"][i, j] = v
        for j, v in c.filter_num.items():
            arr["filter_num"][i, j] = v
    for i, p in enumerate(present[: C.MAX_PRESENTED]):
        arr["present"][i] = p
    answer = base.answer
    if answer_env is not None:
        answer = answer.replace(
            present=jnp.bool_(True),
            done=jnp.bool_(done),
            main=answer.main.replace(env=jnp.int32(answer_env)),
        )
    return base.replace(
        malformed=jnp.bool_(malformed),
        has_message=jnp.bool_(message),
        tool=jnp.asarray(arr["tool"]),
        bad_args=jnp.asarray(arr["bad_args"]),
        product=jnp.asarray(arr["product"]),
        variant=jnp.asarray(arr["variant"]),
        line=jnp.asarray(arr["line"]),
        order=jnp.asarray(arr["order"]),
        qty=jnp.asarray(arr["qty"]),
        enum_a=jnp.asarray(arr["enum_a"]),
        enum_b=jnp.asarray(arr["enum_b"]),
        flag=jnp.asarray(arr["flag"]),
        has_query=jnp.asarray(arr["has_query"]),
        query_emb=jnp.asarray(arr["query_emb"]),
        filter_disc=jnp.asarray(arr["filter_disc"]),
        filter_num=jnp.asarray(arr["filter_num"]),
        slots=jnp.asarray(arr["slots"]),
        present=jnp.asarray(arr["present"]),
        answer=answer,
    )
