"""The browser demo, driven by a person's clicks in headless Chromium (Selenium) against a live
uvicorn on loopback: start an episode, call a tool through the schema-generated form, submit an
answer, see the reward and the hidden goal. The reward shown must equal an offline ``Session``
replay of the turns the page sent. ``ECOMJAX_DEMO_SCREENSHOT=docs/demo.png`` refreshes the
screenshot in docs/host_bridge.md; otherwise it goes to a temporary folder.

Also (issue 17): argument bounds from the tool schemas are enforced in the forms; a finished
episode shows no stale "turns left" and locks its controls; the status line explains a rejected
turn in words; tool results render as product cards, order lines and policy text with the raw
JSON one click away; no favicon 404 (nor any other console error); the server's warm-up
progress from ``GET /health`` is shown, and a reset that waits for a family to compile says so.
The warm-up and the order tests run against a small stub server (no JAX) that serves the same
static files, with a ``/health`` the test controls and a ``/reset`` that waits until released.

``ECOMJAX_DEMO_STATIC=DIR`` serves the demo's files from DIR instead of ``llm_bridge/static``
(to run these tests against another version of the page, e.g. an older commit's).

Skips (with the reason) when selenium, chromium or chromedriver is missing: ``scripts/setup.sh``
installs chromium and chromium-driver with apt where it can."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the serve extra (fastapi) is not installed")
pytest.importorskip("uvicorn", reason="the serve extra (uvicorn) is not installed")
pytest.importorskip("selenium", reason="selenium is not installed")
from ecomjax.llm_bridge import schemas as SC  # noqa: E402
from ecomjax.llm_bridge import server as SV  # noqa: E402
from ecomjax.llm_bridge import session as SS  # noqa: E402

try:
    from ecomjax.llm_bridge.serve_thread import serve_in_thread as live_server
except ImportError:  # before the warm-up change
    from ecomjax.llm_bridge.server_test import live_server

from ecomjax import constants as C  # noqa: E402
from ecomjax.registry import FAMILIES  # noqa: E402

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
TIMEOUT = 120  # s; the first reset and step compile
QUICK = 15  # s; anything that compiles nothing


def _browser() -> tuple[str, str]:
    browser = os.environ.get("CHROME_BIN") or next(filter(None, map(shutil.which, BROWSERS)), None)
    driver = os.environ.get("CHROMEDRIVER") or shutil.which("chromedriver")
    if not browser or not driver:
        pytest.skip("headless test needs chromium and chromedriver (apt: chromium chromium-driver)")
    return browser, driver


@pytest.fixture(scope="module")
def driver():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, chromedriver = _browser()
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000", "--force-device-scale-factor=1"):  # fmt: skip
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console, for 404s
    # An explicit driver path: Selenium Manager would try to download one.
    d = webdriver.Chrome(service=Service(executable_path=chromedriver), options=opts)
    d.set_page_load_timeout(60)
    yield d
    d.quit()


@pytest.fixture(scope="module")
def static_dir() -> Path:
    env = os.environ.get("ECOMJAX_DEMO_STATIC")
    return Path(env) if env else SV.STATIC_DIR


@pytest.fixture(scope="module")
def text(catalog) -> SS.CatalogText:
    return SS.CatalogText.build(catalog)


@pytest.fixture(scope="module")
def served(text, static_dir):
    """The real server (one for the module: JAX compiles PD once), as its base URL. No
    warm-up: the page's warm-up display is tested on the stub below."""
    fields = {f.name for f in dataclasses.fields(SV.ServerConfig)}
    options = {"warmup": False} if "warmup" in fields else {}
    old = SV.STATIC_DIR
    SV.STATIC_DIR = static_dir  # read by create_app and by the "/" route
    try:
        app = SV.create_app(text, expose_goal=True, **options)
        with live_server(app) as url:
            yield f"http://{url}"
    finally:
        SV.STATIC_DIR = old


# --- helpers -------------------------------------------------------------------------------------


