"""The web page at `mt serve`'s `/`, in a real headless Chromium (Debian's `chromium` and
`chromium-driver`, driven by Selenium with the driver path given, so nothing is downloaded), against
a real server process with a tiny trained checkpoint. The browser missing is a FAILURE, not a skip:
`make browser-deps` (a prerequisite of `make test`) installs it.

What a user sees is compared with the real `mt translate` CLI; "nothing was sent" is read from the
server's own request counter (/metrics)."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_serve import httpx, mt_translate, server  # the real-server helpers: free port, always stopped

pytestmark = pytest.mark.requires("httpx", "fastapi", "uvicorn", "selenium")


CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
MISSING = "headless browser tests need Debian's chromium + chromium-driver: run `make browser-deps` " \
          "(apt-get install -y chromium chromium-driver)"


def _browser_or_fail() -> None:
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).is_file() and not shutil.which(Path(path).name):
            pytest.fail(f"{path} not found: {MISSING}")
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.fail("selenium not installed: pip install -e '.[dev]'")


@contextlib.contextmanager
def browser(width: int, height: int) -> Iterator[object]:
    """A headless Chromium window of `width` x `height` CSS pixels; always quit."""
    _browser_or_fail()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    service = Service(executable_path=shutil.which("chromedriver") or CHROMEDRIVER)  # no Selenium Manager
    driver = webdriver.Chrome(service=service, options=options)
    try:
        driver.set_window_size(width, height)
        yield driver
    finally:
        driver.quit()


def wait_for(condition, timeout: float = 30.0, what: str = "condition"):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def translate_requests(url: str) -> float:
    """The server's count of /v1/translate requests so far, all statuses."""
    text = httpx.get(url + "/metrics").text
    return sum(float(v) for v in re.findall(r'^mt_requests_total\{[^}]*route="/v1/translate"[^}]*\} (\S+)$',
                                           text, re.M))


def type_into(driver, text: str) -> None:  # noqa: ANN001
    """Replace the source box's text as a user would (clear, then type; '\\n' types a line break)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element(By.ID, "source")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)
    for i, line in enumerate(text.split("\n")):
        if i:
            box.send_keys(Keys.SHIFT, Keys.ENTER)
        if line:
            box.send_keys(line)


def value(driver, element_id: str) -> str:  # noqa: ANN001
    return driver.execute_script(f"return document.getElementById({element_id!r}).value;")


def text_of(driver, element_id: str) -> str:  # noqa: ANN001
    return driver.execute_script(f"return document.getElementById({element_id!r}).textContent;")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    from mt.deploy.tiny import synthetic_sentences, write_random_checkpoint
    return write_random_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny.pt"), synthetic_sentences(16, 5)


def test_page_translates_like_mt_translate_limits_alternatives_and_screenshots(tiny, tmp_path: Path) -> None:
    ckpt, lines = tiny
    text = "\n".join([lines[0], "", lines[1], lines[2]])  # an empty line inside: kept, lines stay aligned
    scored = [row.split("\t", 1) for row in mt_translate(ckpt, [*text.split("\n"), lines[3]], "--beam", "3",
                                                         "--scores")]
    *expected_lines, phone_expected = [out for _, out in scored]
    expected = "\n".join(expected_lines)
    # the lines the page names as doubtful: those `mt translate --scores` rates below /v1/settings' low_confidence
    doubtful = [f"line {i + 1}: {out}" for i, (c, out) in enumerate(scored[:-1]) if out and float(c) < 0.3]
    # every line's 3 hypotheses, as `mt translate --n-best 3` lists them ("i ||| text ||| score")
    n_best = [row.split(" ||| ") for row in mt_translate(ckpt, lines[:3], "--beam", "3", "--n-best", "3")]
    limit = len(text.replace("\n", "")) + 5
    with server(ckpt, "--beam", "3", "--max-alternatives", "2", "--char-limit", str(limit)) as (url, _):
        _phone_width(url, lines[3], phone_expected, tmp_path)  # one server for both windows
        with browser(1280, 900) as driver:
            _desktop(driver, url, text, expected, n_best, limit, tmp_path, doubtful)
    for name in ("page_desktop.png", "page_phone.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _phone_width(url: str, line: str, expected: str, tmp_path: Path) -> None:
    """At a phone's width the panes stack and nothing runs off the side."""
    with browser(360, 780) as driver:
        driver.get(url + "/")
        wait_for(lambda: "/" in text_of(driver, "count"), what="settings loaded")
        type_into(driver, line)
        wait_for(lambda: value(driver, "result") == expected, what="phone translation")
        assert driver.execute_script("return document.documentElement.scrollWidth") <= 360
        driver.save_screenshot(str(tmp_path / "page_phone.png"))


