"""The page of mtx-serve in a real browser: headless Chromium from the system's packages, driven
by Selenium through the system's chromedriver (nothing is downloaded). It opens the page, types a
sentence, checks the translation and the heatmaps, switches a head off and checks that the gated
translation came back (the same as the API's), applies the head study's pruning order a step,
and saves screenshots under the test's temporary directory.

Where no browser can be had the test is skipped and says why; with MTX_REQUIRE_BROWSER=1 (set
by .ci/run, which installs Chromium) it fails instead, so CI never skips it silently."""
import json
import os
import shutil

import numpy as onp
import pytest

import fastapi  # noqa: E402,F401  the serve extra, which make install installs: missing, these fail
from servers import post, request, start_server  # noqa: E402

from mtx.heads import importance as heads  # noqa: E402

ROWS, HEADS, SENTENCE = 6, 4, "w1 w2 w3 w4"  # the toy run: 6 attention layers of 4 heads
INSTALL = "apt-get install chromium chromium-driver (bash .ci/run does)"


def browser_paths():
    """(chromium, chromedriver), or skip saying what is missing (fail, with
    MTX_REQUIRE_BROWSER=1)."""
    missing = []
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package (pip install -e '.[test]')")
    chromium = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
    driver = shutil.which("chromedriver")
    missing += [name for name, path in (("chromium", chromium), ("chromedriver", driver))
                if path is None]
    if missing:
        reason = f"no headless browser: {', '.join(missing)} not found; {INSTALL}"
        if os.environ.get("MTX_REQUIRE_BROWSER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return chromium, driver


@pytest.fixture(scope="module")
def browser():
    chromium, driver_path = browser_paths()
    from selenium import webdriver
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1200,1300"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options,
                              service=webdriver.ChromeService(executable_path=driver_path))
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def study_run(toy_run, tmp_path_factory):
    """A copy of the toy run with a made-up head study in heads/ (importance and a pruning
    curve in the files' real format; the order is `mtx.heads.importance.removal_order` of the scores)."""
    run = tmp_path_factory.mktemp("served") / "run"
    shutil.copytree(toy_run, run, ignore=shutil.ignore_patterns("heads", "eval"))
    (run / "heads").mkdir()
    importance = onp.random.RandomState(7).rand(ROWS, HEADS).round(3)
    order = heads.removal_order(importance)
    steps = [n for n in heads.curve_steps(ROWS * HEADS) if n <= len(order)]
    layers = ["enc0 self", "enc1 self", "dec0 self", "dec0 cross", "dec1 self", "dec1 cross"]
    (run / "heads" / "importance.json").write_text(json.dumps(
        {"layers": layers, "gradient": importance.tolist()}))
    (run / "heads" / "pruning.json").write_text(json.dumps(
        {"orders": {"importance": [list(map(int, o)) for o in order]},
         "curves": {"importance": [[n, 100.0 - 3 * n] for n in steps]}}))
    return run, order, steps


@pytest.fixture(scope="module")
def page(study_run, browser):
    run, _, _ = study_run
    process = start_server(run, "decode=greedy")  # the page's default beam: 1
    browser.get(process.url + "/")
    yield browser, process.url
    assert process.stop() == 0, process.log[-5:]


def wait_for(driver, condition, what):
    from selenium.webdriver.support.ui import WebDriverWait
    return WebDriverWait(driver, 60).until(lambda d: condition(d), f"waited for {what}")


def settled(driver, heads_off):
    """The page is ready and shows a translation made with ``heads_off`` heads off."""
    from selenium.webdriver.common.by import By
    body, out = driver.find_element(By.TAG_NAME, "body"), driver.find_element(By.ID, "translation")
    return (body.get_attribute("data-state") == "ready"
            and out.get_attribute("data-heads-off") == str(heads_off) and out.text)


def api_translation(url, beam, off):
    gates = [[1] * HEADS for _ in range(ROWS)]
    for a, h in off:
        gates[a][h] = 0
    status, out, _ = post(url, "/translate", {"text": [SENTENCE], "beam_size": beam,
                                              "gates": gates})
    assert status == 200, out
    return out["translations"][0]


