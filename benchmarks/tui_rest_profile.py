"""Where the dashboard at rest spends its CPU: the real app, headless, polling --hosts loopback
sshd hosts (tests/support's test fleet, each with one finished run, as `tui_rest.py`) every
--interval seconds, with the monitor judging each poll as `fleetdeck` does.

After --warmup seconds it measures the process's CPU over --seconds without a profiler (% of one
core: the baseline the profile is read against), then profiles the next --seconds with
cProfile and splits them by part: each function's own time summed by where it lives (the
poller and the SSH link, the monitor, the dashboard's rows, views and widgets, Textual, Rich,
the rest), and the cumulative time of the entry points (a poll taken in, the monitor's
judgement, the views' redraws, the clock's tick, Textual's frames). `PYTHONPATH` picks the
tree, as `fleetdeck`.

    python benchmarks/tui_rest_profile.py --hosts 12 --interval 1 --seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

#: own time by where a function lives: the first part whose marker its file holds
PARTS = (
    ("poller, SSH link", ("/backend/fleet/", "asyncssh", "/backend/host/", "/backend/link")),
    ("monitor", ("/backend/monitor/", "/tui/alert_watch")),
    ("dashboard rows", ("/tui/rows/", "/show/")),
    ("dashboard widgets", ("/tui/widgets/",)),
    ("dashboard views, app", ("/tui/",)),
    ("textual", ("/textual/",)),
    ("rich", ("/rich/",)),
    ("json", ("json",)),
    ("asyncio, selectors", ("asyncio", "selectors")),
)
#: entry points, by (file marker, function name): their cumulative time
ENTRIES = (
    ("poll taken in (state, monitor, views)", "/tui/app.py", "on_fleet_polled"),
    ("  the monitor's judgement", "/tui/alert_watch.py", "observe"),
    ("  the views' redraw after a poll", "/tui/app.py", "refresh_views"),
    ("the clock's tick", "/tui/app.py", "_tick"),
    ("a poll of every host", "/backend/fleet/poller.py", "poll"),
    ("Textual's frames (compositor)", "/textual/screen.py", "_refresh_layout"),
    ("Textual's frames (updates)", "/textual/screen.py", "_on_timer_update"),
    ("cycle collector", "~", "<built-in method gc.collect>"),
)


def part_of(path: str) -> str:
    for name, markers in PARTS:
        if any(m in path for m in markers):
            return name
    return "other"


async def measure(hosts: Path, a: argparse.Namespace) -> dict:
    # deferred: fleetdeck (PYTHONPATH picks the tree; XDG_STATE_HOME is set before it loads)
    from fleetdeck.backend.fleet.config import load_fleet
    from fleetdeck.tui.app import FleetdeckApp

    app = FleetdeckApp(load_fleet(str(hosts)))
    out: dict = {}
    async with app.run_test(size=(a.cols, a.rows)):
        await asyncio.sleep(a.warmup)
        polls0, c0, t0 = app.state.polls, time.process_time(), time.monotonic()
        await asyncio.sleep(a.seconds)
        c1, t1 = time.process_time(), time.monotonic()
        out["plain"] = {
            "core_pct": round(100 * (c1 - c0) / (t1 - t0), 3),
            "polls": app.state.polls - polls0,
        }
        prof = cProfile.Profile(time.process_time)  # CPU time: the waits for a poll count none
        polls0, c0, t0 = app.state.polls, time.process_time(), time.monotonic()
        prof.enable()
        await asyncio.sleep(a.seconds)
        prof.disable()
        c1, t1 = time.process_time(), time.monotonic()
        out["profiled"] = {
            "core_pct": round(100 * (c1 - c0) / (t1 - t0), 3),
            "polls": app.state.polls - polls0,
        }
        up = sum(1 for h in app.state.hosts.values() if h.reachable)
        out["hosts_up"] = up
    stats = pstats.Stats(prof)
    parts: dict[str, float] = {}
    entries: dict[str, float] = {}
    total = 0.0
    for (path, _line, func), (_cc, _nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        total += tt
        parts[part_of(path)] = parts.get(part_of(path), 0.0) + tt
        for label, marker, name in ENTRIES:
            if marker in path and func == name:
                entries[label] = entries.get(label, 0.0) + ct
    out["profile_s"] = round(total, 3)
    out["parts_s"] = {k: round(v, 3) for k, v in sorted(parts.items(), key=lambda kv: -kv[1])}
    out["entries_s"] = {label: round(entries.get(label, 0.0), 3) for label, _, _ in ENTRIES}
    if a.top:
        stats.sort_stats("tottime").print_stats(a.top)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=12)
    ap.add_argument("--interval", type=float, default=1.0, help="the fleet's poll_interval")
    ap.add_argument("--warmup", type=float, default=30.0, help="seconds before measuring")
    ap.add_argument("--seconds", type=float, default=60.0, help="each window's length")
    ap.add_argument("--cols", type=int, default=160)
    ap.add_argument("--rows", type=int, default=48)
    ap.add_argument("--top", type=int, default=0, help="also print the N costliest functions")
    ap.add_argument("--json", help="write the figures here too")
    a = ap.parse_args()
    # deferred: the test fleet (tests/support, on the path above; only a run needs sshd)
    from support.sshfleet import SshdFleet

    with tempfile.TemporaryDirectory() as d:
        os.environ["XDG_STATE_HOME"] = str(Path(d) / "state")
        sf = SshdFleet(Path(d))
        try:
            for i in range(a.hosts):
                h = sf.add(f"h{i:02d}")
                run = Path(h.runs) / "run-1"
                run.mkdir(parents=True)
                with open(run / "progress.jsonl", "w") as f:
                    for s in range(1, 101):
                        f.write(json.dumps({"step": s, "max_steps": 100, "loss": 2 / s}) + "\n")
            hosts = sf.write_fleet(Path(d) / "hosts.toml", defaults={"poll_interval": a.interval})
            load0 = os.getloadavg()[0]
            out = asyncio.run(measure(hosts, a))
            out["load"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
        finally:
            sf.stop_all()
    out.update(hosts=a.hosts, interval=a.interval, seconds=a.seconds)
    print(json.dumps(out, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
