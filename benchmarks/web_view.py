"""What the web view costs `fleetdeck watch`: CPU per poll and bytes per update, with the view
off (the baseline), on with no page open (at rest), and with 10 pages open, each phase a fresh
`watch` process over the same fleet in the same run.

The fleet: this machine as one `local` host with `--runs` finished runs (each a progress log of
300 steps) and one live run whose step moves at every poll, so every poll is a real update.
Each phase runs `watch --interval 1 --prometheus 127.0.0.1:0` (plus `--web 0` after the
baseline) for `--seconds`, after a warm-up of 6 s. CPU is the process's own utime + stime from
/proc over the window, per poll counted by `fleetdeck_watch_polls` on its /metrics (two scrapes,
one at each end, in every phase alike). With pages open, each page is a real client: it GETs its
page with the token, then holds the page's event stream open and counts what arrives. The open
pages are the Fleet (4), the live run (2), Alerts (2) and Schedules (2); `--same` opens all 10
on the Fleet.

    python benchmarks/web_view.py --seconds 40
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
TRAINER = r"""
import json, time
with open("progress.jsonl", "a") as f:
    for step in range(1, 10 ** 7):
        f.write(json.dumps({"step": step, "max_steps": 10 ** 7, "loss": 2.0 / (1 + step / 500),
                            "seconds_per_step": 0.2, "time": time.time()}) + "\n")
        f.flush()
        time.sleep(0.2)
