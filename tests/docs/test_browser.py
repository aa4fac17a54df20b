"""The docs site as a reader sees it, in a real browser.

The built site (the same build the other docs tests read, ``docs_site`` in
conftest.py) is served from 127.0.0.1 and loaded in headless Debian
chromium through selenium, at device scale 1. On every page, in a 1400 px
window: no console errors, every image loaded, every formula rendered by
KaTeX, and nothing wider than the column (no code block, table or picture
to scroll sideways, except the viewer's grids and tables marked
``bs-scroll``), printed output wrapped, pictures shown at a scale where their
text reads at 10 px or more. In a 390 px window (a phone): the page never
scrolls sideways as a whole, and printed output still wraps. In the viewer,
stepping to the masking run's first ragged round shows the I1 violation there
and none in the EQSPEC pane. Screenshots of the pages a reader meets first go
to ``screenshots/`` (git-ignored), at both widths.

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
from batchspec.viz.draw import MIN_TEXT_PX

ROOT = Path(__file__).resolve().parents[2]
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


# Run in the page after load: what a reader could not read. Images: the
# scale they are shown at (displayed / natural width), whether they sit in a zoom,
# whether they stick out of a box that hides them. Code, printed output and the
# viewer's tables: wider than their box without scrolling, or cut off by a box
# around them. Text: paths of the machine that built the site.
READING_STATE = r"""
const root = document.querySelector(".md-content") || document.body;
const scrolls = e => ["auto", "scroll"].includes(getComputedStyle(e).overflowX);
const edge = e => e.getBoundingClientRect();
const shown = e => e.getClientRects().length > 0;
function clipper(e) {  // the nearest box around e that does not let it overflow visibly
  for (let a = e.parentElement; a && a !== document.documentElement; a = a.parentElement) {
    if (getComputedStyle(a).overflowX !== "visible") return a;
  }
  return null;
}
function cutOff(e) {  // e sticks out of a box that hides it instead of scrolling
  const a = clipper(e);
  if (a && scrolls(a)) return false;
  const box = a || root;
  return edge(e).right > edge(box).right + 1 || edge(e).left < edge(box).left - 1;
}
const images = Array.from(root.querySelectorAll("img"))
  .filter(i => shown(i) && i.naturalWidth > 0 && !i.closest(".bsv-viewer"))
  .map(i => ({src: (i.getAttribute("src") || "").slice(0, 60), shown: Math.round(edge(i).width),
              natural: i.naturalWidth, scale: edge(i).width / i.naturalWidth,
              zoom: !!i.closest(".bs-zoom"), cut: cutOff(i)}));
const clipped = Array.from(root.querySelectorAll("pre, .bsv-viewer table, .bsv-output")).filter(shown)
  .filter(b => (b.scrollWidth > b.clientWidth + 1 && !scrolls(b)) || cutOff(b))
  .map(b => b.tagName + " " + b.className + ": " + b.textContent.trim().slice(0, 60));
const paths = document.body.innerText.match(/.{0,30}(?:\/(?:work|root|tmp)\/|\/site-packages\/).{0,30}/g) || [];
return {images, clipped, paths};
"""
# Run in the page after load: what sticks out of the reading column. Anything wider
# than the column's content box, or scrolling inside itself, counts, except what
# is meant to scroll: the viewer's grids and a table marked .bs-scroll. Printed
# output must wrap (a line that scrolls is a line the reader does not see).
FIT_STATE = r"""
const column = document.querySelector(".md-content .md-typeset") || document.body;
const edge = e => e.getBoundingClientRect();
const box = edge(column);
const style = getComputedStyle(column);
const left = box.left + parseFloat(style.paddingLeft) - 1, right = box.right - parseFloat(style.paddingRight) + 1;
const shown = e => e.getClientRects().length > 0 && edge(e).width > 0;
const meant = e => !!e.closest(".bsv-viewer, .bs-scroll");
const name = e => `${e.tagName.toLowerCase()}: ${(e.textContent || e.getAttribute("src") || "").trim().slice(0, 60)}`;
const wide = Array.from(column.querySelectorAll("pre, table, img, svg, .jp-RenderedImage"))
  .filter(e => shown(e) && !meant(e) && !e.parentElement.closest("svg"))
  .filter(e => edge(e).right > right || edge(e).left < left ||
               (e.tagName !== "IMG" && e.scrollWidth > e.clientWidth + 1))
  .map(e => `${name(e)} (${Math.round(Math.max(edge(e).width, e.scrollWidth))} px in ${Math.round(right - left)})`);
