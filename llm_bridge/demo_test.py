"""The browser demo, driven by a person's clicks in headless Chromium (Selenium) against a live
uvicorn on loopback: start an episode, call a tool through the schema-generated form, submit an
answer, see the reward and the hidden goal. The reward shown must equal an offline ``Session``
replay of the turns the page sent. ``ECOMJAX_DEMO_SCREENSHOT=docs/demo.png`` refreshes the
screenshot in docs/host_bridge.md; otherwise it goes to a temporary folder.

Skips (with the reason) when selenium, chromium or chromedriver is missing: ``scripts/setup.sh``
installs chromium and chromium-driver with apt where it can."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the serve extra (fastapi) is not installed")
pytest.importorskip("uvicorn", reason="the serve extra (uvicorn) is not installed")
pytest.importorskip("selenium", reason="selenium is not installed")
from ecomjax.llm_bridge import server as SV  # noqa: E402
from ecomjax.llm_bridge import session as SS  # noqa: E402
from ecomjax.llm_bridge.server_test import live_server  # noqa: E402

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
TIMEOUT = 120  # s; the first reset and step compile


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
    # An explicit driver path: Selenium Manager would try to download one.
    d = webdriver.Chrome(service=Service(executable_path=chromedriver), options=opts)
    d.set_page_load_timeout(60)
    yield d
    d.quit()


def test_person_plays_an_episode_in_the_browser(catalog, driver, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import Select, WebDriverWait

    text = SS.CatalogText.build(catalog)
    app = SV.create_app(text, expose_goal=True)
    wait = WebDriverWait(driver, TIMEOUT)
    with live_server(app) as url:
        driver.get(f"http://{url}/")
        wait.until(EC.text_to_be_present_in_element((By.ID, "status"), "Ready."))
        Select(driver.find_element(By.ID, "family")).select_by_value("PD")
        for field, value in (("difficulty", "1"), ("seed", "3")):
            box = driver.find_element(By.ID, field)
            box.clear()
            box.send_keys(value)
        driver.find_element(By.ID, "reset-btn").click()
        wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "#messages .msg.user")))
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
            "catalog_search" in pending
            and '"filters":{"cat":"monitors","price_max":40.71}' in pending
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
