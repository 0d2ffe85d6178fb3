"""An OpenEnv-compatible HTTP + WebSocket server over host ``Session``s, and the browser demo.

Why this shape: an LLM trainer (TRL, verl, OpenEnv's ``EnvClient``) drives episodes over the
network, so the server is a thin, defensive shell around ``session.Session``: it validates
every payload itself (a clear 4xx, never a 500 or a traceback), keeps one ``Session`` per
episode id (HTTP) or per connection (``/ws``), caps how many live at once, and runs the JAX
work in a thread pool so the event loop stays free. Each session's calls are serialised by
its own lock; sessions share nothing but the read-only catalog text and the process's
compiled functions (``session``'s cache), so no client can see another's state. A malformed
*turn* inside a well-formed request is the model's fault and is scored as the env scores it
(a hard fail, SPEC §4.2), not rejected.

fastapi is imported only inside ``create_app`` (the ``serve`` extra); the rest of the module
(validation, ``goal_trace``) is plain Python. No ``from __future__ import annotations`` here:
FastAPI resolves the route functions' annotations at definition time.
"""

import asyncio
import dataclasses
import json
import math
import re
import threading
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog, CatalogTables
from ecomjax.llm_bridge import mcp_rpc
from ecomjax.llm_bridge import schemas as SC
from ecomjax.llm_bridge.parse import FORMATS, MAX_TEXT_CHARS, format_turn
from ecomjax.llm_bridge.served_curriculum import ServedCurriculum
from ecomjax.llm_bridge.session import FAST_COMPILE, CatalogText, Session
from ecomjax.llm_bridge.templates import PRIORITY_WORDS, day_text
from ecomjax.llm_bridge.warmup import Warmup
from ecomjax.order_history import METHOD_NAMES, REASON_NAMES, OrderStatus
from ecomjax.registry import FAMILIES, env_name, resolve_tasks
from ecomjax.types import EnvParams

STATIC_DIR = Path(__file__).with_name("static")
MAX_SEED = 2**32 - 1  # jax.random.key(seed) wraps above this: 2**32 would replay seed 0
ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,255}$")  # OpenEnv allows 255 characters
# The fields a reset / step reads. Others are allowed (OpenEnv's ResetRequest and StepRequest
# take extra fields, e.g. ``render``), ignored, and named in the observation's
# ``info.ignored_fields`` so a misspelt one does not pass unnoticed.
RESET_KEYS = frozenset(
    {"seed", "episode_id", "session_id", "family", "difficulty", "collection", "format"}
)
STEP_KEYS = frozenset({"action", "episode_id", "session_id", "timeout_s", "request_id"})
DESCRIPTION = (
    "Eight verifiable, multi-turn, tool-using e-commerce environments (product discovery, "
    "substitution, cart building, return + replacement, order tracking, policy QA, bundle "
    "planning, multi-intent journeys) with a simulated customer and code-only rewards."
)
TEXT_FORMATS = ("hermes", "qwen_xml")


@dataclass
class ServerConfig:
    """Server options.

    ``tasks`` (a collection or a family list) are the families a bare reset draws from
    (``tasks[seed % len]``, seeds from a counter) and the ones warmed up at start
    (``warmup``); a reset without a difficulty gets the curriculum's draw (``curriculum``),
    else ``default_difficulty``. Capacity is split so that one kind of client cannot lock the
    other out: ``max_sessions`` WebSocket connections and ``max_http_sessions`` HTTP/MCP
    episodes. At the HTTP cap, idle (``session_ttl_s``) then finished episodes are dropped,
    oldest first; a new one is refused with 429 only when none can go. A reset without an
    episode id replaces the previous id-less one, so a single-session client holds one slot.
    ``max_body_bytes`` caps a request body or WebSocket message; a turn's own text is capped
    at ``parse.MAX_TEXT_CHARS`` (a longer turn is a malformed turn, SPEC §4.2).
    ``expose_goal`` adds the hidden goal to the terminal observation (``info.trace``)."""

    max_sessions: int = 256
    max_http_sessions: int = 64
    max_body_bytes: int = 1 << 20
    session_ttl_s: float = 900.0
    workers: int = 4
    expose_goal: bool = False
    tasks: str = "C8"
    warmup: bool = True
    curriculum: bool = True
    default_difficulty: int = 0
    default_format: str | None = None  # None: "openai" for role/content actions, else "json"
    compiler_options: Mapping[str, Any] | None = field(default_factory=lambda: FAST_COMPILE)
    session_kwargs: Mapping[str, Any] = field(default_factory=dict)


class ApiError(Exception):
    """A client error: HTTP status, a stable code and a message safe to show."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    def body(self) -> dict:
        return {"detail": self.message, "code": self.code}


def jsonable(x: Any) -> Any:
    """Plain JSON values: numpy scalars to Python, non-finite floats to None (strict JSON)."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(float(x)) else None
    return x


# --- request validation (plain Python, shared by HTTP, WebSocket and tests) ---------------------


@dataclass(frozen=True)
class ResetArgs:
    family: str
    difficulty: int | None  # None: the server chooses (curriculum or its default)
    seed: int
    collection: str | None
    fmt: str | None
    episode_id: str | None
    ignored: tuple[str, ...] = ()


def _int_field(body: Mapping, key: str, lo: int, hi: int) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ApiError(422, "INVALID_FIELD", f"{key} must be an integer in {lo}..{hi}")
    if not lo <= v <= hi:
        raise ApiError(422, "INVALID_FIELD", f"{key} must be in {lo}..{hi}, got {v}")
    return v