def _desktop(driver, url: str, text: str, expected: str, n_best: list[list[str]],  # noqa: ANN001
            limit: int, tmp_path: Path, doubtful: list[str]) -> None:
    """A desktop window: translate as you type, the model card, alternatives, the character limit."""
    from selenium.webdriver.common.by import By

    driver.get(url + "/")
    wait_for(lambda: "/" in text_of(driver, "count"), what="settings loaded")
    assert driver.find_element(By.ID, "keyrow").is_displayed() is False
    assert driver.find_element(By.ID, "source").get_attribute("dir") == "auto"
    assert driver.find_element(By.ID, "result").get_attribute("dir") == "auto"
    assert text_of(driver, "pair") == "English → German"

    # Translate as you type: the result box equals `mt translate`, line for line.
    type_into(driver, text)
    wait_for(lambda: value(driver, "result") == expected, what=f"result {expected!r}, "
             f"got {value(driver, 'result')!r}, message {text_of(driver, 'message')!r}")
    assert text_of(driver, "message") == ""
    # Low-confidence lines are named under the result, with their confidence.
    named = [driver.execute_script("return arguments[0].firstChild.textContent", li)
             for li in driver.find_elements(By.CSS_SELECTOR, "#doubtful li")]
    assert named == doubtful and driver.find_element(By.ID, "doubtful").is_displayed() == bool(doubtful)

    # The model card panel shows what the checkpoint holds.
    card = httpx.get(url + "/v1/model-card").json()
    assert card["languages"] == {"source": "en", "target": "de"} and card["model"]["parameters"] > 0
    driver.find_element(By.CSS_SELECTOR, "#card summary").click()
    body = wait_for(lambda: driver.find_element(By.ID, "card-body").text, what="model card")
    assert f"{card['model']['parameters']:,} parameters" in body and "Update" in body

    # Alternatives on request: 2 alternatives = 3 hypotheses per non-empty line, with their scores,
    # as `mt translate --n-best 3` lists them ("i ||| text ||| score").
    from selenium.webdriver.support.select import Select

    Select(driver.find_element(By.ID, "alt-n")).select_by_value("2")
    driver.find_element(By.ID, "alt-on").click()
    wait_for(lambda: len(driver.find_elements(By.CSS_SELECTOR, "#alternatives li")) == 9, what="alternatives")
    lists = driver.find_elements(By.CSS_SELECTOR, "#alternatives ol")
    assert len(lists) == 3  # the empty line has none
    for i, got in enumerate(lists):
        cli = [row for row in n_best if row[0] == str(i)]
        assert len(cli) == 3
        shown = [(li.find_element(By.CSS_SELECTOR, ".score").text,
                  driver.execute_script("return arguments[0].firstChild.textContent", li))
                 for li in got.find_elements(By.TAG_NAME, "li")]
        assert [text for _, text in shown] == [text for _, text, _ in cli]
        # the page shows 3 decimals, the CLI 4: equal to within their rounding
        assert all(re.fullmatch(r"score -?\d+\.\d{3}", score) for score, _ in shown)
        assert [float(score[6:]) for score, _ in shown] == pytest.approx([float(x) for _, _, x in cli], abs=6e-4)
    driver.save_screenshot(str(tmp_path / "page_desktop.png"))
    driver.find_element(By.ID, "alt-on").click()

    # Over the character limit: the message, and no request reaches the server.
    wait_for(lambda: text_of(driver, "message") == "", what="idle")
    before = translate_requests(url)
    driver.find_element(By.ID, "source").send_keys("x" * 10)
    msg = wait_for(lambda: text_of(driver, "message"), what="limit message")
    assert msg.startswith("Too long:") and f"the limit is {limit}" in msg and "Nothing was sent" in msg
    driver.find_element(By.ID, "translate").click()
    time.sleep(1.0)  # longer than the debounce: any request would have been sent by now
    assert translate_requests(url) == before
    assert "over" in driver.find_element(By.ID, "count").get_attribute("class")