def _wait(driver, timeout=TIMEOUT):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout)


def _open(driver, url: str) -> None:
    """Loads the page and waits until it has its families and forms (from GET /info)."""
    driver.get(url + "/")
    _wait(driver, QUICK).until(
        lambda d: d.execute_script(
            "return !!(window.demo && window.demo.info) && document.getElementById('family')"
            ".options.length > 0 && !!document.getElementById('tool-select').value"
        )
    )


def _js(driver, script: str):
    return driver.execute_script(script)


def _start(driver, family: str, difficulty: int, seed: int, timeout=TIMEOUT) -> dict:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element(By.ID, "family")).select_by_value(family)
    for field, value in (("difficulty", difficulty), ("seed", seed)):
        box = driver.find_element(By.ID, field)
        box.clear()
        box.send_keys(str(value))
    driver.find_element(By.ID, "reset-btn").click()
    _wait(driver, timeout).until(
        lambda d: _js(
            d, "return !!(window.demo.obs && window.demo.obs.turn === 0 && !window.demo.busy)"
        )
    )
    return _js(driver, "return window.demo.obs")


def _fill_call(driver, tool: str, args: dict[str, str]) -> None:
    """Chooses a tool in the form and types its arguments (field id suffix -> text)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element(By.ID, "tool-select")).select_by_value(tool)
    for name, value in args.items():
        box = driver.find_element(By.ID, f"arg-{name}")
        box.clear()
        box.send_keys(value)


def _send(driver, turn: int) -> dict:
    from selenium.webdriver.common.by import By

    driver.find_element(By.ID, "send-turn").click()
    _wait(driver).until(
        lambda d: _js(d, f"return window.demo.obs.turn === {turn} && !window.demo.busy")
    )
    return _js(driver, "return window.demo.obs")


def _text(driver, element_id: str) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, element_id).text


# --- the real server -----------------------------------------------------------------------------


def test_person_plays_an_episode_in_the_browser(driver, served, text, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import Select

    wait = _wait(driver)
    _open(driver, served)
    _start(driver, "PD", 1, 3)
    shown_opening = driver.find_element(By.CSS_SELECTOR, "#messages .msg.user").text
    opening = driver.execute_script("return window.demo.obs.messages[1].content")
    assert opening.strip() and opening.strip() in shown_opening

    # A tool call through the form generated from catalog_search's JSON schema.
    Select(driver.find_element(By.ID, "tool-select")).select_by_value("catalog_search")
    # PD d=1 seed 3 asks for the cheapest monitors at most $40.71 (the form's nested filters).
    driver.find_element(By.ID, "arg-query").send_keys("monitor")
    driver.find_element(By.CSS_SELECTOR, "#tool-form details.group > summary").click()
    driver.find_element(By.ID, "arg-filters-cat").send_keys("monitors")
    driver.find_element(By.ID, "arg-filters-price_max").send_keys("40.71")
    driver.find_element(By.ID, "arg-top_k").send_keys("5")
    Select(driver.find_element(By.ID, "arg-sort_by")).select_by_value("price_asc")
    driver.find_element(By.ID, "add-call").click()
    pending = driver.find_element(By.ID, "pending-calls").text
    assert (
        "catalog_search" in pending and '"filters":{"cat":"monitors","price_max":40.71}' in pending
    )
    driver.find_element(By.ID, "message").send_keys("Let me look that up.")
    driver.find_element(By.ID, "send-turn").click()
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "#messages .msg.tool")))
    wait.until(lambda d: d.execute_script("return window.demo.obs.turn") == 1)
    results = driver.execute_script(
        "const m = window.demo.obs.new_messages.find(x => x.role === 'tool');"
        "return JSON.parse(m.content).results.map(r => r.product_id);"
    )
    assert 1 <= len(results) <= 5

    # The answer, through the form generated from PD's answer schema.
    driver.find_element(By.ID, "include-answer").click()
    driver.find_element(By.ID, "ans-recommended_product_ids").send_keys(", ".join(results[:3]))
    driver.find_element(By.ID, "send-turn").click()
    wait.until(EC.visibility_of_element_located((By.ID, "result")))
    obs = driver.execute_script("return window.demo.obs")
    sent = [json.loads(t) for t in driver.execute_script("return window.demo.sent")]
    shown = driver.find_element(By.ID, "reward").text
    assert obs["done"] and f"Reward {obs['reward']:.3f}" in shown
    assert obs["termination_reason"] in shown
    breakdown = driver.find_element(By.ID, "breakdown").text
    assert "r_task" in breakdown and "r_total" in breakdown
    goal = driver.find_element(By.ID, "goal").text
    assert "target_product_id" in goal and '"family": "PD"' in goal
    driver.execute_script("window.scrollTo(0, 0)")
    shot = Path(os.environ.get("ECOMJAX_DEMO_SCREENSHOT") or tmp_path / "demo.png")
    shot.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(shot))

    # What the person saw is what an offline session gives for the same turns.
    assert [t["answer"] is not None for t in sent] == [False, True]
    s = SS.Session(text, compiler_options=SS.FAST_COMPILE)
    s.reset("PD", 1, 3)
    for t in sent:
        last = s.step({k: v for k, v in t.items() if k != "format"}, "json")
    assert last["done"] and last["reward"] == pytest.approx(obs["reward"], abs=0)
    assert SV.jsonable(last["messages"]) == obs["messages"]
    assert shot.stat().st_size > 10_000


def test_argument_bounds_from_the_schemas_are_enforced(driver, served):
    """top_k=1000 (schema: 1..500) is refused in the form with a message next to the field, so
    it never reaches the server (where it hard-fails the episode); a fixed value then plays."""
    from selenium.webdriver.common.by import By

    _open(driver, served)
    _start(driver, "PD", 5, 3)
    _fill_call(driver, "catalog_search", {"query": "monitor", "top_k": "1000"})
    top_k = driver.find_element(By.ID, "arg-top_k")
    assert (top_k.get_attribute("min"), top_k.get_attribute("max")) == ("1", "500")
    driver.find_element(By.ID, "add-call").click()
    assert _js(driver, "return window.demo.pending") == [], "top_k=1000 was queued for sending"
    error = driver.find_elements(By.ID, "arg-top_k-error")
    assert error and error[0].is_displayed(), "no inline message under top_k"
    assert "1–500" in error[0].text and "1000" in error[0].text
    assert top_k.get_attribute("aria-invalid") == "true"
    assert _text(driver, "tool-error").startswith("Not added")
    assert driver.find_element(By.ID, "arg-query").get_attribute("maxlength") == "200"

    # Another tool's bounds: cart_add's quantity is 1..99.
    _fill_call(driver, "cart_add", {"product_id": "syn_000001", "quantity": "100"})
    assert driver.find_element(By.ID, "arg-quantity").get_attribute("max") == "99"
    driver.find_element(By.ID, "add-call").click()
    assert _js(driver, "return window.demo.pending.length") == 0
    assert "1–99" in _text(driver, "arg-quantity-error")

    # Fixed, the call goes out and the episode goes on.
    _fill_call(driver, "catalog_search", {"query": "monitor", "top_k": "500"})
    assert not driver.find_element(By.ID, "arg-top_k-error").is_displayed()  # cleared on edit
    _fill_call(driver, "catalog_search", {"top_k": "2"})
    driver.find_element(By.ID, "add-call").click()
    assert _js(driver, "return window.demo.pending") == [
        {"name": "catalog_search", "arguments": {"query": "monitor", "top_k": 2}}
    ]
    obs = _send(driver, 1)
    assert not obs["done"] and obs["termination_reason"] is None


def test_episode_over_shows_no_turns_left_and_locks_the_turn(driver, served):
    """A hard fail (two calls at a tool budget of one): the counters say the episode is over,
    not how many turns are left, and the turn's controls are disabled."""
    from selenium.webdriver.common.by import By

    _open(driver, served)
    obs = _start(driver, "PD", 1, 3)
    assert obs["tool_budget"] == 1
    assert "turns left" in _text(driver, "counters")
    for _ in range(2):
        _fill_call(driver, "datetime_now", {})
        driver.find_element(By.ID, "add-call").click()
    obs = _send(driver, 1)
    assert obs["done"] and obs["termination_reason"] == "hard_fail"
    counters = _text(driver, "counters")
    assert "turns left" not in counters and "over" in counters, counters
    for control in ("send-turn", "add-call", "include-answer", "message", "tool-select"):
        assert not driver.find_element(By.ID, control).is_enabled(), control
    assert driver.find_element(By.ID, "reset-btn").is_enabled()
    assert "tool budget exceeded" in _text(driver, "status")