def _str_field(body: Mapping, key: str) -> str | None:
    v = body.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise ApiError(422, "INVALID_FIELD", f"{key} must be a string")
    return v


def episode_key(body: Mapping) -> str | None:
    """The episode id of a request (``episode_id`` or its alias ``session_id``)."""
    a, b = _str_field(body, "episode_id"), _str_field(body, "session_id")
    if a is not None and b is not None and a != b:
        raise ApiError(422, "INVALID_FIELD", "episode_id and session_id differ")
    eid = a if a is not None else b
    if eid is not None and not ID_RE.match(eid):
        raise ApiError(422, "INVALID_FIELD", "episode_id must match [A-Za-z0-9._:-]{1,128}")
    return eid


def family_for(collection: str, seed: int) -> str:
    """The family a collection plays for a seed: ``members[seed % len(members)]``, so a
    GRPO group (one seed) always gets one family and consecutive seeds cycle through all."""
    members = C.COLLECTIONS[collection]
    return members[seed % len(members)]


def parse_reset(
    body: Mapping,
    default_seed: int,
    default_difficulty: int | None,
    tasks: tuple[str, ...] | None = None,
) -> ResetArgs:
    """Validates a reset body (SPEC §12: the episode is fixed by family, d and seed).

    Without a family or a collection the family is ``tasks[seed % len(tasks)]`` (the
    server's served families); with no ``tasks`` that is an error. Fields other than
    ``RESET_KEYS`` are ignored and listed in ``ignored``."""
    if not isinstance(body, Mapping):
        raise ApiError(422, "INVALID_BODY", "the reset body must be a JSON object")
    ignored = tuple(sorted(str(k)[:40] for k in body if k not in RESET_KEYS))
    seed = _int_field(body, "seed", 0, MAX_SEED)
    seed = default_seed if seed is None else seed
    d = _int_field(body, "difficulty", 0, C.D_MAX)
    d = default_difficulty if d is None else d
    fmt = _str_field(body, "format")
    if fmt is not None and fmt not in FORMATS:
        raise ApiError(422, "INVALID_FIELD", f"format must be one of {', '.join(FORMATS)}")
    coll = _str_field(body, "collection")
    if coll is not None:
        coll = coll.upper()
        if coll not in C.COLLECTIONS:
            names = ", ".join(C.COLLECTIONS)
            raise ApiError(422, "UNKNOWN_COLLECTION", f"unknown collection; available: {names}")
    fam = _str_field(body, "family")
    landed = ", ".join(FAMILIES)
    if fam is not None:
        fam = fam.upper()
        if fam not in FAMILIES:
            raise ApiError(
                422, "UNKNOWN_FAMILY", f"unknown family {fam[:40]!r}; available: {landed}"
            )
        if coll is not None and fam not in C.COLLECTIONS[coll]:
            raise ApiError(422, "INVALID_FIELD", f"family {fam} is not in collection {coll}")
    elif coll is not None:
        fam = family_for(coll, seed)
    elif tasks:
        fam = tasks[seed % len(tasks)]
    else:
        raise ApiError(422, "MISSING_FIELD", "reset needs a family or a collection")
    return ResetArgs(fam, d, seed, coll, fmt, episode_key(body), ignored)


def split_action(action: Any, default_fmt: str | None) -> tuple[Any, str]:
    """(assistant output for ``Session.step``, format) from a step's action object.

    The action is a SPEC §4.1 turn (``message``/``tool_calls``/``answer``, format "json"), an
    OpenAI assistant message ("openai"), or ``{"content": text}`` for "hermes"/"qwen_xml";
    an optional ``format`` key names the format (else the reset's, else inferred). What is
    *inside* the turn is the env's business: a malformed turn is a hard fail, not a 4xx."""
    if not isinstance(action, Mapping):
        raise ApiError(422, "INVALID_ACTION", "action must be a JSON object")
    rest = {k: v for k, v in action.items() if k != "format"}
    fmt = action.get("format", default_fmt)
    if fmt is None:
        fmt = "openai" if ("role" in rest or "content" in rest) else "json"
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise ApiError(422, "INVALID_ACTION", f"action.format must be one of {', '.join(FORMATS)}")
    if fmt in TEXT_FORMATS:
        extra = sorted(str(k) for k in rest if k not in ("role", "content"))
        if extra:
            raise ApiError(
                422,
                "INVALID_ACTION",
                f"a {fmt} action is {{'content': model text}}; unexpected key {extra[0][:40]!r}",
            )
        content = rest.get("content")
        if not isinstance(content, (str, list)):
            msg = f"a {fmt} action needs 'content' (the model text)"
            raise ApiError(422, "INVALID_ACTION", msg)
        return content, fmt
    return rest, fmt


# --- the hidden goal, for the terminal debug trace (SPEC §4.4) ----------------------------------

_OPS = {0: "=", 1: ">=", -1: "<="}
TIERS = ("none", "basic", "premium")


def _value(lex: Any, attr: int, v: float) -> Any:
    if attr in (C.Attr.CAT, C.Attr.BRAND, C.Attr.STORE, *C.DISC_ATTRS):
        return lex.disc_value(attr, v)
    return round(float(v), 2)


def _constraints(p: Any, lex: Any, k: int) -> list[dict]:
    out = []
    for a, op, v in zip(p.cons_attr[k], p.cons_op[k], p.cons_val[k], strict=True):
        if int(a) >= 0:
            value = _value(lex, int(a), v)
            out.append({"attr": C.ATTR_NAMES[int(a)], "op": _OPS.get(int(op), "="), "value": value})
    return out


