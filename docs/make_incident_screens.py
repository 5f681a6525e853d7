"""Regenerate docs/incident-plot.txt and docs/incident.svg: one card's incident over a recorded night.

    python docs/make_incident_screens.py

Six hours of gx10 (the recorded fleet's host in tests/support/fixtures/fleet.json), one poll a minute,
are written into a fresh history database through the same recorder `watch` uses: GPU0 holds
93,257 MiB for a vLLM seat that is OOM-killed two hours in (its memory falls to 600 MiB for six
minutes, then `restart: unless-stopped` brings it back to 93,257), the host does not answer for
ten minutes, a purge is audited, a run finishes. Then:

- `fleetdeck history gx10 --gpu 0 --plot --since 6h` runs in tmux (130x40) and the pane is
  captured as text into docs/incident-plot.txt;
- the dashboard's History view (`6`, `-` for 6 h, `c` for GPU0) is saved as docs/incident.svg.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).parent
STATE = Path(tempfile.mkdtemp(prefix="fleetdeck-incident-"))
os.environ["XDG_STATE_HOME"] = str(STATE / "state")
os.environ["XDG_CONFIG_HOME"] = str(STATE / "config")
os.environ["TZ"] = "UTC"
time.tzset()
# the night ends now (the CLI reads its window back from the clock), at a whole minute
NOW = float(int(time.time()) // 60 * 60)


def record() -> None:
    from fleetdeck.backend.actions.audit import audit
    from fleetdeck.backend.fleet.validate import fleet_from_json
    from fleetdeck.backend.monitor.history.store import History, history_path

    snap = fleet_from_json(
        json.loads((HERE.parent / "tests" / "support" / "fixtures" / "fleet.json").read_text())
    )
    gx10 = next(h for h in snap.hosts if h.name == "gx10")
    h = History(history_path())
    start = NOW - 6 * 3600
    oom, down = start + 2 * 3600, start + 4 * 3600
    for i in range(6 * 60 + 1):
        t = start + i * 60
        if down <= t < down + 600:
            host = replace(
                gx10, reachable=False, error="probe did not answer within 20s", time=t, gpus=()
            )
        else:
            dip = oom <= t < oom + 360
            gpus = tuple(
                replace(
                    g,
                    memory_used_mib=600.0 if dip else 93257.0,
                    utilization_pct=5.0 if dip else 97.0,
                    temperature_c=44 if dip else 61,
                    power_w=95.0 if dip else 612.0,
                )
                for g in gx10.gpus[:1]
            )
            host = replace(gx10, time=t, gpus=gpus, latency_ms=21.0)
        h.record(replace(snap, hosts=(host,), time=t))
    h.event(
        oom + 20,
        "gx10",
        "alert-firing",
        "seat-restart vllm:8000",
        "seat vllm:8000 was OOM-killed (a request 151,728 tokens deep asked for 1.04 GiB with 600 MB free) "
        "and restarted in 3 s (restarts 3)",
    )
    h.event(down + 90, "gx10", "alert-firing", "host-down gx10", "gx10 has not answered for 90 s")
    h.event(
        start + 5 * 3600,
        "gx10",
        "alert-firing",
        "run-finished /home/ops/runs/run-6",
        "run-6 finished at step 3000 (eval loss 1.912)",
    )
    h.close()
    rec = audit(
        "purge",
        "gx10",
        "done",
        paths=[
            {
                "path": f"/home/ops/runs/run-2/checkpoints/checkpoint-{n}",
                "deleted": True,
                "bytes": 3 << 30,
            }
            for n in (400, 800)
        ],
        reclaimed_bytes=6 << 30,
    )
    # the audit writer stamps the record now: move it into the recorded night
    log = STATE / "state" / "fleetdeck" / "audit.jsonl"
    rec["ts"] = start + 3 * 3600
    log.write_text(json.dumps(rec) + "\n")


def tmux_plot() -> None:
    if shutil.which("tmux") is None:
        sys.exit("make_incident_screens: tmux is not installed")
    session = f"fleetdeck-incident-{os.getpid()}"
    cmd = (
        f"cd {HERE.parent.parent} && {sys.executable} -m fleetdeck.cli.main history gx10 --gpu 0 --plot "
        f"--since 6h --height 16 --width 110; sleep 60"
    )
    env = {k: os.environ[k] for k in ("XDG_STATE_HOME", "XDG_CONFIG_HOME", "TZ")}
    subprocess.run(
        [
            "tmux",
            "new-session",
            "-d",
            "-s",
            session,
            "-x",
            "130",
            "-y",
            "40",
            *[a for k, v in env.items() for a in ("-e", f"{k}={v}")],
            cmd,
        ],
        check=True,
    )
    try:
        for _ in range(100):
            time.sleep(0.2)
            pane = subprocess.run(
                ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
            ).stdout
            if "no events recorded" in pane or " 4 " in pane:
                break
        (HERE / "incident-plot.txt").write_text(pane.rstrip() + "\n")
        print(HERE / "incident-plot.txt")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)


async def svg() -> None:
    from fleetdeck.backend.fleet.config import parse_fleet
    from fleetdeck.tui.app import FleetdeckApp
    from fleetdeck.tui.sources import RecordedSource

    fleet = parse_fleet("[hosts.gx10]\nlocal = true\n", "hosts.toml")
    from fleetdeck.backend.fleet.validate import fleet_from_json

    snap = fleet_from_json(
        json.loads((HERE.parent / "tests" / "support" / "fixtures" / "fleet.json").read_text())
    )
    snap = replace(snap, hosts=tuple(h for h in snap.hosts if h.name == "gx10"), time=NOW)
    app = FleetdeckApp(fleet, RecordedSource([snap]), autopoll=False, clock=lambda: NOW)
    async with app.run_test(size=(130, 40)) as pilot:
        await pilot.pause()
        await pilot.press("6", "minus", "c")
        await pilot.pause()
        app.save_screenshot("incident.svg", path=str(HERE))
        print(HERE / "incident.svg")


if __name__ == "__main__":
    record()
    tmux_plot()
    asyncio.run(svg())