def test_status_line_explains_a_rejected_turn(driver, served):
    """A turn the form would refuse (top_k=1000, put in the turn by script as another client
    could send it): the status says what was wrong and what happened, not "(left to the
    device)"."""
    _open(driver, served)
    _start(driver, "PD", 1, 3)
    _js(
        driver,
        "window.demo.pending.push({name: 'catalog_search',"
        " arguments: {query: 'monitor', top_k: 1000}});",
    )
    obs = _send(driver, 1)
    assert obs["done"] and obs["reward_breakdown"]["hard_fail_kind"] == "invalid_tool_call"
    assert any("left to the device" in e for e in obs["info"]["parse"]["errors"])  # the server's
    status = _text(driver, "status")
    assert "left to the device" not in _js(driver, "return document.body.innerText")
    assert "top_k = 1000 is out of range (allowed 1–500)" in status, status
    assert "invalid tool call" in status and "Start a new episode" in status


def test_tool_results_render_as_cards_with_raw_json(driver, served):
    """Search results as product cards, policy topics as text, an empty order list in words;
    each result's raw JSON behind a toggle."""
    from selenium.webdriver.common.by import By

    _open(driver, served)
    obs = _start(driver, "PD", 5, 3)
    assert obs["tool_budget"] >= 3
    _fill_call(driver, "catalog_search", {"query": "monitor", "top_k": "3"})
    driver.find_element(By.ID, "add-call").click()
    _fill_call(driver, "policy_search", {"query": "return window", "top_k": "1"})
    driver.find_element(By.ID, "add-call").click()
    _fill_call(driver, "order_list", {"days": "365"})
    driver.find_element(By.ID, "add-call").click()
    obs = _send(driver, 1)
    tools = [m for m in obs["new_messages"] if m["role"] == "tool"]
    assert [m["name"] for m in tools] == ["catalog_search", "policy_search", "order_list"]
    search, policy = json.loads(tools[0]["content"]), json.loads(tools[1]["content"])

    bubbles = driver.find_elements(By.CSS_SELECTOR, "#messages .msg.tool")[-3:]
    cards = bubbles[0].find_elements(By.CSS_SELECTOR, ".product-card")
    assert len(cards) == len(search["results"]) >= 1
    for card, p in zip(cards, search["results"], strict=True):
        shown = card.text
        assert p["title"] in shown and f"${p['price']:.2f}" in shown and p["product_id"] in shown
        assert f"{p['rating']:.2f}" in shown and "ships in" in shown
        assert ("In stock" if p["stock_qty"] > 0 else "Out of stock") in shown
    topic = policy["results"][0]
    shown = bubbles[1].find_element(By.CSS_SELECTOR, ".policy-topic").text
    assert topic["question"] in shown and topic["rules"][0]["text"] in shown
    assert "No orders" in bubbles[2].text

    # Raw JSON on demand: closed at first, the exact content when opened.
    raw = bubbles[0].find_element(By.CSS_SELECTOR, "details.raw-json")
    assert raw.get_attribute("open") is None
    pre = raw.find_element(By.TAG_NAME, "pre")
    assert not pre.is_displayed()
    raw.find_element(By.TAG_NAME, "summary").click()
    assert pre.is_displayed() and json.loads(pre.text) == search