def _goal(env: int, p: Any, s: Session) -> dict:
    codec, lex = s.codec, s.text.lexicon
    E = C.Env
    g: dict[str, Any] = {"env": env_name(env)}
    if env == E.PD:
        g["constraints"] = _constraints(p, lex, 0)
        g["k"] = int(p.k_rec)
        g["priority"] = PRIORITY_WORDS[int(p.priority)] if 0 <= int(p.priority) < 3 else None
        g["target_product_id"] = codec.product_id(int(p.pd_target))
    elif env == E.SUB:
        g["original_product_id"] = codec.product_id(int(p.sub_original))
        g["constraints"] = _constraints(p, lex, 1)
        g["witness_product_id"] = codec.product_id(int(p.sub_witness))
    elif env == E.CART:
        items = []
        for i in range(C.MAX_ITEMS):
            pid = int(p.item_pid[i])
            if pid < 0:
                continue
            item: dict[str, Any] = {"product_id": codec.product_id(pid), "qty": int(p.item_qty[i])}
            if bool(p.item_var_req[i]):
                attr = int(p.item_var_attr[i])
                val = p.item_var_vals[i, int(p.item_var_target[i])]
                item["variant"] = {"attr": C.ATTR_NAMES[attr], "value": _value(lex, attr, val)}
            items.append(item)
        g["items"] = items
    elif env == E.RETURN:
        o, j = int(p.ret_order), int(p.ret_line)
        g["order_id"] = codec.order_id(o)
        g["line_id"] = codec.order_line_id(o, j)
        g["product_id"] = codec.product_id(int(p.line_pid[o, j]))
        g["reason"] = REASON_NAMES[int(p.ret_reason)]
        g["method"] = METHOD_NAMES[int(p.ret_method)] if int(p.ret_method) >= 0 else None
        g["replace"] = bool(p.ret_replace)
        if bool(p.ret_replace):
            g["replacement_constraints"] = _constraints(p, lex, 2)
            g["witness_product_id"] = codec.product_id(int(p.ret_witness))
    elif env == E.STATUS:
        o = int(p.status_order)
        g["order_id"] = codec.order_id(o)
        g["order_status"] = OrderStatus(int(p.order_status[o])).name
        g["referred_to_indirectly"] = bool(p.status_indirect)
    elif env == E.POLICY:
        from ecomjax import policy_rules as P

        rule = P.RULES[int(p.pol_rule)]
        topic = P.TOPICS[int(p.pol_topic)]
        g["topic"] = topic.name
        g["rule"] = rule.rule_id
        g["answer"] = rule.value if isinstance(rule.value, str) else round(float(p.pol_answer), 2)
    elif env == E.BUNDLE:
        g["categories"] = [lex.category(c) for c in p.bundle_cats if int(c) >= 0]
        g["budget"] = None if int(p.budget_cents) < 0 else int(p.budget_cents) / 100
    return g


def goal_trace(s: Session) -> dict:
    """The episode's hidden goal in words and ids (never part of a running observation).
    Best effort: a part that cannot be described is reported, never raised."""
    p = jax.tree_util.tree_map(np.asarray, jax.device_get(s.state.problem))
    env = int(p.env)
    out: dict[str, Any] = {
        "family": env_name(env),
        "difficulty": int(p.d),
        "seed": s.seed,
        "today": day_text(int(p.today)),
        "t_max": int(p.t_max),
        "membership_tier": TIERS[int(p.tier)] if 0 <= int(p.tier) < len(TIERS) else None,
    }
    envs = [int(e) for e in p.sub_env if int(e) >= 0] if env == C.Env.JOURNEY else [env]
    goals = []
    for e in envs:
        try:
            goals.append(_goal(e, p, s))
        except Exception as exc:  # noqa: BLE001 - a debug aid must not break the episode
            goals.append({"env": env_name(e), "error": f"{type(exc).__name__}: {exc}"[:200]})
    out["goals"] = goals
    return out


# --- episodes and the service behind the routes ------------------------------------------------


@dataclass
class Episode:
    """One live episode: its session, a lock serialising its calls, and what reset chose."""

    id: str
    session: Session
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_used: float = field(default_factory=time.monotonic)
    args: ResetArgs | None = None
    started: bool = False
    drawn: bool = False  # the server drew d (the curriculum counts the outcome)
    websocket: bool = False
    attached: bool = False  # an HTTP/MCP episode a WebSocket (/ws?session_id=) plays