const unwrapped = Array.from(column.querySelectorAll(".jp-OutputArea-output pre")).filter(shown)
  .filter(e => !getComputedStyle(e).whiteSpace.startsWith("pre-wrap") || e.scrollWidth > e.clientWidth + 1)
  .map(name);
const page = document.documentElement.scrollWidth > window.innerWidth + 1 ?
  [`the page is ${document.documentElement.scrollWidth} px wide in a ${window.innerWidth} px window`] : [];
return {wide, unwrapped, page};
"""
#: text in batchspec.viz's pictures is at least MIN_TEXT_PX in the PNG (the tutorials'
#: own charts and the home picture at least as large): shown at this scale or more it
#: reads at 10 px or more; a smaller picture needs a zoom
MIN_SCALE = 10 / MIN_TEXT_PX
DESKTOP, PHONE = 1400, 390  # px: a desktop window and a phone
#: the pages a reader meets first, screenshot at both widths
FIRST_PAGES = ("", "tutorials/", "tutorials/01_the_ragged_problem/", "tutorials/05_eqspec_step_by_step/",
               "tutorials/07_real_pairs_and_gpus/", "tutorials/09_check_your_own_decoder/",
               "real-pair/07_real_pairs_and_gpus/", "benchmarks/", "spec/04-transitions/",
               "spec/07-non-invariants/", "step-through/")


def unreadable(state: dict) -> dict:
    """What a reader cannot read on the page, by kind (all empty on a good page)."""
    return {"small images": [i for i in state["images"] if i["scale"] < MIN_SCALE - 1e-3 and not i["zoom"]],
            "cut-off images": [i for i in state["images"] if i["cut"]],
            "clipped code": state["clipped"], "machine paths": state["paths"]}


def misfits(driver, width: int) -> dict:
    """What does not fit at ``width``: at the desktop width everything that sticks out of
    the column or scrolls in it, unwrapped printed output and shrunk pictures; at a
    phone's, a page that scrolls sideways as a whole and unwrapped printed output."""
    fit = driver.execute_script(FIT_STATE)
    if width < DESKTOP:
        return {"page": fit["page"], "unwrapped": fit["unwrapped"]}
    return {**fit, **unreadable(driver.execute_script(READING_STATE))}


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
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,900",
                 "--force-device-scale-factor=1", "--hide-scrollbars"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(60)
    SHOTS.mkdir(exist_ok=True)
    yield driver
    driver.quit()


def console_errors(driver) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def screenshot(driver, name: str, width: int = 1400) -> None:
    """The first screenful at actual size, then the whole page (up to 6000 px tall)."""
    driver.save_screenshot(str(SHOTS / f"{name}.png"))
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, min(max(height, 600), 6000))
    driver.save_screenshot(str(SHOTS / f"{name}-full.png"))
    driver.set_window_size(width, 900)


def open_page(driver, url: str) -> dict:
    driver.get_log("browser")  # drop what earlier pages logged
    driver.get(url)
    driver.execute_async_script("const done = arguments[0]; requestAnimationFrame(() => setTimeout(done, 50));")
    return driver.execute_script(PAGE_STATE)


def tutorial_pages(site: Path) -> list[str]:
    return sorted(str(p.parent.relative_to(site)) + "/" for p in (site / "tutorials").rglob("index.html"))


def site_pages(site: Path) -> list[str]:
    """Every page of the built site, as a path under its root ("" is the home page)."""
    found = [p.parent.relative_to(site).as_posix() for p in site.rglob("index.html")]
    return sorted("" if p == "." else p + "/" for p in found if not p.startswith(("assets", "search")))


