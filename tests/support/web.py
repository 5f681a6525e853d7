"""`fleetdeck watch --web` as a real process, and a real headless Chromium to read it with.

`WebWatch` starts `watch --web 0` (a free loopback port) on a fleet file and reads the address
and the once-shown token from its output. `chromium()` drives Debian's `chromium` through its
`chromedriver` (selenium), with every Content-Security-Policy violation the page raises counted
in `window.__csp` (a listener installed before any page script, through DevTools)."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from support.watch import WATCH

#: counts CSP violations from the first byte of every page (DevTools runs it before the page)
COUNT_VIOLATIONS = (
    "window.__csp = [];"
    "document.addEventListener('securitypolicyviolation', function (e) {"
    "  window.__csp.push(e.violatedDirective + ' ' + e.blockedURI); });"
)


class WebWatch:
    """A `fleetdeck watch --web` process and what it printed."""

    def __init__(self, fleet: Path, *args: str, interval: str = "1") -> None:
        self.p = subprocess.Popen(
            [*WATCH, "--hosts", str(fleet), "watch", "--web", "0", "--interval", interval, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        threading.Thread(
            target=lambda: self.lines.extend(iter(self.p.stdout.readline, "")), daemon=True
        ).start()
        line = self.wait_for(lambda: next((x for x in self.lines if "?token=" in x), None))
        self.token_url = line.split(": ", 1)[1].strip()
        self.base, self.token = self.token_url.split("?token=")
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", self.base), self.base

    def wait_for(self, what: Any, deadline_s: float = 90) -> Any:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            v = what()
            if v:
                return v
            if self.p.poll() is not None:
                raise AssertionError(f"watch ended: {self.lines} {self.p.stderr.read()}")
            time.sleep(0.1)
        raise AssertionError(f"never came: {self.lines}")

    def get(self, path: str = "", token: str | None = None, method: str = "GET", **headers: str):
        """(status, headers, body) of one request (urllib: a redirect is not followed)."""
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(self.base + path, method=method, headers=headers)
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(req, timeout=30) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a: Any, **k: Any) -> None:
        return None


def chromium(width: int = 390, height: int = 844) -> Any:
    """A headless Chromium (a phone's width by default) counting CSP violations; skips the test
    where Debian's chromium, its chromedriver or selenium are missing."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service  # deferred: selenium (skips above)

    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not binary or not driver:
        pytest.skip("chromium and chromium-driver are not installed (apt-get install them)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for a in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-extensions",
        f"--window-size={width},{height}",
    ):
        opts.add_argument(a)
    d = webdriver.Chrome(options=opts, service=Service(executable_path=driver))
    d.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": COUNT_VIOLATIONS})
    return d