class Service:
    """Everything but the routes: sessions, capacity, the thread pool, payload handling.
    Async methods run on the event loop; the JAX work goes to the pool."""

    def __init__(
        self,
        catalog: Catalog | CatalogText | None = None,
        tables: CatalogTables | None = None,
        params: EnvParams | None = None,
        config: ServerConfig | None = None,
        catalog_size: int = 1000,
    ):
        if catalog is None:
            from ecomjax.catalog.synthetic import generate_catalog

            catalog = generate_catalog(42, catalog_size)
        if not isinstance(catalog, CatalogText):
            catalog = CatalogText.build(catalog, tables)
        self.text = catalog
        self.params = params if params is not None else EnvParams()
        self.config = config if config is not None else ServerConfig()
        if self.config.max_sessions < 1 or self.config.max_http_sessions < 1:
            raise ValueError("max_sessions and max_http_sessions must be at least 1")
        try:
            self.tasks = resolve_tasks(self.config.tasks)
        except KeyError as e:
            raise ValueError(f"tasks: {e.args[0]}") from None
        if not self.tasks:
            raise ValueError("tasks names no family")
        self.pool = ThreadPoolExecutor(self.config.workers, thread_name_prefix="ecomjax-env")
        self.episodes: dict[str, Episode] = {}  # HTTP and MCP episodes by id
        self.default_id: str | None = None  # the episode of id-less HTTP requests
        self.n_ws = 0
        self._seed_counter = 0
        self._compile_lock = threading.Lock()
        self._warm: set[tuple] = set()
        self.curriculum = ServedCurriculum() if self.config.curriculum else None
        self.warmup = Warmup(self.tasks, self._warm_family)
        self.stats = {"resets": 0, "steps": 0, "rejected_capacity": 0, "evicted": 0}

    # -- sessions and capacity ----------------------------------------------------------------

    def new_session(self) -> Session:
        return Session(
            self.text,
            params=self.params,
            compiler_options=self.config.compiler_options,
            **dict(self.config.session_kwargs),
        )

    @property
    def active(self) -> int:
        return len(self.episodes) + self.n_ws

    def _make_room(self) -> None:
        """At the HTTP cap, drop idle-too-long then finished HTTP episodes, oldest first
        (never one a WebSocket is attached to or one that is mid-call)."""
        cap = self.config.max_http_sessions
        if len(self.episodes) < cap:
            return
        now = time.monotonic()
        ttl = self.config.session_ttl_s
        free = [e for e in self.episodes.values() if not e.lock.locked() and not e.attached]
        idle = [e for e in free if now - e.last_used > ttl]
        done = [e for e in free if e.session.done and now - e.last_used <= ttl]
        for e in sorted(idle, key=lambda e: e.last_used) + sorted(done, key=lambda e: e.last_used):
            if len(self.episodes) < cap:
                return
            if self._drop(e.id):
                self.stats["evicted"] += 1
        if len(self.episodes) >= cap:
            self.stats["rejected_capacity"] += 1
            raise ApiError(
                429,
                "CAPACITY_REACHED",
                f"the server holds its maximum of {cap} live HTTP episodes; "
                "finish or close one (POST /close) and retry",
            )

    def _drop(self, eid: str) -> bool:
        if self.default_id == eid:
            self.default_id = None
        return self.episodes.pop(eid, None) is not None

    def claim_websocket(self) -> None:
        if self.n_ws >= self.config.max_sessions:
            self.stats["rejected_capacity"] += 1
            raise ApiError(
                429,
                "CAPACITY_REACHED",
                f"the server holds its maximum of {self.config.max_sessions} WebSocket "
                "sessions; retry when one closes",
            )
        self.n_ws += 1

    def release_websocket(self) -> None:
        self.n_ws -= 1

    def http_episode(self, eid: str | None, create: bool) -> Episode:
        """The episode a request names; without an id, the server's default one (a reset
        without an id starts a new default and drops the previous one)."""
        if eid is None and not create:
            if self.default_id is None or self.default_id not in self.episodes:
                raise ApiError(
                    400,
                    "MISSING_EPISODE_ID",
                    "no episode: POST /reset first, or give the episode_id (or session_id) "
                    "that /reset returned",
                )
            eid = self.default_id
        ep = self.episodes.get(eid) if eid is not None else None
        if ep is None:
            if not create:
                raise ApiError(
                    404,
                    "UNKNOWN_EPISODE",
                    f"no live episode {eid!r}: call /reset first (it may have "
                    "expired or been closed)",
                )
            if eid is None and self.default_id is not None:
                old = self.episodes.get(self.default_id)
                if old is not None and not old.lock.locked() and not old.attached:
                    self._drop(old.id)
            self._make_room()
            default = eid is None
            eid = eid or uuid.uuid4().hex
            ep = Episode(eid, self.new_session())
            self.episodes[eid] = ep
            if default:
                self.default_id = eid
        ep.last_used = time.monotonic()
        return ep

    def close(self, eid: str | None) -> bool:
        if eid is None:
            eid = self.default_id
            if eid is None:
                raise ApiError(400, "MISSING_EPISODE_ID", "give the episode_id to close")
        return self._drop(eid)

    def next_seed(self) -> int:
        """Seeds for resets that give none: a per-server counter, so a run is replayable."""
        seed = self._seed_counter
        self._seed_counter += 1
        return seed

    # -- MCP sessions ---------------------------------------------------------------------------

    async def create_mcp_session(self, body: Mapping) -> Episode:
        """``openenv/session/create``: a new HTTP episode, reset at once (with the params'
        reset fields, else the defaults) so that ``tools/call`` can follow."""
        self.parse(body)  # validate before claiming a slot
        eid = episode_key(body)
        if eid is not None and eid in self.episodes:
            raise ApiError(409, "EPISODE_EXISTS", f"episode {eid!r} exists")
        self._make_room()
        ep = Episode(eid or uuid.uuid4().hex, self.new_session())
        self.episodes[ep.id] = ep
        await self.reset(ep, body)
        return ep

    async def mcp_episode(self, sid: Any) -> Episode:
        """The episode of an HTTP ``tools/call``: ``session_id``'s, else the default one
        (started with the defaults when there is none yet)."""
        if sid is not None:
            if not isinstance(sid, str):
                raise ApiError(422, "INVALID_FIELD", "session_id must be a string")
            return self.http_episode(sid, create=False)
        ep = self.episodes.get(self.default_id) if self.default_id else None
        if ep is None:
            ep = self.http_episode(None, create=True)
            await self.reset(ep, {})
        return ep

    # -- JAX work, in the pool ------------------------------------------------------------------

    def _guarded(self, key: tuple, fn):
        """Runs ``fn``; the first run per compile key holds a lock so that concurrent first
        requests compile once instead of once per thread."""
        if key in self._warm:
            return fn()
        with self._compile_lock:
            out = fn()
            self._warm.add(key)
            return out

    def _warm_step(self, family: str) -> None:
        """Compiles step and device search once (a scratch episode runs a search)."""

        def run():
            s = self.new_session()
            s.reset(family, 0, 0)
            s.step(format_turn("json", "", [("catalog_search", {"query": "gift"})]), "json")

        self._guarded(("step",), run)

    def _warm_family(self, family: str) -> None:
        """Warm-up's unit: the family's reset, then (once) step and search."""
        self._guarded(("reset", family), lambda: self.new_session().reset(family, 0, 0))
        if ("step",) not in self._warm:
            self._warm_step(family)

    def _reset_sync(self, s: Session, a: ResetArgs) -> tuple[dict, ResetArgs]:
        """(observation, the args with d filled in): the curriculum draws d here, off the
        event loop, when the reset gave none."""
        if a.difficulty is None:
            a = dataclasses.replace(a, difficulty=self.curriculum.draw(a.family, a.seed))
        if not self.warmup.wait(a.family):
            raise ApiError(503, "WARMUP_FAILED", f"{a.family} failed to compile at start-up")
        obs = self._guarded(("reset", a.family), lambda: s.reset(a.family, a.difficulty, a.seed))
        return obs, a

    def _step_sync(self, s: Session, output: Any, fmt: str) -> dict:
        if ("step",) not in self._warm:
            self.warmup.wait(s.family)
            if ("step",) not in self._warm:
                self._warm_step(s.family)
        return s.step(output, fmt)

    async def run(self, fn, *args):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, fn, *args)

    # -- the protocol ---------------------------------------------------------------------------

    def parse(self, body: Mapping, default_seed: int = 0) -> ResetArgs:
        """A reset body against this server's defaults (tasks, difficulty)."""
        d = None if self.curriculum is not None else self.config.default_difficulty
        return parse_reset(body, default_seed, d, self.tasks)

    def _observation(self, ep: Episode, obs: dict, ignored: tuple[str, ...] = ()) -> dict:
        a = ep.args
        out = dict(obs)
        out["episode_id"] = out["session_id"] = ep.id
        out["seed"] = a.seed
        out["difficulty"] = a.difficulty
        out["format"] = a.fmt
        if self.params.disclose_env_id:
            out["family"] = a.family
        if ignored:
            out["info"] = {**obs.get("info", {}), "ignored_fields": list(ignored)}
        if obs["done"] and self.config.expose_goal:
            out["info"] = {**out.get("info", obs["info"]), "trace": goal_trace(ep.session)}
        return out

    async def reset(self, ep: Episode, body: Mapping) -> dict:
        a = self.parse(body, self.next_seed() if body.get("seed") is None else 0)
        drawn = a.difficulty is None
        async with ep.lock:
            obs, a = await self.run(self._reset_sync, ep.session, a)
            if ep.websocket and not ep.attached and a.episode_id is not None:
                ep.id = a.episode_id  # a WebSocket episode is named by its client
            ep.args, ep.started, ep.drawn = a, True, drawn
            ep.last_used = time.monotonic()
            self.stats["resets"] += 1
            return {
                "observation": jsonable(self._observation(ep, obs, a.ignored)),
                "reward": None,
                "done": bool(obs["done"]),
            }

    async def step(self, ep: Episode, action: Any, ignored: tuple[str, ...] = ()) -> dict:
        if not ep.started:
            raise ApiError(409, "NOT_RESET", "no episode yet: send a reset first")
        if ep.session.done:
            raise ApiError(409, "EPISODE_DONE", "the episode is over: send a reset")
        output, fmt = split_action(action, ep.args.fmt or self.config.default_format)
        async with ep.lock:
            if ep.session.done:
                raise ApiError(409, "EPISODE_DONE", "the episode is over: send a reset")
            obs = await self.run(self._step_sync, ep.session, output, fmt)
            ep.last_used = time.monotonic()
            self.stats["steps"] += 1
            if obs["done"] and ep.drawn and self.curriculum is not None:
                a, ok = ep.args, bool(obs["is_correct"])
                await self.run(self.curriculum.record, a.family, a.difficulty, ok)
            return {
                "observation": jsonable(self._observation(ep, obs, ignored)),
                "reward": float(obs["reward"]),
                "done": bool(obs["done"]),
            }

    def state(self, ep: Episode) -> dict:
        """The episode's counters; never the hidden goal nor another episode's anything."""
        if not ep.started:
            return {"episode_id": ep.id, "session_id": ep.id, "step_count": 0, "started": False}
        s, a = ep.session, ep.args
        obs = jax.device_get(s.timestep.observation)
        out: dict[str, Any] = {
            "episode_id": ep.id,
            "session_id": ep.id,
            "started": True,
            "step_count": int(obs.turn),
            "seed": a.seed,
            "difficulty": a.difficulty,
            "collection": a.collection,
            "format": a.fmt,
            "turns_left": int(obs.turns_left),
            "tool_budget": int(obs.tool_budget),
            "n_messages": len(s.messages),
            "done": bool(s.done),
            "termination_reason": C.TERMINATION_NAMES[int(obs.termination)] if s.done else None,
            "reward": float(obs.reward.r_total) if s.done else None,
        }
        if self.params.disclose_env_id:
            out["family"] = a.family
        return jsonable(out)

    def info(self) -> dict:
        """What a client (the demo page) needs to build its forms."""
        return {
            "name": "ecomjax",
            "families": list(FAMILIES),
            "collections": {k: list(v) for k, v in C.COLLECTIONS.items()},
            "d_max": C.D_MAX,
            "formats": list(FORMATS),
            "default_difficulty": self.config.default_difficulty,
            "tasks": list(self.tasks),
            "curriculum": None if self.curriculum is None else self.curriculum.snapshot(),
            "tools": SC.all_tools(with_submit=False),
            "mcp_tools": [t["name"] for t in mcp_rpc.mcp_tools()],
            "answer_schemas": SC.answer_schemas(),
            "expose_goal": self.config.expose_goal,
            "disclose_env_id": self.params.disclose_env_id,
            "limits": {
                "max_body_bytes": self.config.max_body_bytes,
                "max_turn_text_chars": MAX_TEXT_CHARS,
                "max_sessions": self.config.max_sessions,
                "max_http_sessions": self.config.max_http_sessions,
                "session_ttl_s": self.config.session_ttl_s,
            },
            "max_sessions": self.config.max_sessions,
            "active_sessions": self.active,
        }

    def health(self) -> dict:
        """``GET /health``: always "healthy" while serving (OpenEnv's check), with readiness
        and the warm-up's progress."""
        return {
            "status": "healthy",
            "ready": self.warmup.ready,
            "warmup": self.warmup.report(),
            "active_sessions": {"http": len(self.episodes), "websocket": self.n_ws},
        }

    def metadata(self) -> dict:
        """``GET /metadata`` (OpenEnv's ``EnvironmentMetadata``)."""
        return {
            "name": "ecomjax",
            "description": DESCRIPTION,
            "version": "0.1.0",
            "author": "the ecomjax authors",
            "documentation_url": None,
            "readme_content": None,
        }