def test_every_page_renders_and_fits_at_both_widths(browser, server, docs_site):
    pages = site_pages(docs_site)
    assert set(FIRST_PAGES) <= set(pages) and len(pages) > 40
    found = {}
    for width in (DESKTOP, PHONE):
        browser.set_window_size(width, 900)
        for path in pages:
            state = open_page(browser, server + path)
            if path in FIRST_PAGES:
                screenshot(browser, f"{path.strip('/').replace('/', '-') or 'home'}-{width}", width)
            assert console_errors(browser) == [], path
            assert state["broken"] == [], (path, state["broken"])
            assert state["katexErrors"] == [] and state["unrendered"] == [] and state["rawTex"] == [], (path, state)
            assert state["katex"] >= state["math"], path
            assert state["title"].endswith("batchspec"), (path, state["title"])
            bad = {kind: items for kind, items in misfits(browser, width).items() if items}
            if bad:
                found[f"{path or 'home'} at {width} px"] = bad
    browser.set_window_size(DESKTOP, 900)
    assert found == {}
    math = open_page(browser, server + "spec/05-theorems/")
    assert math["math"] > 20 and math["katex"] > 20  # the spec's formulas really went through KaTeX


MISFIT_PAGE = """<!doctype html><html><head><title>misfit</title></head><body>
<div class="md-content"><div class="md-typeset" style="width: 600px">
<pre style="overflow-x: auto">a line of code far wider than the six hundred pixels of the column it sits in, scrolling sideways in its own box</pre>
<table><tr><td style="white-space: nowrap">a table with a column far wider than the six hundred pixels of the column around it</td></tr></table>
<div class="bs-scroll" style="overflow-x: auto"><table><tr><td style="white-space: nowrap">a wide table marked to scroll, on purpose, far wider than six hundred pixels</td></tr></table></div>
<div class="jp-OutputArea-output"><pre style="white-space: pre">printed output that does not wrap</pre></div>
<img src="data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' width='900' height='40'%3E%3C/svg%3E">
</div></div></body></html>"""


def test_the_fit_checks_fire_on_a_page_that_does_not_fit(browser, tmp_path):
    (tmp_path / "index.html").write_text(MISFIT_PAGE)
    with serving(tmp_path) as url:
        open_page(browser, url)
        wide = browser.execute_script(FIT_STATE)
        browser.set_window_size(PHONE, 900)
        open_page(browser, url)
        phone = browser.execute_script(FIT_STATE)
        browser.set_window_size(DESKTOP, 900)
    assert [w.split(":")[0] for w in wide["wide"]] == ["pre", "table", "img"]  # not the .bs-scroll table
    assert wide["unwrapped"] == ["pre: printed output that does not wrap"] and wide["page"] == []
    assert phone["page"] and phone["page"][0].endswith("in a 390 px window")


def first_ragged_round(trace: Trace) -> int:
    """The first round whose rows committed different numbers of tokens."""
    return next(s["decision"]["round"] for s in trace.steps
                if s["decision"] and len(set(s["decision"]["appended"])) > 1)


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
        if masking.get_attribute("data-round") == str(ragged) and masking.get_attribute("data-step") == "realign":
            break
        step.click()
    else:
        pytest.fail(f"never reached the realign step of round {ragged}")
    screenshot(browser, "step-through-first-ragged-round")
    masking, eqspec = panes(browser)["masking"], panes(browser)["EQSPEC"]
    flagged = masking.find_elements(By.CSS_SELECTOR, '.bsv-violation[data-invariant="I1"]')
    assert flagged and "rectangular_alignment" in flagged[0].text
    assert f"round {ragged}" in flagged[0].text
    assert eqspec.get_attribute("data-violations") == "" and eqspec.get_attribute("data-step") == "realign"
    assert "every invariant holds" in eqspec.find_element(By.CSS_SELECTOR, ".bsv-violations").text
    assert eqspec.find_elements(By.CSS_SELECTOR, ".bsv-moved")  # EQSPEC's repad moved cache slots
    browser.find_element(By.CSS_SELECTOR, '.bsv-controls button[data-action="prev"]').click()
    assert panes(browser)["masking"].get_attribute("data-step") == before_align  # and back
    open_page(browser, server + "step-through/")  # the shortcut lands on the same step
    browser.find_element(By.CSS_SELECTOR, 'button[data-action="next-violation"]').click()
    masking = panes(browser)["masking"]
    assert (masking.get_attribute("data-round"), masking.get_attribute("data-step")) == (str(ragged), "realign")
    assert masking.get_attribute("data-violations").split()[0] == "I1"
    assert console_errors(browser) == []


