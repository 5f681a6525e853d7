"""Regenerate the web view's screenshots in docs/, taken by a real headless Chromium (Debian's
`chromium` and `chromium-driver`, through selenium) from a real `fleetdeck watch --web` over
this machine as a one-host fleet, with a live run training beside it.

    python docs/make_web_screenshots.py

web-fleet.png (a phone's width: the Fleet), web-run.png (a run's page with its loss chart),
web-alerts.png (the Alerts page, a maintenance silence in force). A run folder named `<script>` is there too: it reads as text.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent
#: a trainer as `fleetdeck train` writes its progress: one line per step, an eval every 40
TRAINER = r"""
import json, math, sys, time
with open("progress.jsonl", "a") as f:
    for step in range(1, 100000):
        row = {"step": step, "max_steps": 2000, "loss": 2.6 * math.exp(-step / 400) + 0.9
               + 0.05 * math.sin(step / 7), "seconds_per_step": 0.1, "time": time.time()}
        if step % 40 == 0:
            row["eval_loss"] = 2.7 * math.exp(-step / 450) + 1.0
        f.write(json.dumps(row) + "\n")
        f.flush()
        time.sleep(0.1 if step > 300 else 0.001)
"""


def main() -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    # deferred: selenium (only this script and the tests drive a browser)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    tmp = Path(tempfile.mkdtemp(prefix="fleetdeck-web-"))
    runs = tmp / "runs"
    live = runs / "qwen3-erp-lora"
    live.mkdir(parents=True)
    (live / "train.py").write_text(TRAINER)
    for name, loss in (("<script>", 1.7), ("run-7", 1.1)):
        (runs / name).mkdir()
        rows = [
            {"step": s, "max_steps": 500, "loss": loss + math.exp(-s / 100), "time": 0}
            for s in range(10, 510, 10)
        ]
        (runs / name / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    fleet = tmp / "hosts.toml"
    fleet.write_text(
        f'[hosts.gpu-box]\nlocal = true\npython = "{sys.executable}"\nruns = ["{runs}"]\n'
    )
    env = dict(os.environ, XDG_STATE_HOME=str(tmp / "state"))
    trainer = subprocess.Popen([sys.executable, "train.py"], cwd=live)
    fleetdeck = [sys.executable, "-m", "fleetdeck.cli.main", "--hosts", str(fleet)]
    subprocess.run(
        [
            *fleetdeck,
            "silence",
            "add",
            "--host",
            "gpu-box",
            "--for",
            "2h",
            "--comment",
            "driver update",
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    watch = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fleetdeck.cli.main",
            "--hosts",
            str(fleet),
            "watch",
            "--web",
            "0",
            "--interval",
            "1",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium") or "chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"):
        opts.add_argument(a)
    browser = webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver")))
    try:
        url = ""
        while not url:
            line = watch.stdout.readline()
            found = re.search(r"(http://\S+\?token=\S+)", line)
            url = found.group(1) if found else ""
        base = url.split("?")[0]
        time.sleep(8)  # a few polls: the run is seen live and its ETA settles
        shots = (
            ("web-fleet.png", base, (390, 844)),
            (
                "web-run.png",
                base + "run?host=gpu-box&path=" + str(live).replace("/", "%2F"),
                (900, 720),
            ),
            ("web-alerts.png", base + "alerts", (900, 520)),
        )
        browser.get(url)
        for name, page, (w, h) in shots:
            browser.set_window_size(w, h)
            browser.get(page)
            time.sleep(1.5)
            # the other runs unfolded: the one named `<script>` reads as text
            browser.execute_script(
                "document.querySelectorAll('details').forEach(d => d.open = true)"
            )
            browser.save_screenshot(str(HERE / name))
            print(f"wrote docs/{name}")
    finally:
        browser.quit()
        watch.terminate()
        trainer.terminate()
        watch.wait()
        trainer.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