def test_no_favicon_404_nor_console_errors(driver, served):
    driver.get_log("browser")  # drop what earlier pages logged
    _open(driver, served)
    time.sleep(2.5)  # the browser asks for the icon after the load
    logs = driver.get_log("browser")
    bad = [e["message"] for e in logs if e["level"] == "SEVERE" or " 404 " in e["message"]]
    assert not bad, bad
    icon = _js(
        driver,
        "const l = document.querySelector('link[rel~=icon]'); if (!l) return null;"
        "return fetch(l.href).then(r => [r.status, r.headers.get('content-type')]);",
    )
    assert icon is not None and icon[0] == 200 and icon[1].startswith("image/svg"), icon


# --- a stub server: warm-up progress and recorded tool results, without JAX ---------------------

FAMS = list(FAMILIES)


def _dumps(obj) -> str:  # render.dumps
    return json.dumps(obj, ensure_ascii=False, separators=(", ", ": "))


def _warming(current: str, done: int, elapsed: float) -> dict:
    others = sorted(FAMS, key=lambda f: f != "CART")  # CART compiles first
    others.remove(current)
    fams = {f: "ready" if i < done else "pending" for i, f in enumerate(others)}
    fams[current] = "compiling"
    return {
        "status": "healthy",
        "ready": False,
        "warmup": {
            "state": "running",
            "families": fams,
            "done": done,
            "total": len(FAMS),
            "current": current,
            "elapsed_s": elapsed,
            "error": None,
        },
    }


