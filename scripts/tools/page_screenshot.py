"""A screenshot of the web page of a running `mt serve`, in Debian's headless Chromium (as tests/test_page.py).

    mt serve -c model.pt --port 8000 --max-alternatives 2 &
    python scripts/tools/page_screenshot.py http://127.0.0.1:8000 docs/images/serve_page.png [--width 1280]

Types two lines into the source box, waits for their translation, asks for alternatives, opens the
model card and saves the page. This is how docs/images/serve_page.png was made.
"""

from __future__ import annotations

import argparse
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

TEXT = ["A little girl is climbing into a wooden playhouse.", "Two dogs are playing in the snow."]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("out")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1000)
    parser.add_argument("--alternatives", action="store_true", help="show the n-best list too")
    args = parser.parse_args()
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--hide-scrollbars",
                f"--window-size={args.width},{args.height}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=options)
    try:
        driver.get(args.url.rstrip("/") + "/")
        time.sleep(1.0)
        box = driver.find_element(By.ID, "source")
        for i, line in enumerate(TEXT):
            if i:
                box.send_keys(Keys.SHIFT, Keys.ENTER)
            box.send_keys(line)
        if args.alternatives:
            driver.find_element(By.ID, "alt-on").click()
        driver.find_element(By.CSS_SELECTOR, "#card summary").click()
        deadline = time.monotonic() + 60
        while not driver.find_element(By.ID, "result").get_attribute("value") or \
                (args.alternatives and not driver.find_elements(By.CSS_SELECTOR, "#alternatives li")):
            if time.monotonic() > deadline:
                raise SystemExit("page_screenshot: no translation in 60 s")
            time.sleep(0.1)
        time.sleep(0.5)
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(args.width, max(args.height, height + 20))
        driver.execute_script("document.activeElement.blur(); window.scrollTo(0, 0);")
        time.sleep(0.2)
        driver.save_screenshot(args.out)
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