"""


def cpu_s(pid: int) -> float:
    """utime + stime of `pid` itself, in seconds (children not included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def polls(metrics: str) -> int:
    with urllib.request.urlopen(metrics, timeout=30) as r:
        text = r.read().decode()
    m = re.search(r"^fleetdeck_watch_polls (\S+)$", text, re.M)
    return int(float(m.group(1))) if m else 0


class Page(threading.Thread):
    """One open page: its GET, then its event stream, bytes and events counted."""

    def __init__(self, base: str, token: str, path: str, events: str) -> None:
        super().__init__(daemon=True)
        self.base, self.token, self.path, self.events_path = base, token, path, events
        self.page_bytes = self.bytes = self.events = 0
        self.stop = threading.Event()

    def run(self) -> None:
        req = urllib.request.Request(
            self.base + self.path, headers={"Authorization": f"Bearer {self.token}"}
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            self.page_bytes = len(r.read())
        host, port = self.base[len("http://") :].rstrip("/").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as s:
            s.sendall(
                f"GET {self.events_path} HTTP/1.0\r\nAuthorization: Bearer {self.token}\r\n\r\n".encode()
            )
            head = b""
            while b"\r\n\r\n" not in head:
                head += s.recv(4096)
            rest = head.split(b"\r\n\r\n", 1)[1]
            self.count(rest)
            while not self.stop.is_set():
                got = s.recv(65536)
                if not got:
                    break
                self.count(got)

    def count(self, data: bytes) -> None:
        self.bytes += len(data)
        self.events += data.count(b"\nid: ") + data.startswith(b"id: ")


def make_fleet(tmp: Path, runs: int) -> tuple[Path, Path, subprocess.Popen]:
    root = tmp / "runs"
    for i in range(runs):
        run = root / f"run-{i}"
        run.mkdir(parents=True)
        rows = [
            {
                "step": s,
                "max_steps": 300,
                "loss": 2.0 / (1 + s / 50),
                "eval_loss": 2.1 / (1 + s / 50) if s % 50 == 0 else None,
            }
            for s in range(1, 301)
        ]
        (run / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    live = root / "live"
    live.mkdir()
    (live / "train.py").write_text(TRAINER)
    trainer = subprocess.Popen([sys.executable, "train.py"], cwd=live)
    fleet = tmp / "hosts.toml"
    fleet.write_text(
        f'[hosts.local]\nlocal = true\npython = "{sys.executable}"\nruns = ["{root}"]\n'
        '[alerts]\ndisabled = ["new-stray", "disk-full-eta", "idle-holder", "gpu-headroom"]\n'
    )
    return fleet, live, trainer


def phase(
    fleet: Path, live: Path, web: bool, pages: int, same: bool, seconds: float, tmp: Path
) -> dict:
    env = dict(os.environ, XDG_STATE_HOME=str(tmp / f"state-{web}-{pages}-{same}"))
    args = [
        sys.executable,
        "-m",
        "fleetdeck.cli.main",
        "--hosts",
        str(fleet),
        "watch",
        "--interval",
        "1",
        "--prometheus",
        "127.0.0.1:0",
    ] + (["--web", "0"] if web else [])
    p = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(p.stdout.readline, "")), daemon=True).start()
    try:
        end = time.monotonic() + 60
        while not any("watching" in x for x in lines):
            if time.monotonic() > end or p.poll() is not None:
                raise SystemExit(f"web_view.py: watch did not start: {lines}")
            time.sleep(0.1)
        metrics = next(
            re.search(r"(http://\S+/metrics)", x).group(1) for x in lines if "/metrics" in x
        )
        opened: list[Page] = []
        time.sleep(3)  # the first polls: a page opened now shows the fleet
        if pages:
            url = next(x for x in lines if "?token=" in x).split(": ", 1)[1].strip()
            base, token = url.split("?token=")
            run_q = "host=local&path=" + str(live).replace("/", "%2F")
            kinds = [("", "view=fleet")] * 4 + [("run?" + run_q, "view=run&" + run_q)] * 2
            kinds += [("alerts", "view=alerts")] * 2 + [("schedules", "view=schedules")] * 2
            if same:
                kinds = [("", "view=fleet")] * 10
            opened = [Page(base, token, path, f"/events?{q}") for path, q in kinds[:pages]]
            for pg in opened:
                pg.start()
        time.sleep(3)  # warm-up: the pages open and have their first event
        n0, c0 = polls(metrics), cpu_s(p.pid)
        b0 = [(pg.bytes, pg.events) for pg in opened]
        time.sleep(seconds)
        n1, c1 = polls(metrics), cpu_s(p.pid)
        b1 = [(pg.bytes, pg.events) for pg in opened]
        for pg in opened:
            pg.stop.set()
        n = max(1, n1 - n0)
        sent = sum(b - a for (b, _), (a, _e) in zip(b1, b0, strict=True))
        events = sum(e - a for (_b, e), (_a, a) in zip(b1, b0, strict=True))
        return {
            "web": web,
            "pages": pages,
            "polls": n,
            "cpu_ms_per_poll": round((c1 - c0) / n * 1000, 2),
            "event_bytes_per_poll": round(sent / n),
            "event_bytes_per_page_per_update": round(sent / events) if events else None,
            "updates_per_page_per_poll": round(events / n / pages, 2) if pages else None,
            "page_bytes": sorted({pg.page_bytes for pg in opened}),
        }
    finally:
        p.terminate()
        p.wait(10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=40.0, help="measured window per phase (s)")
    ap.add_argument("--runs", type=int, default=40, help="finished runs on the host")
    ap.add_argument("--same", action="store_true", help="open all 10 pages on the Fleet")
    ap.add_argument("--json", metavar="FILE", help="write the figures here too")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fleetdeck-webbench-"))
    fleet, live, trainer = make_fleet(tmp, a.runs)
    try:
        out = [
            phase(fleet, live, False, 0, False, a.seconds, tmp),
            phase(fleet, live, True, 0, False, a.seconds, tmp),
            phase(fleet, live, True, 10, a.same, a.seconds, tmp),
        ]
    finally:
        trainer.terminate()
        trainer.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    base = out[0]["cpu_ms_per_poll"] or math.nan
    for row in out:
        row["cpu_ratio_to_baseline"] = round(row["cpu_ms_per_poll"] / base, 3)
        print(json.dumps(row))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
