"""What delivering a burst of transitions costs `watch`'s outbox: time and bytes written to the
state folder for 4,000 transitions against 1,000, in the same run (the ratio should be near 4:
each attempt costs the same however full the outbox is).

Each size runs in a fresh state folder: a `Monitor` in its delivering role with a webhook to a
receiver in a process of its own (stdlib `http.server` on loopback, answering 204), the
transitions queued and saved as one poll cycle would (`Deliverer.enqueue`, `Monitor.save`),
then delivered until the outbox is empty (one transition per delivery, so every one is an
attempt). Bytes written are this process's `wchar` (/proc/self/io: what its write(2) calls
wrote, which is files here: the webhook's requests go out by send(2), which it does not count),
with what the monitor itself counted (alerts.json and the outbox journal) beside it.

    python benchmarks/alerts_outbox.py                 # 1,000 and 4,000
    python benchmarks/alerts_outbox.py --sizes 1000 4000 --json
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RECEIVER = r"""
import sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
got = [0, 0]
lock = threading.Lock()
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    def do_POST(self):
        n = int(self.headers["Content-Length"])
        self.rfile.read(n)
        with lock:
            got[0] += 1
            got[1] += n
        self.send_response(204)
        self.end_headers()
    def do_GET(self):
        with lock:
            body = f"{got[0]} {got[1]}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
srv.daemon_threads = True
print(srv.server_address[1], flush=True)
srv.serve_forever()
"""


def wchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise RuntimeError("no wchar in /proc/self/io")


def received(port: int) -> tuple[int, int]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
        n, size = r.read().decode().split()
    return int(n), int(size)


async def deliver(n: int, state: Path, port: int) -> dict:
    os.environ["XDG_STATE_HOME"] = str(state)
    from fleetdeck.backend.fleet.config import parse_fleet
    from fleetdeck.backend.monitor.delivery.deliver import Deliverer
    from fleetdeck.backend.monitor.rules.alerts import Alert
    from fleetdeck.backend.monitor.service import Monitor

    fleet = parse_fleet(
        f'[hosts.h1]\naddress = "h1"\n[alerts]\nwebhook = "http://127.0.0.1:{port}/hook"\n',
        "hosts.toml",
    )
    opts = {"group_max": 1} if "group_max" in inspect.signature(Deliverer).parameters else {}
    m = Monitor(fleet, role="deliver", source=object(), **opts)
    assert m.deliverer is not None
    t0 = 1_800_000_000.0
    alerts = [
        Alert(
            "run-failed",
            f"h{i % 4}",
            f"/runs/run-{i}",
            "firing",
            t0 + i,
            f"run run-{i} on h{i % 4} failed: exit status 1 (Traceback in train.log)",
        )
        for i in range(n)
    ]
    before_n, _ = received(port)
    w0, c0 = wchar(), time.perf_counter()
    m.deliverer.enqueue(alerts)  # one cycle's transitions, saved with the state
    m.save()
    task = asyncio.ensure_future(m.deliverer.run())
    while m.deliverer.pending:
        await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    m.save()
    took = time.perf_counter() - c0
    written = wchar() - w0
    got_n, _ = received(port)
    assert got_n - before_n == n, (got_n - before_n, n)
    files = {p.name: p.stat().st_size for p in (state / "fleetdeck").iterdir() if p.is_file()}
    journal = getattr(m, "journal", None)
    counted = getattr(m, "bytes_saved", 0) + (journal.bytes_written if journal is not None else 0)
    return {
        "transitions": n,
        "seconds": round(took, 2),
        "bytes_written": written,
        "counted_by_monitor": counted,
        "delivered": m.deliverer.delivered,
        "files": files,
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", type=int, nargs=2, default=[1000, 4000], metavar=("SMALL", "LARGE"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rx = subprocess.Popen([sys.executable, "-c", RECEIVER], stdout=subprocess.PIPE, text=True)
    try:
        port = int(rx.stdout.readline())
        with (
            tempfile.TemporaryDirectory() as d
        ):  # a warm-up, not reported: imports, the receiver's threads
            asyncio.run(deliver(200, Path(d), port))
        out = []
        for n in args.sizes:
            with tempfile.TemporaryDirectory() as d:
                out.append(asyncio.run(deliver(n, Path(d), port)))
    finally:
        rx.kill()
        rx.wait()
    small, large = out
    ratio_t = large["seconds"] / max(small["seconds"], 1e-9)
    ratio_b = large["bytes_written"] / max(small["bytes_written"], 1)
    if args.json:
        print(
            json.dumps(
                {"runs": out, "time_ratio": round(ratio_t, 2), "bytes_ratio": round(ratio_b, 2)},
                indent=1,
            )
        )
        return 0
    for r in out:
        print(
            f"{r['transitions']} transitions: delivered in {r['seconds']} s, {r['bytes_written']} bytes written "
            f"({r['bytes_written'] / r['transitions']:.0f} a transition; the monitor counted "
            f"{r['counted_by_monitor']}); files left: "
            + ", ".join(f"{k} {v}" for k, v in sorted(r["files"].items()))
        )
    print(
        f"{large['transitions']} against {small['transitions']}: time x{ratio_t:.2f}, bytes x{ratio_b:.2f} "
        f"(x{large['transitions'] / small['transitions']:g} would be constant work a transition)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