def test_page_keys_wrong_key_shows_403_right_key_translates_a_file(tiny, tmp_path: Path) -> None:
    ckpt, lines = tiny
    keys = tmp_path / "keys.txt"
    keys.write_text("k-right\n", encoding="utf-8")
    expected = mt_translate(ckpt, [lines[4]])[0]
    with server(ckpt, "--api-keys", str(keys)) as (url, _), browser(1024, 768) as driver:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.common.keys import Keys

        driver.get(url + "/")
        wait_for(lambda: driver.find_element(By.ID, "keyrow").is_displayed(), what="key field")
        key = driver.find_element(By.ID, "key")
        key.send_keys("k-wrong")
        type_into(driver, lines[4])
        msg = wait_for(lambda: text_of(driver, "message") if "403" in text_of(driver, "message") else "",
                       what="403 message")
        assert msg == "Key refused (403): api_key: not valid"
        assert value(driver, "result") == ""

        key.send_keys(Keys.CONTROL, "a")
        key.send_keys("k-right")
        driver.find_element(By.ID, "source").send_keys(Keys.CONTROL, Keys.ENTER)  # Ctrl+Enter translates
        # Leaving the key field (change event) may already have translated; Ctrl+Enter then
        # translates again, so wait for the last request to settle, not just for the text.
        wait_for(lambda: value(driver, "result") == expected and text_of(driver, "message") == "",
                 what="translation with the right key and no message")
        # The key never leaves the tab: no cookie, nothing in localStorage.
        assert driver.get_cookies() == []
        assert driver.execute_script("return window.localStorage.length") == 0
        assert "k-right" not in json.dumps(driver.execute_script("return Object.assign({}, window.sessionStorage)"))

        # A subtitle file through the file picker (POST /translate_file with the key): the link it
        # shows downloads the file, its cue translated as `mt translate` translates that line.
        film = tmp_path / "film.srt"
        film.write_text(f"3\n00:00:01,000 --> 00:00:02,500\n{lines[4]}\n", encoding="utf-8")
        driver.find_element(By.ID, "file").send_keys(str(film))
        driver.find_element(By.ID, "translate-file").click()
        link = wait_for(lambda: driver.find_element(By.ID, "file-link").is_displayed()
                        and driver.find_element(By.ID, "file-link"), what="download link")
        assert link.get_attribute("download") == "film.de.srt" and text_of(driver, "message") == "film.srt translated."
        got = httpx.get(link.get_attribute("href")).text
        assert got == f"3\n00:00:01,000 --> 00:00:02,500\n{' '.join(expected.split())}\n\n"


