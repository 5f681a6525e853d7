"""The dashboard's row builders (`tui/rows/`) without an app: a small snapshot, run or schedule
in, the cells out. No textual is loaded to make them."""

from __future__ import annotations

import subprocess
import sys

from fleetdeck.backend.fleet.models import (
    Checkpoint,
    Disk,
    FleetSnapshot,
    Gpu,
    GpuProcess,
    HostSnapshot,
    Process,
    Run,
    Schedule,
)
from fleetdeck.backend.monitor.rules.alerts import Alert
from fleetdeck.backend.monitor.silence_model import Silence
from fleetdeck.tui.fleet_state import FleetState
from fleetdeck.tui.rows import alerts as alert_rows
from fleetdeck.tui.rows import fleet as fleet_rows
from fleetdeck.tui.rows import host as host_rows
from fleetdeck.tui.rows import runs as run_rows
from fleetdeck.tui.rows import schedules as sched_rows

G = 1024**3


def _gpu(index: int = 0, used: float = 40960, procs: tuple = ()) -> Gpu:
    return Gpu(
        index=index,
        name="H100",
        uuid=f"GPU-{index}",
        unified_memory=False,
        memory_total_mib=81920,
        memory_used_mib=used,
        utilization_pct=97,
        processes=procs,
    )


RUN = Run(host="a", path="/runs/lora-7", name="lora-7", state="running", step=50, max_steps=100)
STRAY = Schedule(
    id="c1",
    host="a",
    kind="cron",
    user="root",
    spec="*/5 * * * *",
    command="/opt/old.sh",
    source="/etc/crontab",
    stray=True,
    reasons=("dead-target", "unacknowledged"),
)


def _host(**kw) -> HostSnapshot:
    base = dict(
        name="a",
        reachable=True,
        latency_ms=41.0,
        gpus=(_gpu(procs=(GpuProcess(pid=7, user="ml", used_mib=40000, command="python t.py"),)),),
        disks=(Disk("/data", "/data", "ext4", 100 * G, 25 * G, 75 * G),),
        runs=(RUN,),
        schedules=(STRAY,),
        time=100.0,
    )
    return HostSnapshot(**{**base, **kw})


def _state(*hosts: HostSnapshot, clock: float = 101.0) -> FleetState:
    state = FleetState([h.name for h in hosts], 5.0, clock=lambda: clock)
    state.apply(FleetSnapshot(hosts=hosts, time=100.0))
    return state


def test_a_fleet_row_has_a_cell_per_column_and_a_line_per_gpu_disk_or_run():
    state = _state(_host())
    w = {"host": 8, "status": 13, "lat": 5, "gpus": 24, "disks": 16, "runs": 14, "stray": 5}
    cells, height = fleet_rows.host_cells(state, "a", w)
    plain = dict(zip(w, (c.plain for c in cells), strict=True))
    assert plain["host"] == "a" and plain["status"] == "● up" and plain["lat"] == "41ms"
    assert plain["gpus"].startswith("0 ") and " 40/80G " in plain["gpus"]
    assert "25% " in plain["disks"] and plain["disks"].endswith("/data")
    assert plain["runs"].startswith("▶lora-7") and "50%" in plain["runs"]
    assert plain["stray"] == "1"
    assert height == 1 == fleet_rows.host_height(state, "a", w)
    # a narrow terminal's columns: latency and disks are left out
    narrow = {"host": 8, "status": 13, "gpus": 24, "runs": 14, "stray": 5}
    assert len(fleet_rows.host_cells(state, "a", narrow)[0]) == 5


def test_a_down_host_says_why_and_keeps_no_stray_count():
    state = _state(_host(reachable=False, error="cannot connect to 10.0.0.1: connection refused"))
    w = {"host": 8, "status": 13, "gpus": 24, "runs": 14, "stray": 5}
    cells, height = fleet_rows.host_cells(state, "a", w)
    status = cells[1].plain
    assert status.startswith("✖ DOWN ≥") and status.endswith("\nconn. refused")
    assert cells[-1].plain == "-" and height == 2 == fleet_rows.host_height(state, "a", w)
    assert "is DOWN" in fleet_rows.host_detail(state, "a").plain


def test_a_fleet_rows_height_is_the_height_of_its_cells_in_every_state():
    # host_height is worked out once per shape (the host's name, the widths, seen, down, stale,
    # its GPU and disk counts, its runs' names and states): each shape gives its cells' height
    wide = {"host": 8, "status": 13, "lat": 5, "gpus": 24, "disks": 16, "runs": 14, "stray": 5}
    narrow = {"host": 8, "status": 16, "gpus": 24, "runs": 14, "stray": 5}
    stalled = Run(host="a", path="/r/s", name="a-very-long-run-name", state="stalled")
    failed = Run(host="a", path="/r/f", name="f", state="failed")
    two_disks = (*_host().disks, Disk("/scratch", "/scratch", "ext4", 100 * G, 1 * G, 99 * G))
    hosts = [
        _host(),
        _host(gpus=(_gpu(0), _gpu(1), _gpu(2))),
        _host(runs=(RUN, stalled, failed), disks=two_disks),
        _host(runs=(), disks=two_disks),
        _host(reachable=False, error="connection refused"),
    ]
    for clock in (101.0, 200.0):  # fresh, then stale (older than two poll intervals)
        for h in hosts:
            state = _state(h, clock=clock)
            for w in (wide, narrow):
                cells, height = fleet_rows.host_cells(state, "a", w)
                assert height == fleet_rows.host_height(state, "a", w), (h, clock, w)
                assert height == max(c.plain.count("\n") + 1 for c in cells), (h, clock, w)
    unseen = FleetState(["a"], 5.0, clock=lambda: 101.0)
    assert fleet_rows.host_height(unseen, "a", wide) == fleet_rows.host_cells(unseen, "a", wide)[1]


