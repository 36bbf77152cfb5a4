#!/usr/bin/env python
"""The screenshot of docs/serving.md: mtx-serve's page in headless Chromium (Debian's chromium and
chromium-driver, `make browser`), after typing a sentence, choosing a layer and applying the run's
head study for a few pruning steps.

    python scripts/serving_screenshot.py RUN OUT.png "A sentence." [--layer 1] [--prune-steps 4]
"""
import argparse
import json
import sys
import time
from pathlib import Path
from urllib.request import urlopen

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from servers import start_server  # noqa: E402  (the tests' helper: mtx-serve on a free port)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("out")
    ap.add_argument("sentence")
    ap.add_argument("--layer", type=int, default=1, help="layer index shown (0 = the first)")
    ap.add_argument("--prune-steps", type=int, default=4, help="clicks on 'Prune next step'")
    args = ap.parse_args()
    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait
    server = start_server(args.run)
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,1400"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(
        executable_path="/usr/bin/chromedriver"))

    def settled(heads_off):
        return lambda d: (d.find_element(By.TAG_NAME, "body").get_attribute("data-state") == "ready"
                          and d.find_element(By.ID, "translation").get_attribute("data-heads-off")
                          == str(heads_off))
    try:
        wait = WebDriverWait(driver, 120)
        driver.get(server.url + "/")
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-state")
                   == "ready")
        driver.find_element(By.ID, "text").send_keys(args.sentence, Keys.ENTER)
        wait.until(settled(0))
        print("all heads:", driver.find_element(By.ID, "translation").text)
        Select(driver.find_element(By.ID, "layer")).select_by_value(str(args.layer))
        steps = json.loads(urlopen(server.url + "/heads").read())["steps"]  # the page's steps
        for k in range(1, args.prune_steps + 1):
            driver.find_element(By.ID, "prune-step").click()
            wait.until(settled(steps[k][0]))
            print(f"{steps[k][0]} heads off:", driver.find_element(By.ID, "translation").text)
        height = driver.execute_script("return document.body.scrollHeight")
        driver.set_window_size(1200, height + 160)
        driver.execute_script("window.scrollTo(0, 0)")
        time.sleep(0.5)
        driver.save_screenshot(args.out)
    finally:
        driver.quit()
        server.stop()


if __name__ == "__main__":
    main()