def test_page_with_two_models_picks_the_pair_and_its_card(tiny, tmp_path: Path) -> None:
    """A server with an en->de and a de->en model: the page offers the two pairs, translates with
    the one chosen (equal to `mt translate` with that model) and shows that model's card."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select

    from mt.deploy.tiny import write_random_checkpoint
    ckpt, lines = tiny
    reverse = write_random_checkpoint(tmp_path / "de-en.pt", seed=2, src_lang="de", tgt_lang="en")
    text = "\n".join(lines[:2])
    expected = {"0": "\n".join(mt_translate(ckpt, lines[:2])), "1": "\n".join(mt_translate(reverse, lines[:2]))}
    assert expected["0"] != expected["1"]
    with server(ckpt, "-c", str(reverse)) as (url, _), browser(1280, 900) as driver:
        models = httpx.get(url + "/v1/models").json()["models"]
        driver.get(url + "/")
        wait_for(lambda: "/" in text_of(driver, "count"), what="settings loaded")
        pair = Select(driver.find_element(By.ID, "target"))
        assert [option.text for option in pair.options] == ["English → German", "German → English"]
        type_into(driver, text)
        wait_for(lambda: value(driver, "result") == expected["0"], what="the en->de model's result")
        driver.find_element(By.CSS_SELECTOR, "#card summary").click()
        pair.select_by_value("1")
        wait_for(lambda: value(driver, "result") == expected["1"], what="the de->en model's result")
        assert text_of(driver, "source-label") == "Source (German)"
        card = httpx.get(url + "/v1/model-card", params={"model": models[1]["id"]}).json()
        assert card["languages"] == {"source": "de", "target": "en"}
        wait_for(lambda: "de → en" in driver.find_element(By.ID, "card-body").text, what="the de->en model's card")


def test_page_glossary_row_is_sent_and_its_term_kept_and_the_draft_completes(tiny, tmp_path: Path) -> None:
    """A do-not-translate term typed into the glossary table goes with /v1/translate: the
    translation keeps it, as `mt translate --glossary` does; removing the row translates without it.
    Then the draft box (`_draft`), with the same server and window."""
    from selenium.webdriver.common.by import By

    from mt.text.glossary import occurs
    ckpt, _ = tiny
    line, term = "we saw zebrafish near the river.", "zebrafish"
    (tmp_path / "terms.tsv").write_text(term + "\n", encoding="utf-8")
    plain = mt_translate(ckpt, [line])[0]
    kept = mt_translate(ckpt, [line], "--glossary", str(tmp_path / "terms.tsv"))[0]
    assert occurs(term, kept) and not occurs(term, plain)
    with server(ckpt) as (url, _), browser(1280, 900) as driver:
        driver.get(url + "/")
        wait_for(lambda: "/" in text_of(driver, "count"), what="settings loaded")
        type_into(driver, line)
        wait_for(lambda: value(driver, "result") == plain, what="the translation without a glossary")
        assert driver.find_element(By.ID, "glossary-box").is_displayed()
        driver.find_element(By.CSS_SELECTOR, "#glossary-box summary").click()
        driver.find_element(By.ID, "term-add").click()
        driver.find_element(By.CSS_SELECTOR, "#glossary .term-source").send_keys(term)
        wait_for(lambda: value(driver, "result") == kept, what=f"the term kept: {kept!r}, got "
                 f"{value(driver, 'result')!r}, message {text_of(driver, 'message')!r}")
        driver.find_element(By.CSS_SELECTOR, "#glossary .term-remove").click()
        wait_for(lambda: value(driver, "result") == plain, what="the translation without the removed term")
        assert driver.find_elements(By.CSS_SELECTOR, "#glossary tbody tr") == []
        _draft(driver, url, line)  # the same server and window: the draft box (issue 73)


def suggestion(driver) -> str:  # noqa: ANN001
    """What the draft box shows greyed after its cursor."""
    return driver.execute_script("const s = document.querySelector('#draft-mirror .suggestion');"
                                 "return s ? s.textContent : '';")


def next_word(rest: str) -> str:
    return re.match(r"\s*\S+", rest).group(0)


def _draft(driver, url: str, line: str) -> None:  # noqa: ANN001
    """The draft box under the source: a typed prefix (cut inside a word) shows /v1/complete's
    continuation greyed; Tab takes exactly its next word, Enter the whole line; a clicked word lists
    the alternatives /v1/complete gives for the line before it, and picking one (by keyboard) rewrites
    the line with that alternative's text. Typing is debounced and a stale answer is not shown."""
    from selenium.webdriver.common.actions.action_builder import ActionBuilder
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    def api(prefix: str, k: int = 0) -> dict:
        body = {"q": line, "prefix": prefix, **({"alternatives": k} if k else {})}
        response = httpx.post(url + "/v1/complete", json=body, timeout=30)
        assert response.status_code == 200, response.text
        assert response.json()["translation"].startswith(prefix)
        return response.json()

    # A typed start the random model continues with several words (most of its pieces join words).
    typed = next((p for p in ("tt ", "ö ", "ы ", "ein ") if len(api(p)["translation"][len(p):].split()) >= 3), "")
    assert typed, "the tiny model continues none of the prefixes with 3 words or more"
    rest = api(typed)["translation"][len(typed):]
    box = driver.find_element(By.ID, "draft")
    assert driver.find_element(By.ID, "draft-label").text == "Your translation (German)"
    box.send_keys(typed)
    wait_for(lambda: suggestion(driver) == rest, what=f"suggestion {rest!r}, got {suggestion(driver)!r}, "
             f"message {text_of(driver, 'message')!r}")
    box.send_keys(Keys.TAB)  # exactly the next word
    took = typed + next_word(rest)
    wait_for(lambda: value(driver, "draft") == took, what=f"{took!r} after Tab, got {value(driver, 'draft')!r}")
    whole = api(took)["translation"]
    assert len(whole) > len(took)
    wait_for(lambda: suggestion(driver) == whole[len(took):], what="the suggestion after Tab")
    box.send_keys(Keys.ENTER)  # the whole line
    wait_for(lambda: value(driver, "draft") == whole, what=f"{whole!r} after Enter, got {value(driver, 'draft')!r}")
    assert driver.switch_to.active_element == box

    # Click the second word: the alternatives at its place (prefix: the line before it), five at most.
    start = re.search(r"\S+\s+(\S)", whole).start(1)
    word = whole[start:].split()[0]
    alternatives = api(whole[:start], 5)["alternatives"]
    assert 2 <= len(alternatives) <= 5 and all(a["text"].startswith(whole[:start]) for a in alternatives)
    x, y = driver.execute_script(  # where the word is drawn: the mirror under the box lays the text out alike
        "const r = document.createRange(), t = document.getElementById('draft-mirror').firstChild;"
        "r.setStart(t, arguments[0]); r.setEnd(t, arguments[0] + 1);"
        "const b = r.getBoundingClientRect(); return [b.left + b.width / 2, b.top + b.height / 2];", start)
    click = ActionBuilder(driver)
    click.pointer_action.move_to_location(int(x), int(y))
    click.pointer_action.click()
    click.perform()
    items = wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "#choices button"), what="alternatives")
    assert text_of(driver, "choices-label") == f"Alternatives for “{word}”"
    shown = [(b.find_element(By.TAG_NAME, "strong").text, b.find_element(By.CSS_SELECTOR, ".score").text)
             for b in items]
    assert shown == [(next_word(a["text"][start:]).strip(), f"{100 * a['probability']:.1f}%") for a in alternatives]
    j = next(i for i, a in enumerate(alternatives) if a["text"] != whole)
    box.send_keys(Keys.TAB)  # no suggestion inside the line: Tab leaves the box, to the first alternative
    assert driver.switch_to.active_element == items[0]
    for _ in range(j):
        driver.switch_to.active_element.send_keys(Keys.ARROW_DOWN)
    driver.switch_to.active_element.send_keys(Keys.ENTER)
    want = alternatives[j]["text"]
    wait_for(lambda: value(driver, "draft") == want, what=f"{want!r} picked, got {value(driver, 'draft')!r}")
    assert not driver.find_element(By.ID, "choices").is_displayed()

    # A late answer for an older prefix does not replace the newer one, and typing is debounced: the
    # page's fetch of /v1/complete wrapped to record the prefixes asked and hold `old`'s answer 1.5 s.
    old = "x"  # not asked before (the page keeps the answers it had)
    new = old + ("q" if not api(old)["translation"].startswith("xq") else "z")
    fresh = api(new)["translation"][len(new):]
    assert fresh
    driver.execute_script("""
        const real = window.fetch, held = arguments[0];
        window.asked = [];
        window.fetch = (path, options) => {
          if (path !== "v1/complete") return real(path, options);
          const prefix = JSON.parse(options.body).prefix, answer = real(path, { ...options, signal: undefined });
          window.asked.push(prefix);
          return prefix === held ? new Promise((ok) => setTimeout(() => ok(answer), 1500)) : answer;
        };""", old)
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)  # an empty line: the whole translation is suggested
    plain = api("")["translation"]
    wait_for(lambda: suggestion(driver) == plain, what=f"the whole translation {plain!r} suggested")
    driver.execute_script("window.asked = [];")
    box.send_keys(old)
    wait_for(lambda: driver.execute_script("return window.asked.length"), what="a completion asked")
    box.send_keys(new[len(old):])
    wait_for(lambda: suggestion(driver) == fresh, what=f"the newer suggestion {fresh!r}")
    time.sleep(1.5)  # the older answer has come meanwhile
    assert suggestion(driver) == fresh and value(driver, "draft") == new
    box.send_keys("abc")  # three keystrokes at once: one request
    time.sleep(0.5)
    assert driver.execute_script("return window.asked") == [old, new, new + "abc"]
    # An error shows as the page's other errors do (a capital: the tiny vocabulary has no piece for it,
    # a 400), and goes with the next answer shown.
    box.send_keys("Q")
    wanted = "Error 400: " + httpx.post(url + "/v1/complete", json={"q": line, "prefix": new + "abcQ"}).json()["error"]
    wait_for(lambda: text_of(driver, "message") == wanted, what=f"the message {wanted!r}")
    assert driver.find_element(By.ID, "message").get_attribute("role") == "alert" and suggestion(driver) == ""
    box.send_keys(Keys.BACKSPACE)
    wait_for(lambda: text_of(driver, "message") == "", what="the error gone")