def test_the_page_translates_shows_every_head_and_switches_heads_off(page, study_run, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    driver, url = page
    _, order, steps = study_run
    wait_for(driver, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-state")
             == "ready", "the page to load /info and /heads")
    assert "importance" in driver.find_element(By.ID, "study-about").text
    beam = int(driver.find_element(By.ID, "beam").get_attribute("value"))

    driver.find_element(By.ID, "text").send_keys(SENTENCE, Keys.ENTER)
    wait_for(driver, lambda d: settled(d, 0), "the translation")
    assert driver.find_element(By.ID, "translation").text == "w4 w3 w2 w1"
    maps = driver.find_elements(By.CSS_SELECTOR, "canvas.heatmap")
    # layer 1: encoder self, decoder self, decoder cross; one heatmap per head
    assert [(m.get_attribute("data-row"), m.get_attribute("data-head")) for m in maps] == [
        (str(row), str(h)) for row in (0, 2, 3) for h in range(HEADS)]
    assert all(m.size["width"] > 40 and m.size["height"] > 40 for m in maps)
    assert len(driver.find_elements(By.CSS_SELECTOR, ".importance")) == 3 * HEADS
    driver.save_screenshot(str(tmp_path / "page.png"))

    driver.find_element(By.CSS_SELECTOR, 'input.head-switch[data-row="3"][data-head="0"]').click()
    wait_for(driver, lambda d: settled(d, 1), "the translation with one head off")
    gated = driver.find_element(By.ID, "translation").text
    assert gated == api_translation(url, beam, [(3, 0)])
    assert len(driver.find_elements(By.CSS_SELECTOR, "canvas.heatmap")) == 3 * HEADS
    assert len(driver.find_elements(By.CSS_SELECTOR, ".card.off")) == 1
    driver.save_screenshot(str(tmp_path / "page_gated.png"))

    driver.find_element(By.ID, "prune-step").click()  # the study's first step replaces the gates
    wait_for(driver, lambda d: settled(d, steps[1]), "the first pruning step")
    assert driver.find_element(By.ID, "translation").text == api_translation(
        url, beam, order[:steps[1]])
    assert str(steps[1]) in driver.find_element(By.ID, "prune-info").text

    for shot in ("page.png", "page_gated.png"):
        assert (tmp_path / shot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert not errors, errors  # no script error, nothing blocked by the page's policy


def test_the_page_signs_in_to_a_server_with_a_token_and_translates(toy_run, browser):
    """The page's own requests pass the other-site checks (Origin, Sec-Fetch-Site) that a real
    browser's carry: the sign-in through POST /login, the translation with its cookie, and the
    sign-out (POST /logout), after which that cookie is refused."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    token = "t0ken-for-the-browser-0123456789"
    process = start_server(toy_run, "decode=greedy", f"access.token={token}")
    try:
        browser.get(process.url + "/")
        wait_for(browser, lambda d: d.find_element(By.ID, "login").is_displayed(), "sign-in")
        browser.find_element(By.ID, "token").send_keys(token, Keys.ENTER)
        wait_for(browser, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute(
            "data-state") == "ready", "the page to load /info and /heads once signed in")
        browser.find_element(By.ID, "text").send_keys(SENTENCE, Keys.ENTER)
        wait_for(browser, lambda d: settled(d, 0), "the translation")
        assert browser.find_element(By.ID, "translation").text == "w4 w3 w2 w1"
        cookie = browser.get_cookie("mtx_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        session = {"Cookie": f"mtx_session={cookie['value']}"}
        assert request(process.url, "GET", "/info", headers=session)[0] == 200
        browser.find_element(By.ID, "logout").click()  # POST /logout: the session is revoked
        wait_for(browser, lambda d: d.find_element(By.ID, "login").is_displayed(), "sign-in again")
        assert browser.get_cookie("mtx_session") is None
        assert request(process.url, "GET", "/info", headers=session)[0] == 401
    finally:
        assert process.stop() == 0, process.log[-5:]