def schemas() -> dict:
    """``GET /schema``: JSON schemas of the action, the observation and the state."""
    message = {"type": "object", "description": "An OpenAI-style chat message."}
    call = {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "name": {"type": "string", "enum": [*C.TOOL_NAMES, SC.SUBMIT_ANSWER]},
            "arguments": {"type": ["object", "string"]},
        },
        "required": ["name"],
    }
    action = {
        "title": "EcomjaxAction",
        "description": (
            "One assistant turn (SPEC §4.1). format 'json': {message, tool_calls, answer}; "
            "'openai': an assistant message {role, content, tool_calls[, answer]}; 'hermes' / "
            "'qwen_xml': {content: raw model text}. Without format: the reset's, else 'openai' "
            "when role/content is present, else 'json'. A malformed turn is a hard fail "
            "(reward -1), not a request error."
        ),
        "type": "object",
        "properties": {
            "format": {"type": "string", "enum": list(FORMATS)},
            "message": {"type": "string"},
            "tool_calls": {"type": "array", "items": call},
            "answer": {"anyOf": [SC.answer_schema(), {"type": "null"}]},
            "role": {"type": "string", "enum": ["assistant"]},
            "content": {"type": ["string", "array", "null"]},
        },
    }
    breakdown = {
        "type": ["object", "null"],
        "properties": {
            k: {"type": ["number", "null"]} for k in ("r_task", "r_eff", "r_hall", "r_total")
        }
        | {
            "is_correct": {"type": "boolean"},
            "T": {"type": "integer"},
            "T_user": {"type": "integer"},
            "hard_fail_kind": {"type": ["string", "null"]},
            "details": {"type": "object"},
        },
    }
    observation = {
        "title": "EcomjaxObservation",
        "type": "object",
        "properties": {
            "messages": {"type": "array", "items": message},
            "new_messages": {"type": "array", "items": message},
            "tools": {"type": "array", "items": {"type": "object"}},
            "env_id": {"type": ["string", "null"]},
            "family": {"type": "string"},
            "episode_id": {"type": "string"},
            "session_id": {"type": "string"},
            "seed": {"type": "integer"},
            "difficulty": {"type": "integer"},
            "format": {"type": ["string", "null"]},
            "turn": {"type": "integer"},
            "turns_left": {"type": "integer"},
            "tool_budget": {"type": "integer"},
            "events": {"type": "array", "items": {"type": "object"}},
            "done": {"type": "boolean"},
            "termination_reason": {
                "type": ["string", "null"],
                "enum": [*C.TERMINATION_NAMES[1:], None],
            },
            "reward": {"type": "number"},
            "reward_breakdown": breakdown,
            "is_correct": {"type": ["boolean", "null"]},
            "info": {
                "type": "object",
                "description": "user_acts (knowable content only), parse summary, and at the "
                "end, when the server exposes it, trace (the hidden goal).",
            },
        },
        "required": ["messages", "tools", "turn", "done", "reward"],
    }
    state = {
        "title": "EcomjaxState",
        "type": "object",
        "properties": {
            "episode_id": {"type": "string"},
            "session_id": {"type": "string"},
            "started": {"type": "boolean"},
            "step_count": {"type": "integer", "minimum": 0},
            "family": {"type": "string"},
            "seed": {"type": "integer"},
            "difficulty": {"type": "integer"},
            "collection": {"type": ["string", "null"]},
            "format": {"type": ["string", "null"]},
            "turns_left": {"type": "integer"},
            "tool_budget": {"type": "integer"},
            "n_messages": {"type": "integer"},
            "done": {"type": "boolean"},
            "termination_reason": {"type": ["string", "null"]},
            "reward": {"type": ["number", "null"]},
        },
        "required": ["episode_id", "step_count"],
    }
    return {"action": action, "observation": observation, "state": state}


