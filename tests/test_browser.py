"""The docs site as a reader sees it, in a real browser (issue 9 §4).

The built site (the same build the other docs tests read, ``docs_site`` in
conftest.py) is served from 127.0.0.1 and loaded in headless Debian
chromium through selenium. On the home page, every tutorial page, a spec page
and the viewer page: no console errors, every image loaded, every formula
rendered by KaTeX. In the viewer, stepping to the masking run's first ragged
round shows the I1 violation there and none in the EQSPEC pane.
Screenshots go to ``screenshots/`` (git-ignored).

Needs ``apt-get install -y chromium chromium-driver`` (``.ci/run`` does it)
and selenium (the ``test`` extra); skipped with that message otherwise.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import threading
from pathlib import Path

import pytest

from batchspec.trace import Trace

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "screenshots"
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
INSTALL = ("needs Debian's chromium and chromium-driver (apt-get install -y chromium chromium-driver) "
           "and selenium (pip install -e '.[test]')")

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
except ImportError:  # pragma: no cover - depends on the machine
    webdriver = None

pytestmark = pytest.mark.skipif(webdriver is None or not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
                                reason=INSTALL)

# Run in the page after load: what a reader would see go wrong.
PAGE_STATE = r"""
const images = Array.from(document.images);
return {
  title: document.title,
  images: images.length,
  broken: images.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src')),
  math: document.querySelectorAll('.arithmatex').length,
  katex: document.querySelectorAll('.katex').length,
  katexErrors: Array.from(document.querySelectorAll('.katex-error')).map(e => e.textContent.slice(0, 80)),
  unrendered: Array.from(document.querySelectorAll('.arithmatex'))
    .filter(e => !e.querySelector('.katex')).map(e => e.textContent.slice(0, 80)),
  // TeX left as text outside code (a notebook's markdown has no .arithmatex wrapper)
  rawTex: (() => {
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    const found = [];
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (node.parentElement.closest('pre, code, script, style, .katex, .arithmatex, .bsv-viewer')) continue;
      const hit = node.textContent.match(/\$[^$\s][^$]*\$|\\\(.+?\\\)/);
      if (hit) found.push(hit[0].slice(0, 80));
    }
    return found;
  })(),
};
"""


@contextlib.contextmanager
def serving(directory: Path):
    """``directory`` over HTTP on a loopback port chosen by the OS; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def server(docs_site):
    with serving(docs_site) as url:
        yield url


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the test reports failures itself
        pass


@pytest.fixture(scope="module")
def browser():
    os.environ.setdefault("SE_OFFLINE", "true")  # selenium's driver manager must never try a download
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(60)
    SHOTS.mkdir(exist_ok=True)
    yield driver
    driver.quit()