# Tool results as the real server renders them (recorded from a STATUS episode, d=5, seed 3).
ORDER_LINES = [
    {
        "line_id": "ord_003_line_01",
        "product_id": "syn_000545",
        "title": "Deluxe BrightPath Table Lamp 2957",
        "qty": 2,
    },
    {
        "line_id": "ord_003_line_02",
        "product_id": "syn_000322",
        "title": "Ergonomic TechPro Joystick 8858",
        "qty": 2,
    },
]
RECORDED = [
    (
        "order_list",
        [
            {
                "order_id": "ord_003",
                "order_date": "2025-06-08",
                "status": "CONFIRMED",
                "item_count": 4,
                "items": ORDER_LINES,
            },
            {
                "order_id": "ord_001",
                "order_date": "2025-05-20",
                "status": "CANCELLED",
                "item_count": 2,
                "items": [
                    {
                        "line_id": "ord_001_line_01",
                        "product_id": "syn_000570",
                        "title": "Classic FusionLab Phone Case 7795",
                        "qty": 2,
                    }
                ],
            },
        ],
    ),
    (
        "order_get_status",
        {
            "order_id": "ord_003",
            "status": "CONFIRMED",
            "order_date": "2025-06-08",
            "eta_date": "2025-06-21",
            "lines": [
                {**ORDER_LINES[0], "unit_price": 188.41, "variant_id": None},
                {**ORDER_LINES[1], "unit_price": 2.16, "variant_id": None},
            ],
        },
    ),
    (
        "return_check_eligibility",
        {
            "eligible": False,
            "ineligible_reason": "not_delivered",
            "window_days": 30,
            "days_since_purchase": 3,
            "product_title": "Deluxe BrightPath Table Lamp 2957",
            "allowed_reason_codes": ["defective", "wrong_item"],
            "allowed_methods": ["mail"],
            "fees": {"mail": 0.0},
        },
    ),
    (
        "cart_add",
        {
            "lines": [
                {
                    "line_id": "line_001",
                    "product_id": "syn_000545",
                    "variant_id": None,
                    "title": "Deluxe BrightPath Table Lamp 2957",
                    "variant_description": None,
                    "qty": 2,
                    "unit_price": 188.41,
                }
            ],
            "total_items": 2,
            "total_price": 376.82,
        },
    ),
    (
        "catalog_search",
        {"error": {"code": "invalid_tool_call", "message": "The turn was rejected; no call ran."}},
    ),
    ("datetime_now", {"nested": [{"unknown": {"shape": 1}}]}),  # no renderer: raw JSON
]