def last_round(driver) -> str:
    """Step the viewer forward a round at a time until it stops; the round it stops at."""
    viewer = driver.find_element(By.CSS_SELECTOR, ".bsv-viewer")
    forward = driver.find_element(By.CSS_SELECTOR, 'button[data-action="next-round"]')
    for _ in range(200):
        before = viewer.get_attribute("data-round")
        forward.click()
        if viewer.get_attribute("data-round") == before:
            return before
    pytest.fail("the viewer never reached its last round")


def test_viewer_tables_fit_or_scroll_at_the_last_round(browser, server, docs_site):
    """The widest grids (38 slots at masking's last round) scroll in their own box, visibly."""
    open_page(browser, server + "step-through/")
    last = last_round(browser)
    assert int(last) > 1
    screenshot(browser, "step-through-last-round")
    found = unreadable(browser.execute_script(READING_STATE))
    assert found["clipped code"] == [], found
    widest = browser.execute_script(
        "return Math.max(...Array.from(document.querySelectorAll('.bsv-viewer table.bsv-grid'))"
        ".map(t => t.querySelectorAll('tr')[0].children.length))")
    assert widest > 30


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


WIDE = "data:image/svg+xml," + "%3Csvg xmlns='http://www.w3.org/2000/svg' width='1000' height='40'%3E%3C/svg%3E"
UNREADABLE_PAGE = f"""<!doctype html><html><head><title>unreadable</title></head><body>
<div class="md-content" style="width: 500px">
<img src="{WIDE}" style="max-width: 100%">
<div style="width: 300px; overflow: hidden"><img src="{WIDE}"></div>
<pre style="overflow: hidden; width: 200px">a line of code far wider than the two hundred pixels of its box</pre>
<div style="width: 200px; overflow: hidden"><pre>a printed line that its box hides, far wider than it</pre></div>
<p>loaded from /work/main/batchspec/models/default</p>
</div></body></html>"""


def test_the_reading_checks_fire_on_an_unreadable_page(browser, tmp_path):
    (tmp_path / "index.html").write_text(UNREADABLE_PAGE)
    with serving(tmp_path) as url:
        open_page(browser, url)
        found = unreadable(browser.execute_script(READING_STATE))
    assert [(i["shown"], i["natural"]) for i in found["small images"]] == [(500, 1000)]  # shrunk, no zoom
    assert [i["natural"] for i in found["cut-off images"]] == [1000]  # full size, in a box that hides it
    assert len(found["clipped code"]) == 2  # hidden overflow on the pre, and on a box around it
    assert found["machine paths"] == ["loaded from /work/main/batchspec/models/default"]


def test_the_site_zoom_shows_a_shrunk_picture_at_full_size(browser, tmp_path):
    """docs/assets/zoom.js and reading.css, as the site loads them, on a picture shown at half size."""
    assets = ROOT / "docs" / "assets"
    (tmp_path / "index.html").write_text(f"""<!doctype html><html><head><title>zoom</title>
<style>{(assets / "reading.css").read_text()} .md-typeset img {{ max-width: 100%; }}</style></head><body>
<div class="md-content md-typeset" style="width: 500px"><p><img src="{WIDE}"></p></div>
<script>{(assets / "zoom.js").read_text()}</script></body></html>""")
    with serving(tmp_path) as url:
        open_page(browser, url)
        found = unreadable(browser.execute_script(READING_STATE))
        assert not any(found.values()), found  # shrunk, but in a zoom
        [image] = browser.execute_script(READING_STATE)["images"]
        assert image["zoom"] and image["shown"] == 500
        browser.find_element(By.CSS_SELECTOR, ".bs-zoom").click()
        [image] = browser.execute_script(READING_STATE)["images"]
        assert image["shown"] == image["natural"] == 1000 and not image["cut"]  # full size, scrolling
        assert browser.execute_script("const z = document.querySelector('.bs-zoom');"
                                      "return z.scrollWidth > z.clientWidth && getComputedStyle(z).overflowX")


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
        last_round(browser)
        assert unreadable(browser.execute_script(READING_STATE))["clipped code"] == []
        assert console_errors(browser) == []