def console_errors(driver) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def screenshot(driver, name: str) -> None:
    """The whole page, not only the first screenful."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, min(max(height, 600), 6000))
    driver.save_screenshot(str(SHOTS / f"{name}.png"))
    driver.set_window_size(1400, 1000)


def open_page(driver, url: str) -> dict:
    driver.get_log("browser")  # drop what earlier pages logged
    driver.get(url)
    driver.execute_async_script("const done = arguments[0]; requestAnimationFrame(() => setTimeout(done, 50));")
    return driver.execute_script(PAGE_STATE)


def tutorial_pages(site: Path) -> list[str]:
    return sorted(str(p.parent.relative_to(site)) + "/" for p in (site / "tutorials").rglob("index.html"))


def test_pages_render_without_errors(browser, server, docs_site):
    pages = ["", "quickstart/", "spec/05-theorems/", "step-through/", "api/invariants/", "faq/", *tutorial_pages(docs_site)]
    assert "tutorials/" in pages
    for path in pages:
        state = open_page(browser, server + path)
        name = path.strip("/").replace("/", "-") or "home"
        screenshot(browser, name)
        assert console_errors(browser) == [], path
        assert state["broken"] == [], (path, state["broken"])
        assert state["katexErrors"] == [] and state["unrendered"] == [] and state["rawTex"] == [], (path, state)
        assert state["katex"] >= state["math"], path
        assert state["title"].endswith("batchspec"), (path, state["title"])
    math = open_page(browser, server + "spec/05-theorems/")
    assert math["math"] > 20 and math["katex"] > 20  # the spec's formulas really went through KaTeX


def first_ragged_round(trace: Trace) -> int:
    """The first round whose rows committed different numbers of tokens."""
    return next(s["decision"]["round"] for s in trace.steps
                if s["decision"] and len(set(s["decision"]["committed"])) > 1)


def panes(driver) -> dict:
    found = driver.find_elements(By.CSS_SELECTOR, ".bsv-pane")
    return {p.find_element(By.CSS_SELECTOR, ".bsv-title").text: p for p in found}


def test_viewer_steps_to_masking_first_ragged_round_and_shows_i1(browser, server, docs_site):
    trace = Trace.load(docs_site / "step-through" / "masking.jsonl")
    ragged = first_ragged_round(trace)
    before_align = [s["step"] for s in trace.round_steps(ragged)][-2]
    open_page(browser, server + "step-through/")
    shown = panes(browser)
    assert set(shown) == {"EQSPEC", "masking"}
    assert shown["masking"].get_attribute("data-step") == "prefill"
    step = browser.find_element(By.CSS_SELECTOR, '.bsv-controls button[data-action="next"]')
    for _ in range(200):  # the reader's way: one step at a time
        masking = panes(browser)["masking"]
        if masking.get_attribute("data-round") == str(ragged) and masking.get_attribute("data-step") == "align":
            break
        step.click()
    else:
        pytest.fail(f"never reached the align step of round {ragged}")
    screenshot(browser, "step-through-first-ragged-round")
    masking, eqspec = panes(browser)["masking"], panes(browser)["EQSPEC"]
    flagged = masking.find_elements(By.CSS_SELECTOR, '.bsv-violation[data-invariant="I1"]')
    assert flagged and "rectangular_alignment" in flagged[0].text
    assert f"round {ragged}" in flagged[0].text
    assert eqspec.get_attribute("data-violations") == "" and eqspec.get_attribute("data-step") == "align"
    assert "every invariant holds" in eqspec.find_element(By.CSS_SELECTOR, ".bsv-violations").text
    assert eqspec.find_elements(By.CSS_SELECTOR, ".bsv-moved")  # EQSPEC's repad moved cache slots
    browser.find_element(By.CSS_SELECTOR, '.bsv-controls button[data-action="prev"]').click()
    assert panes(browser)["masking"].get_attribute("data-step") == before_align  # and back
    open_page(browser, server + "step-through/")  # the shortcut lands on the same step
    browser.find_element(By.CSS_SELECTOR, 'button[data-action="next-violation"]').click()
    masking = panes(browser)["masking"]
    assert (masking.get_attribute("data-round"), masking.get_attribute("data-step")) == (str(ragged), "align")
    assert masking.get_attribute("data-violations").split()[0] == "I1"
    assert console_errors(browser) == []


BROKEN_PAGE = """<!doctype html><html><head><title>broken</title></head><body>
<img src="missing.png"><span class="arithmatex">\\(x^2\\)</span><span class="katex-error">\\frac</span>
<p>raw $a_i = m_i + 1$ text</p><script>console.error("boom")</script></body></html>"""


def test_the_page_checks_fire_on_a_broken_page(browser, tmp_path):
    (tmp_path / "index.html").write_text(BROKEN_PAGE)
    with serving(tmp_path) as url:
        state = open_page(browser, url)
        errors = console_errors(browser)
    assert any("boom" in e for e in errors) and any("missing.png" in e for e in errors)
    assert state["broken"] == ["missing.png"]
    assert state["unrendered"] and state["katexErrors"] and state["katex"] < state["math"]
    assert state["rawTex"] == ["$a_i = m_i + 1$"]


def test_screenshots_folder_is_ignored():
    assert "screenshots/" in (ROOT / ".gitignore").read_text().split()


def test_standalone_page_steps_through_every_batch_and_back(browser, pairs, tmp_path):
    """``write_html`` (what ``batchspec trace --html`` writes) on a run of two static batches."""
    from batchspec.trace import record
    from batchspec.viz.html import write_html

    target, draft = pairs("llama")
    trace = record(target, draft, [[3, 4, 5], [6, 7, 8, 9]], "eqspec", num_draft_tokens=2, max_new_tokens=4,
                   batch_size=1)
    write_html(trace, tmp_path / "index.html")
    rounds = sorted({(s["batch"], s["round"]) for s in trace.steps})
    with serving(tmp_path) as url:
        open_page(browser, url)
        pane = lambda: panes(browser)["eqspec"]  # noqa: E731
        forward = browser.find_element(By.CSS_SELECTOR, 'button[data-action="next-round"]')
        seen = [pane().find_element(By.CSS_SELECTOR, ".bsv-status").text.split(", step")[0]]
        for _ in rounds[1:]:
            forward.click()
            seen.append(pane().find_element(By.CSS_SELECTOR, ".bsv-status").text.split(", step")[0])
        assert seen == [f"batch {b}, round {r}" for b, r in rounds]
        browser.find_element(By.CSS_SELECTOR, ".bsv-viewer").send_keys("\ue012")  # ArrowLeft: back one step
        assert pane().get_attribute("data-round") == str(rounds[-2][1])
        browser.find_element(By.CSS_SELECTOR, 'button[data-action="next-violation"]').click()  # EQSPEC: none
        assert "no violation after this step" in browser.find_element(By.CSS_SELECTOR, ".bsv-where").text
        assert pane().get_attribute("data-round") == str(rounds[-2][1])
        assert console_errors(browser) == []