# --- the app ------------------------------------------------------------------------------------


def create_app(
    catalog: Catalog | CatalogText | None = None,
    tables: CatalogTables | None = None,
    params: EnvParams | None = None,
    config: ServerConfig | None = None,
    *,
    catalog_size: int = 1000,
    **options: Any,
):
    """The FastAPI app. ``catalog`` defaults to the synthetic one (seed 42, ``catalog_size``
    products); ``options`` are ``ServerConfig`` fields (e.g. ``max_sessions=64``).

    Routes: ``GET /health`` (readiness and warm-up progress), ``GET /metadata``,
    ``GET /schema``, ``GET /info``, ``POST /reset``, ``POST /step``, ``GET /state``,
    ``POST /close`` (without an episode id: the latest id-less reset's episode),
    ``POST /mcp`` (MCP JSON-RPC: ``tools/list``, ``tools/call``, OpenEnv's sessions),
    WebSocket ``/ws`` (one episode per connection, OpenEnv messages; ``?session_id=`` plays
    an MCP session's episode), and the demo page at ``/``. With ``config.warmup`` the served
    families compile in the background from start-up (``lifespan`` events)."""
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import FileResponse, JSONResponse, Response
    from fastapi.staticfiles import StaticFiles
    from starlette.exceptions import HTTPException as StarletteHTTPException

    if config is None:
        config = ServerConfig(**options)
    elif options:
        raise TypeError("give either config or ServerConfig options, not both")
    service = Service(catalog, tables, params, config, catalog_size)

    @asynccontextmanager
    async def lifespan(app):
        if config.warmup:
            service.warmup.start()
        yield

    # No Swagger page: it loads its assets from a CDN. /openapi.json and /schema remain.
    app = FastAPI(
        title="ecomjax", version="0.1.0", docs_url=None, redoc_url=None, lifespan=lifespan
    )
    app.state.service = service

    def error(status: int, code: str, message: str) -> JSONResponse:
        return JSONResponse({"detail": message, "code": code}, status_code=status)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        return error(exc.status, exc.code, exc.message)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        return error(exc.status_code, "HTTP_ERROR", str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        return error(422, "INVALID_REQUEST", "the request does not match this endpoint")

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception):
        return error(500, "INTERNAL", "internal server error")

    async def read_body(request: Request) -> bytes:
        """The raw body, read with a size cap (413)."""
        limit = config.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                raise ApiError(400, "INVALID_BODY", "bad Content-Length")
            if int(declared) > limit:
                raise ApiError(413, "PAYLOAD_TOO_LARGE", f"the body exceeds {limit} bytes")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(413, "PAYLOAD_TOO_LARGE", f"the body exceeds {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    async def read_json(request: Request) -> dict:
        """The body as a JSON object, with strict parsing."""
        return loads_object(await read_body(request), config.max_body_bytes)

    @app.get("/health")
    async def health():
        return service.health()

    @app.get("/metadata")
    async def metadata():
        return service.metadata()

    @app.get("/schema")
    async def schema():
        return schemas()

    @app.get("/info")
    async def info():
        return service.info()

    @app.post("/reset")
    async def reset(request: Request):
        body = await read_json(request)
        service.parse(body)  # validate before claiming a slot
        ep = service.http_episode(episode_key(body), create=True)
        return JSONResponse(await service.reset(ep, body))

    @app.post("/step")
    async def step(request: Request):
        body = await read_json(request)
        ignored = tuple(sorted(str(k)[:40] for k in body if k not in STEP_KEYS))
        if "action" not in body:
            raise ApiError(422, "MISSING_FIELD", "step needs an action")
        t = body.get("timeout_s")
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or t <= 0):
            raise ApiError(422, "INVALID_FIELD", "timeout_s must be a positive number")
        rid = body.get("request_id")
        if rid is not None and (not isinstance(rid, str) or len(rid) > 255):
            raise ApiError(422, "INVALID_FIELD", "request_id must be a string of <= 255 chars")
        ep = service.http_episode(episode_key(body), create=False)
        return JSONResponse(await service.step(ep, body["action"], ignored))

    @app.get("/state")
    async def state(episode_id: str | None = None, session_id: str | None = None):
        eid = episode_key({"episode_id": episode_id, "session_id": session_id})
        return service.state(service.http_episode(eid, create=False))

    @app.post("/close")
    async def close(request: Request):
        body = await read_json(request)
        return {"closed": service.close(episode_key(body))}

    @app.post("/mcp")
    async def mcp_http(request: Request):
        try:
            msg = loads_object(await read_body(request), config.max_body_bytes, allow_list=True)
        except ApiError as e:
            code = mcp_rpc.PARSE_ERROR if e.code == "INVALID_JSON" else mcp_rpc.INVALID_REQUEST
            return JSONResponse(mcp_rpc.error(None, code, e.message))
        reply = await mcp_rpc.dispatch(service, msg)
        if reply is None:  # a notification
            return Response(status_code=202)
        return JSONResponse(reply)

    @app.websocket("/ws")
    async def ws(websocket: WebSocket):
        await websocket.accept()
        sid = websocket.query_params.get("session_id")
        if sid is not None:  # an MCP session's episode, shared with POST /mcp
            ep = service.episodes.get(sid)
            if ep is None or ep.attached:
                why = "is already attached" if ep is not None else "is unknown"
                await websocket.send_json(
                    {"type": "error", "data": {"message": f"session {sid[:128]!r} {why}",
                                               "code": "UNKNOWN_SESSION"}}
                )  # fmt: skip
                await websocket.close(code=1008)
                return
            ep.attached = True
        else:
            try:
                service.claim_websocket()
            except ApiError as e:
                await websocket.send_json(
                    {"type": "error", "data": {"message": e.message, "code": e.code}}
                )
                await websocket.close(code=1013)
                return
            ep = Episode(uuid.uuid4().hex, service.new_session(), websocket=True)
        try:
            while True:
                msg = await websocket.receive()
                if msg["type"] == "websocket.disconnect":
                    break
                raw = msg.get("text")
                if raw is None:
                    raw = msg.get("bytes") or b""
                reply, stop = await ws_message(service, ep, raw, config.max_body_bytes)
                if reply is not None:
                    await websocket.send_text(json.dumps(reply, allow_nan=False))
                if stop:
                    await websocket.close()
                    break
        except WebSocketDisconnect:
            pass
        finally:
            if ep.attached:
                ep.attached = False
            else:
                service.release_websocket()

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon():
        icon = STATIC_DIR / "favicon.svg"
        if icon.is_file():
            return FileResponse(icon, media_type="image/svg+xml")
        return Response(status_code=204)

    if STATIC_DIR.is_dir():
        app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

        @app.get("/", include_in_schema=False)
        async def index():
            return FileResponse(STATIC_DIR / "index.html")

    return app