def test_host_rows_from_one_snapshot():
    h = _host(processes=(Process(pid=7, start=11, user="ml", command="python t.py", why=("gpu",)),))
    gpus, health = host_rows.gpu_rows(h)
    assert list(gpus) == ["gpu0", "gpu0:7"] and list(health) == ["gpu0"]
    assert gpus["gpu0"][0].plain == "GPU 0" and "40,960/81,920 MiB" in gpus["gpu0"][2].plain
    assert gpus["gpu0:7"][0].plain == "  pid 7" and gpus["gpu0:7"][4].plain == "python t.py"
    runs = host_rows.run_rows(h, "dim")
    assert list(runs) == [RUN.key] and runs[RUN.key][1].style == "dim"
    cols = [("kind", "Kind", 9), ("stray", "Stray because", 18), ("cmd", "Command", 16)]
    sched = host_rows.schedule_rows(h, h.schedules, cols)
    assert sched["c1"][0] == "cron" and sched["c1"][2] == "/opt/old.sh"
    assert sched["c1"][1].style == "bold red"
    disks = host_rows.disk_rows(h)
    assert disks["/data"][2] == host_rows.size_short(75 * G) and disks["/data"][4] == "ext4"
    proc = host_rows.process_cells(h.processes[0], left=True)
    assert proc[0].plain == "7" and proc[5].plain == "not listed now"
    assert host_rows.process_key(h.processes[0]) == "7:11"
    assert host_rows.gpu_rows(None) == ({}, {}) and host_rows.disk_rows(None) == {}


def test_a_run_row_and_its_detail():
    w = {"host": 10, "name": 12, "state": 10, "prog": 18, "eta": 6, "loss": 6}
    cells = run_rows.run_cells(RUN, w, "a", "lora-7")
    assert cells[:2] == ("a", "lora-7") and cells[2].plain == "running"
    assert cells[3].plain.endswith(" 50/100") and cells[4:] == ("-", "-")
    failed = Run(
        host="a",
        path="/runs/x",
        name="x",
        state="failed",
        checkpoints=(
            Checkpoint("/runs/x/checkpoint-10", 10, 1024),
            Checkpoint("/runs/x/checkpoint-20", 20, 1024, complete=False, problem="no weights"),
        ),
    )
    assert run_rows.run_cells(failed, w, "a", "x")[3].plain == "-"
    title = run_rows.run_title(failed).plain
    assert "why failed: no reason recorded" in title
    assert "r: resume from checkpoint-10 (the newest complete one)" in title
    rows = run_rows.checkpoint_rows(failed, {"/runs/x/checkpoint-20"})
    assert (
        rows["/runs/x/checkpoint-20"][0].plain == "✓" and rows["/runs/x/checkpoint-10"][1] == "10"
    )
    assert "incomplete: no weights" in rows["/runs/x/checkpoint-20"][3].plain


def test_a_schedule_row_a_folded_row_and_the_detail_line():
    keys = ["flag", "host", "why", "spec", "cmd"]
    cells = sched_rows.schedule_cells(STRAY, "its target is gone", "a", keys)
    assert [c if isinstance(c, str) else c.plain for c in cells] == [
        "⚠",
        "a",
        "its target is gone",
        "*/5 * * * *",
        "/opt/old.sh",
    ]
    assert sched_rows.short_why(STRAY) == "path missing"
    assert sched_rows.schedule_key(STRAY) == "a/c1"
    folded = sched_rows.folded_cells(3, "a", keys)
    assert folded[0].plain == "·" and folded[-1].plain.startswith("3 entries the distribution")
    detail = sched_rows.schedule_detail(STRAY, "its target is gone").plain
    assert detail.startswith("c1  cron on a as root, from /etc/crontab\n/opt/old.sh")
    assert detail.endswith("stray: its target is gone  —  a: acknowledge   x: remove")


def test_an_alert_row_silenced_or_not_and_its_detail():
    a = Alert(rule="gpu-hot", host="a", subject="GPU0", state="firing", since=1000.0, text="hot")
    cells = alert_rows.alert_cells(a, None, 1060.0)
    assert cells[0].plain == "firing" and cells[0].style == "bold red"
    assert cells[2:4] == ("gpu-hot", "a") and cells[-1].plain == "hot"
    s = Silence("s1", "a", "gpu-hot", None, 900.0, 2000.0, "fan swap", "ops")
    held = alert_rows.alert_cells(a, s, 1060.0)
    assert held[0].plain == "silenced" and held[-1].plain.startswith("silenced by ops until ")
    assert held[-1].plain.endswith(": hot")
    row = alert_rows.silence_cells(s)
    assert row[0] == "s1" and row[1].plain == "gpu-hot on a" and row[-1].plain == "fan swap"
    detail = alert_rows.alert_detail(a, s).plain
    # what it says on the second line: at 80x24 the detail has three
    assert detail.startswith("ALERT gpu-hot on a: GPU0 · firing since ")
    assert detail.splitlines()[1] == "hot"
    assert "Silenced by ops until " in detail and "(s1, gpu-hot on a): fan swap." in detail
    assert "Silenced" not in alert_rows.alert_detail(a, None).plain


def test_the_rows_load_no_textual():
    code = (
        "import sys\n"
        "import fleetdeck.tui.rows.fleet, fleetdeck.tui.rows.host\n"
        "import fleetdeck.tui.rows.runs, fleetdeck.tui.rows.schedules, fleetdeck.tui.rows.alerts\n"
        "print('textual' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