def _stub_observation() -> dict:
    calls = [
        {"id": f"call_1_{i}", "type": "function", "function": {"name": n, "arguments": "{}"}}
        for i, (n, _) in enumerate(RECORDED)
    ]
    messages = [
        {"role": "system", "content": "You are a shopping assistant."},
        {"role": "user", "content": "Can you check the status of my order with the lamp?"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        *(
            {"role": "tool", "tool_call_id": f"call_1_{i}", "name": n, "content": _dumps(c)}
            for i, (n, c) in enumerate(RECORDED)
        ),
    ]
    obs = {
        "messages": messages,
        "new_messages": messages[2:],
        "tools": SC.all_tools(),
        "env_id": "STATUS",
        "turn": 0,
        "turns_left": 5,
        "tool_budget": 3,
        "events": [],
        "done": False,
        "termination_reason": None,
        "reward": 0.0,
        "reward_breakdown": None,
        "is_correct": None,
        "info": {"user_acts": [], "parse": None},
        "episode_id": "stub",
        "session_id": "stub",
        "seed": 3,
        "difficulty": 5,
        "format": "json",
    }
    return {"observation": obs, "reward": None, "done": False}


@pytest.fixture(scope="module")
def stub(static_dir):
    """A server with the demo's files, GET /info, a GET /health the test sets (``health``;
    ``hits`` counts requests) and a POST /reset that waits for ``gate`` (``resets`` counts)."""
    from fastapi import FastAPI
    from fastapi.responses import FileResponse
    from fastapi.staticfiles import StaticFiles

    state = {"health": {"status": "healthy"}, "hits": 0, "resets": 0, "gate": threading.Event()}
    info = {
        "name": "ecomjax",
        "families": FAMS,
        "d_max": C.D_MAX,
        "default_difficulty": 3,
        "tools": SC.all_tools(),
        "answer_schemas": {e: SC.answer_schema(e) for e in C.ENV_NAMES},
        "expose_goal": False,
        "disclose_env_id": True,
    }
    app = FastAPI(docs_url=None, redoc_url=None)

    @app.get("/health")
    def health():
        state["hits"] += 1
        return state["health"]

    @app.get("/info")
    def get_info():
        return info

    @app.post("/reset")
    def reset():  # a thread: waits like a reset for a family that is still compiling
        state["resets"] += 1
        state["gate"].wait(60)
        return _stub_observation()

    app.mount("/static", StaticFiles(directory=static_dir), name="static")

    @app.get("/")
    def index():
        return FileResponse(static_dir / "index.html")

    with live_server(app) as url:
        state["url"] = f"http://{url}"
        yield state
        state["gate"].set()


def test_readiness_and_a_reset_waiting_for_compilation(driver, stub):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    wait = _wait(driver, QUICK)
    readiness = lambda d: d.find_element(By.ID, "readiness").text  # noqa: E731
    stub["gate"].clear()
    stub["health"] = _warming("PD", 1, 12.3)
    _open(driver, stub["url"])
    wait.until(
        lambda d: "Compiling PD (1/8 families ready, 12 s)" in readiness(d),
        message="the page shows no warm-up progress",
    )
    pd = driver.find_element(By.CSS_SELECTOR, "#family option[value=PD]")
    assert "compiling" in pd.text
    stub["health"] = _warming("PD", 2, 14.0)  # polled while warming up
    wait.until(lambda d: "Compiling PD (2/8 families ready, 14 s)" in readiness(d))

    # A reset for PD waits for it to compile, and the status line says so (with the time).
    Select(driver.find_element(By.ID, "family")).select_by_value("PD")
    driver.find_element(By.ID, "reset-btn").click()
    wait.until(lambda d: stub["resets"] == 1 and "Waiting for PD to compile" in _text(d, "status"))
    status = _text(driver, "status")
    assert "a few seconds" not in status and "2/8 families ready" in status, status
    assert not driver.find_element(By.ID, "reset-btn").is_enabled()

    # Warm-up done: "Ready", the episode starts, and polling stops.
    stub["health"] = _warming("PD", len(FAMS) - 1, 30.0)
    stub["health"]["ready"] = True
    stub["health"]["warmup"].update(
        state="done", families=dict.fromkeys(FAMS, "ready"), done=len(FAMS), current=None
    )
    wait.until(lambda d: readiness(d).startswith("Ready"))
    stub["gate"].set()
    wait.until(lambda d: _text(d, "status").startswith("Episode started"))
    assert pd.text == "PD"
    hits = stub["hits"]
    time.sleep(2.5)
    assert stub["hits"] == hits, "polls /health after the warm-up finished"

    # A failed warm-up says so; a server without a warm-up report (older) counts as ready.
    stub["health"] = _warming("SUB", 3, 20.0)
    stub["health"]["warmup"].update(state="failed", error="XlaRuntimeError: out of memory")
    _open(driver, stub["url"])
    wait.until(lambda d: "Warm-up failed: XlaRuntimeError: out of memory" in readiness(d))
    stub["health"] = {"status": "healthy"}
    _open(driver, stub["url"])
    wait.until(lambda d: readiness(d) == "Ready")
    stub["health"] = _warming("SUB", 0, 0.0)  # warm-up switched off: compiles on first use
    stub["health"].update(ready=True)
    stub["health"]["warmup"].update(state="off", current=None)
    _open(driver, stub["url"])
    wait.until(lambda d: "no warm-up" in readiness(d) and "10–35 s" in readiness(d))
    assert driver.find_element(By.CSS_SELECTOR, "#family option[value=SUB]").text == "SUB"


def test_order_lines_and_other_results_render_for_a_person(driver, stub):
    from selenium.webdriver.common.by import By

    stub["health"] = {"status": "healthy"}
    stub["gate"].set()
    _open(driver, stub["url"])
    driver.find_element(By.ID, "reset-btn").click()
    _wait(driver, QUICK).until(lambda d: _text(d, "status").startswith("Episode started"))
    bubbles = driver.find_elements(By.CSS_SELECTOR, "#messages .msg.tool")
    assert len(bubbles) == len(RECORDED)
    listing, status, eligibility, cart, error, unknown = bubbles

    orders = listing.find_elements(By.CSS_SELECTOR, ".order-card")
    assert len(orders) == 2
    first = orders[0].text
    assert "Order ord_003" in first and "CONFIRMED" in first and "ordered 2025-06-08" in first
    rows = orders[0].find_elements(By.CSS_SELECTOR, "table.lines tbody tr")
    assert len(rows) == 2
    assert "Deluxe BrightPath Table Lamp 2957" in rows[0].text and "ord_003_line_01" in rows[0].text
    assert "CANCELLED" in orders[1].text

    one = status.find_element(By.CSS_SELECTOR, ".order-card").text
    assert "expected 2025-06-21" in one and "$188.41" in one and "Ergonomic TechPro" in one
    assert "not_delivered" in eligibility.find_element(By.CSS_SELECTOR, "dl.kv").text
    assert "total $376.82" in cart.text and "line_001" in cart.text
    assert "Error invalid_tool_call: The turn was rejected" in error.text
    # Unknown shape: the raw JSON, shown as is (no toggle needed).
    raw = unknown.find_element(By.CSS_SELECTOR, "pre")
    assert raw.is_displayed() and json.loads(raw.text) == RECORDED[-1][1]
    for b in bubbles[:-1]:
        assert len(b.find_elements(By.CSS_SELECTOR, "details.raw-json")) == 1