def loads_object(raw: bytes | str, limit: int = MAX_TEXT_CHARS, allow_list: bool = False) -> Any:
    """A request body as a JSON object (an empty body is ``{}``); 400 otherwise. ``limit``
    is the body cap (the transport enforces it in bytes first; this bounds characters)."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError:
        raise ApiError(400, "INVALID_JSON", "the body is not UTF-8") from None
    if not text.strip():
        return {}
    from ecomjax.llm_bridge.parse import loads

    try:
        body = loads(text, max_chars=limit)
    except (ValueError, RecursionError) as e:
        raise ApiError(400, "INVALID_JSON", f"the body is not valid JSON: {str(e)[:120]}") from None
    if not isinstance(body, dict) and not (allow_list and isinstance(body, list)):
        raise ApiError(400, "INVALID_BODY", "the body must be a JSON object")
    return body


async def ws_message(service: Service, ep: Episode, raw: bytes | str, limit: int):
    """One OpenEnv WebSocket message -> (reply or None, close?). Errors are replies.

    Besides reset / step / state / close: ``{"type": "mcp", "data": <JSON-RPC>}`` and the
    step actions of OpenEnv's ``MCPToolClient`` (``{"type": "list_tools"}``,
    ``{"type": "call_tool", "tool_name", "arguments"}``), each one turn of this episode."""

    def err(code: str, message: str) -> dict:
        return {"type": "error", "data": {"message": message, "code": code}}

    if len(raw) > limit:
        return err("PAYLOAD_TOO_LARGE", f"the message exceeds {limit} bytes"), False
    try:
        msg = loads_object(raw, limit)
        kind = msg.get("type")
        data = msg.get("data", {})
        if set(msg) - {"type", "data"}:
            raise ApiError(422, "INVALID_MESSAGE", "a message is {type, data}")
        if not isinstance(data, dict):
            raise ApiError(422, "INVALID_MESSAGE", "data must be a JSON object")
        if kind == "reset":
            return {"type": "observation", "data": await service.reset(ep, data)}, False
        if kind == "step":
            tool_step = await mcp_step(service, ep, data)
            if tool_step is not None:
                return {"type": "observation", "data": tool_step}, False
            action = data["action"] if set(data) == {"action"} else data
            return {"type": "observation", "data": await service.step(ep, action)}, False
        if kind == "state":
            return {"type": "state", "data": service.state(ep)}, False
        if kind == "mcp":
            return {"type": "mcp", "data": await mcp_rpc.dispatch(service, data, ep)}, False
        if kind == "close":
            return None, True
        raise ApiError(422, "UNKNOWN_TYPE", "type must be reset, step, state, mcp or close")
    except ApiError as e:
        return err(e.code, e.message), False
    except Exception:  # noqa: BLE001 - never leak a traceback to a client
        return err("EXECUTION_ERROR", "internal error while handling the message"), False


async def mcp_step(service: Service, ep: Episode, data: Mapping) -> dict | None:
    """The reply to ``MCPToolClient``'s step actions, or None for any other action.
    The observation carries what that client reads (``tools`` or ``tool_name``/``result``/
    ``error``) and, in ``metadata``, the turn counters."""
    kind = data.get("type")
    if kind == "list_tools" and set(data) == {"type"}:
        done = bool(ep.started and ep.session.done)
        return {"observation": {"tools": mcp_rpc.mcp_tools(), "metadata": {}}, "reward": None,
                "done": done}  # fmt: skip
    if kind != "call_tool" or not set(data) <= {"type", "tool_name", "arguments"}:
        return None
    name = data.get("tool_name")
    res = await mcp_rpc.call_tool(service, ep, name, data.get("arguments"))
    sc = res["structuredContent"]
    obs = {
        "tool_name": name if isinstance(name, str) else "",
        "result": res,
        "error": None,
        "metadata": {k: v for k, v in sc.items() if k not in ("done", "reward")},
    }
    return {"observation": obs, "reward": sc["reward"], "done": bool(sc["done"])}
