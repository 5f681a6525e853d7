"""The web view in a real headless Chromium against a real loopback sshd fleet, served by a real
`fleetdeck watch --web`: the hosts and a live run's step advancing without a reload, a run
folder named as markup shown as text with no script run and no Content-Security-Policy
violation, and the browser's own requests refused: no token 401, a wrong one 401, a POST 405."""

from __future__ import annotations

import json
import time

import pytest
from selenium.webdriver.common.by import By

from support.hf_trainer import start_trainer
from support.web import WebWatch, chromium

pytestmark = pytest.mark.sshd

HOSTILE = ("<script>", "<img src=x onerror=document.title='pwned'>")


def _progress(run, steps=(10, 20)) -> None:
    run.mkdir(parents=True)
    rows = [
        {"step": s, "max_steps": 100, "loss": 2.0 - s / 100, "time": time.time()} for s in steps
    ]
    (run / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def served(spare_fleet, tmp_path):
    w1, w2 = spare_fleet.add("w1"), spare_fleet.add("w2")
    trainer = start_trainer(w1.runs / "run-live", 5000, 0.05)
    for name in HOSTILE:
        _progress(w2.runs / name)
    watch = WebWatch(spare_fleet.write_fleet(tmp_path / "hosts.toml"))
    browser = chromium()
    try:
        yield watch, browser
    finally:
        browser.quit()
        watch.stop()
        trainer.kill()
        trainer.wait()


def _until(what, deadline_s=90.0):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        v = what()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError("never came")


def _texts(browser, css: str) -> list:
    """Each element's text (a row: its cells' texts), read in one go: the event stream replaces
    the page's live part under any element held across calls."""
    return browser.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.cells ?"
        " Array.from(e.cells).map(c => c.textContent) : [e.textContent, e.href || null])",
        css,
    )


def _step(browser) -> int | None:
    for cells in _texts(browser, "tr.run"):
        if cells[0] == "run-live" and cells[1] == "running":
            got = cells[2].split("/")[0]
            return int(got) if got.isdigit() else None
    return None


def _fetch(browser, path, **init) -> int:
    return browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(arguments[0], arguments[1]).then(r => done(r.status), e => done(String(e)));",
        path,
        init,
    )


def test_hosts_and_a_live_step_advancing_without_a_reload(served):
    watch, browser = served
    browser.get(watch.token_url)
    # the token went into a cookie and out of the address bar
    assert browser.current_url == watch.base
    _until(
        lambda: (
            {"w1", "w2"}
            <= {t.split()[0] for t, _ in _texts(browser, "section.host h2") if t.split()}
        )
    )
    first = _until(lambda: _step(browser))
    browser.execute_script("window.__mark = 'same page';")
    later = _until(lambda: (s := _step(browser)) is not None and s > first and s)
    assert later > first
    # the same document, updated in place by the event stream (no reload)
    assert browser.execute_script("return window.__mark") == "same page"
    assert browser.execute_script("return window.__csp") == []
    # a phone's width: nothing wider than the screen
    assert browser.execute_script(
        "return document.documentElement.scrollWidth <= window.innerWidth + 1"
    )


def test_a_hostile_run_name_is_text_and_nothing_runs(served):
    watch, browser = served
    browser.get(watch.token_url)
    names = _until(
        lambda: (
            (t := [text for text, _ in _texts(browser, "details a")])
            and set(HOSTILE) <= set(t)
            and t
        )
    )
    assert set(HOSTILE) <= set(names)
    assert browser.execute_script("return document.querySelectorAll('img').length") == 0
    scripts = browser.execute_script(
        "return Array.from(document.scripts).map(s => s.getAttribute('src'))"
    )
    assert scripts == ["/static/live.js"]
    assert browser.title == "fleetdeck: Fleet"
    # the run's own page: its name is the heading's text
    href = next(h for text, h in _texts(browser, "details a") if text == HOSTILE[1])
    browser.get(href)
    heading = _until(lambda: _texts(browser, "h1.run-name"))
    assert heading[0][0] == HOSTILE[1]
    assert browser.execute_script("return document.querySelectorAll('img').length") == 0
    assert browser.title == "fleetdeck: Run"
    assert browser.execute_script("return window.__csp") == []
    # the count can fail: an inline script put into the page is refused by the policy and counted
    browser.execute_script(
        "var s = document.createElement('script'); s.textContent = \"document.title = 'inline ran'\";"
        "document.body.appendChild(s);"
    )
    violations = _until(lambda: browser.execute_script("return window.__csp"), 10)
    assert browser.title == "fleetdeck: Run"
    assert len(violations) == 1 and violations[0].startswith("script-src"), violations


def test_the_browsers_own_requests_without_the_token_or_with_a_wrong_one_or_a_post(served):
    watch, browser = served
    browser.get(watch.token_url)
    _until(lambda: _texts(browser, "section.host h2"))
    assert _fetch(browser, "/alerts") == 200  # the cookie
    assert _fetch(browser, "/alerts", credentials="omit") == 401
    wrong = {
        "Authorization": "Bearer " + watch.token[:-1] + ("A" if watch.token[-1] != "A" else "B")
    }
    assert _fetch(browser, "/alerts", credentials="omit", headers=wrong) == 401
    assert _fetch(browser, "/alerts?token=" + "x" * 43, credentials="omit") == 401
    assert _fetch(browser, "/alerts", method="POST") == 405
    assert _fetch(browser, "/", method="POST", credentials="omit") == 405
    # a fresh browser has no cookie: the page is refused, saying why
    browser.delete_all_cookies()
    browser.get(watch.base + "schedules")
    assert browser.find_element(By.TAG_NAME, "body").text.startswith("no-token: ")
