"""Where one poll goes: the probe's poll, the controller's host-poll and the dashboard's repaint,
each split by part, in ms of CPU per poll and as a share of the whole.

    python benchmarks/profile_poll.py [--hosts 20] [--polls 20] [--repeat 5] [--only PARTS]

Each part is an explicit span around the code that does it (the functions below, replaced by a
timed wrapper for the run), charged exclusively: a span opened inside another is taken out of
the outer one, so the parts add up to the whole. The whole is also measured once without any
span (the baseline in the same run): the ratio between the two says what the spans cost.

- probe: `snapshot()` of backend/host/probe/main.py run in a child process as the resident
  probe runs it (resident mode), on the request the poller sends the first of --hosts loopback
  sshd hosts (benchmarks/poll.py's set-up: its runs folder, its disks), while every host's
  probe is resident (the processes poll.py's resident run sees); main-thread CPU
  (`thread_time`) per poll, the other threads (NVML's sampler) apart, and beside it poll.py's
  floor (every /proc/PID/stat read, statvfs of the same disks) measured at the same moment.
  Twice: with no GPU, and with a stand-in libnvidia-ml.so.1 built from
  tests/host/test_probe_gpu.py's C (NVML's signatures and structs, every health field) widened
  to 8 GPUs that each answer as its H200 does (needs cc).
  Parts: the /proc scan (Procs), GPUs, memory and load, disks, runs, schedules, seats, the
  process list, the answer's JSON, and the rest (dispatch, assembly).
- controller: `Poller.poll()` over --hosts loopback sshd hosts (benchmarks/poll.py's set-up),
  process CPU per host-poll: the request, the answer's JSON decode, validation split by record
  kind (GPUs, runs, schedules, disks, processes, seats, the rest of `host_from_probe`), the
  verdict (rules, acks), what is held of the last answer (`Held.take`: a delta's unchanged
  sections taken as validated), asyncssh's packets in and out (SSHConnection.data_received,
  send_packet) and the rest (the event loop, channels' streams, tasks). Then the validation of
  the 8-GPU stand-in's answer, alone (no transport).
- dashboard: benchmarks/tui_big.py's big fleet (200 hosts x 8 GPUs, 10,000 schedules, 3,000
  runs, 200x60 headless), a poll applied to the view on screen (Fleet, Runs, Schedules),
  process CPU until the frame is drawn: the model update (FleetState.apply; its runs and
  schedules in order), the alert watch, the view's refresh (its own code, its column widths),
  the table's sync (KeyedTable.sync_lazy), the row builders (tui/rows, show/), the table's own
  lines (TableLines.render_line), and the rest (Textual: messages, layout, compositor).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))


class Spans:
    """Exclusive CPU per part: time inside a nested span is charged to it, not its parent."""

    def __init__(self, clock) -> None:
        self.clock = clock
        self.stack: list[str] = []
        self.t: dict[str, float] = defaultdict(float)
        self.last = 0.0
        self.undo: list[tuple[object, str, object]] = []

    def enter(self, part: str) -> None:
        now = self.clock()
        if self.stack:
            self.t[self.stack[-1]] += now - self.last
        self.stack.append(part)
        self.last = now

    def leave(self) -> None:
        now = self.clock()
        self.t[self.stack.pop()] += now - self.last
        self.last = now

    def take(self) -> dict[str, float]:
        out, self.t = dict(self.t), defaultdict(float)
        return out

    def patch(self, owner: object, name: str, part: str) -> None:
        fn = getattr(owner, name)

        @functools.wraps(fn)
        def timed(*a, **k):
            self.enter(part)
            try:
                return fn(*a, **k)
            finally:
                self.leave()

        self.undo.append((owner, name, owner.__dict__.get(name, fn)))
        setattr(owner, name, timed)

    def patch_property(self, owner: type, name: str, part: str) -> None:
        prop = owner.__dict__[name]
        self.undo.append((owner, name, prop))
        get = prop.fget

        def timed(obj):
            self.enter(part)
            try:
                return get(obj)
            finally:
                self.leave()

        setattr(owner, name, property(timed))

    def unpatch(self) -> None:
        for owner, name, fn in reversed(self.undo):
            setattr(owner, name, fn)
        self.undo.clear()


def table(title: str, polls: list[dict[str, float]], bare: list[float], unit: str) -> None:
    """Median, mean and max ms per part, its share of the summed parts (of all the polls: a
    part that is dear once in a while shows in the mean and the share, not the median), and
    the whole against the bare run."""
    parts = sorted({p for d in polls for p in d}, key=lambda p: -sum(d.get(p, 0) for d in polls))
    whole = sum(sum(d.values()) for d in polls)
    print(f"\n{title}")
    print(f"  {'part':<44}{'ms CPU ' + unit:>16}{'mean':>8}{'max':>8}{'share':>7}")
    for p in parts:
        xs = [d.get(p, 0.0) * 1e3 for d in polls]
        share = sum(xs) / 1e3 / whole if whole else 0.0
        print(
            f"  {p:<44}{statistics.median(xs):>16.3f}{statistics.fmean(xs):>8.3f}"
            f"{max(xs):>8.3f}{share:>7.0%}"
        )
    tot = statistics.median(sum(d.values()) for d in polls) * 1e3
    print(f"  {'whole, with the spans (median)':<44}{tot:>16.3f}")
    if bare:
        b = statistics.median(bare) * 1e3
        print(f"  {'whole, no spans (baseline, median)':<44}{b:>16.3f}   spans cost {tot / b:.2f}x")


# -- the probe -------------------------------------------------------------------------------------

PROBE_PARTS = {
    "Procs": "processes: the /proc scan (cmdline)",
    "gpus": "GPUs",
    "memory": "memory, load",
    "load1": "memory, load",
    "disks": "disks",
    "runs": "runs",
    "schedules": "schedules (crontabs, timers, loops)",
    "find_seats": "seats (serving engines)",
    "processes": "processes: the list sent",
}


def probe_child(req: dict, polls: int, interval: float) -> dict:
    """In the child: bare polls, then polls with the spans; JSON on stdout."""
    from fleetdeck.backend.host.lib import serve
    from fleetdeck.backend.host.probe import main as pm
    from fleetdeck.backend.host.probe.common import STATE

    STATE["resident"] = True
    line = json.dumps(req)

    def one() -> str:
        return serve.dumps(pm.handle(json.loads(line)))

    answer = json.loads(one())  # the first poll: caches filled, NVML set up
    bare = []
    for _ in range(polls):
        time.sleep(interval)
        c = time.thread_time()
        one()
        bare.append(time.thread_time() - c)
    sp = Spans(time.thread_time)
    for name, part in PROBE_PARTS.items():
        sp.patch(pm, name, part)
    sp.patch(serve, "dumps", "the answer's JSON")
    rows, p0, t0 = [], time.process_time(), time.thread_time()
    for _ in range(polls):
        time.sleep(interval)
        sp.enter("the rest (dispatch, assembly)")
        one()
        sp.leave()
        rows.append(sp.take())
    others = (time.process_time() - p0) - (time.thread_time() - t0)
    return {
        "rows": rows,
        "bare": bare,
        "threads_ms": others / polls * 1e3,
        "gpus": len(answer.get("gpus") or []),
        "gpu_source": answer.get("gpu_source"),
        "answer": answer,
    }


def stub8(d: Path) -> Path | None:
    """libnvidia-ml.so.1 from the probe's test stand-in, 8 GPUs each answering as its H200."""
    if shutil.which("cc") is None:
        return None
    from host.test_probe_gpu import NVML_STUB

    c = NVML_STUB.replace('"GPU-stub-%d", d->idx', '"GPU-stub-%d", (int)(d - devs)')
    c = c.replace("d->idx", "0").replace("static struct dev devs[2] = {{0}, {1}};", "")
    c = c.replace("typedef struct dev { int idx; } *nvmlDevice_t;", "")
    c = c.replace(
        "#include <unistd.h>",
        "#include <unistd.h>\n"
        "typedef struct dev { int idx; } *nvmlDevice_t;\nstatic struct dev devs[8];",
    )
    c = c.replace("*n = 2;", "*n = 8;").replace("int registered[2];", "int registered[8];")
    (d / "nvml8.c").write_text(c)
    subprocess.run(
        [
            "cc",
            "-shared",
            "-fPIC",
            "-DWITH_V2",
            "-o",
            str(d / "libnvidia-ml.so.1"),
            str(d / "nvml8.c"),
        ],
        check=True,
    )
    return d


def run_probe(req: dict, polls: int, interval: float, env: dict) -> dict:
    p = subprocess.run(
        [
            sys.executable,
            __file__,
            "--probe-child",
            json.dumps(req),
            "--polls",
            str(polls),
            "--interval",
            str(interval),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if p.returncode:
        sys.exit(f"profile_poll: the probe's child failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout)


def probe_section(req: dict, args, d: Path) -> dict | None:
    from poll import floor

    env = dict(os.environ, FLEETDECK_PROBE_GPU="none")
    res = run_probe(req, args.polls, args.interval, env)
    floor_ms, entries = floor(req["disk_paths"], args.polls)
    table(
        f"probe, one poll, no GPU ({args.polls} polls, {args.interval:g} s apart)",
        res["rows"],
        res["bare"],
        "/poll",
    )
    whole = statistics.median(res["bare"]) * 1e3
    print(
        f"  {f'floor ({entries} /proc/PID/stat, statvfs; poll.py)':<44}{floor_ms:>16.3f}"
        f"   the probe, no spans: {whole / floor_ms:.1f}x the floor"
    )
    lib = stub8(d)
    if lib is None:
        print("  (no C compiler: the 8-GPU stand-in is not built)")
        return None
    env = dict(
        os.environ,
        LD_LIBRARY_PATH=str(lib),
        FLEETDECK_PROBE_GPU="nvml",
        NVML_STUB_PID=str(os.getpid()),
        NVML_STUB_XID=str(lib / "xid"),
        NVML_STUB_LOST=str(lib / "lost"),
    )
    g = run_probe(req, args.polls, args.interval, env)
    table(
        f"probe, one poll, {g['gpus']} GPUs through {g['gpu_source']} (the C stand-in)",
        g["rows"],
        g["bare"],
        "/poll",
    )
    print(f"  {'other threads (NVML sampler), per poll':<44}{g['threads_ms']:>16.3f}")
    return g["answer"]


# -- the controller --------------------------------------------------------------------------------


def validation_spans(sp: Spans) -> None:
    from fleetdeck.backend.fleet import validate

    for name, part in (
        ("gpu_from_json", "validation: GPUs"),
        ("_run", "validation: runs"),
        ("_schedule", "validation: schedules"),
        ("_disk", "validation: disks"),
        ("_process", "validation: processes"),
        ("_seats", "validation: seats"),
        ("host_from_probe", "validation: the rest"),
    ):
        sp.patch(validate, name, part)


async def fleet_session(fleet, args, d: Path, only: set[str]) -> dict:
    """With every loopback host's probe resident (the /proc benchmarks/poll.py's resident run
    sees): the probe's profile, then the controller's."""
    from fleetdeck.backend.fleet import poller as pol

    poller = pol.Poller(fleet)
    out: dict = {"answer": None}
    try:
        await poller.poll()  # connections made, probes started
        if "probe" in only:
            out["answer"] = probe_section(pol.probe_request(fleet.hosts[0]), args, d)
        if "controller" in only:
            out["controller"] = await controller_polls(poller, len(fleet.hosts), args.polls)
        return out
    finally:
        await poller.close()


async def controller_polls(poller, n: int, polls: int) -> tuple[list[dict], list[float]]:
    from asyncssh.connection import SSHConnection

    from fleetdeck.backend.fleet import held, schedule_verdict
    from fleetdeck.backend.fleet import poller as pol
    from fleetdeck.backend.fleet.link import channel

    bare = []
    for _ in range(polls):
        c = time.process_time()
        await poller.poll()
        bare.append((time.process_time() - c) / n)
    sp = Spans(time.process_time)
    validation_spans(sp)
    sp.patch(pol, "host_from_probe", "validation: the rest")
    sp.patch(pol, "probe_request", "the request")
    sp.patch(channel, "loads", "the answer's JSON decode")
    sp.patch(schedule_verdict.StrayVerdict, "__call__", "verdict (rules)")
    sp.patch(held.Held, "take", "delta: the sections held")
    sp.patch(pol, "load_acks", "verdict: acks file")
    sp.patch(SSHConnection, "data_received", "SSH in (decrypt, packets, channels)")
    sp.patch(SSHConnection, "send_packet", "SSH out (packets, encrypt)")
    rows = []
    for _ in range(polls):
        sp.enter("the rest (event loop, streams, tasks)")
        snap = await poller.poll()
        sp.leave()
        assert all(h.reachable for h in snap.hosts)
        rows.append({k: v / n for k, v in sp.take().items()})
    sp.unpatch()
    return rows, bare


def validation_alone(answer: dict, repeat: int) -> tuple[list[dict], list[float]]:
    from fleetdeck.backend.fleet import validate

    bare = []
    for _ in range(repeat):
        c = time.process_time()
        validate.host_from_probe("h", answer, 1.0, time.time())
        bare.append(time.process_time() - c)
    sp = Spans(time.process_time)
    validation_spans(sp)
    rows = []
    for _ in range(repeat):
        validate.host_from_probe("h", answer, 1.0, time.time())
        rows.append(sp.take())
    sp.unpatch()
    return rows, bare


def fleet_sections(args, only: set[str]) -> None:
    from fleetdeck.backend.fleet.config import load_fleet

    from support.sshfleet import SshdFleet

    with tempfile.TemporaryDirectory() as d:
        sf = SshdFleet(Path(d))
        try:
            for i in range(args.hosts):
                sf.add(f"b{i:02d}")
            path = sf.write_fleet(
                Path(d) / "hosts.toml", defaults={"command_timeout": 60, "connect_timeout": 20}
            )
            fleet = load_fleet(str(path))
            out = asyncio.run(fleet_session(fleet, args, Path(d), only))
        finally:
            sf.stop_all()
    if "controller" in out:
        rows, bare = out["controller"]
        table(
            f"controller, one host-poll ({args.hosts} loopback sshd hosts, {args.polls} polls, "
            "no GPU)",
            rows,
            bare,
            "/host-poll",
        )
    if out["answer"] is not None and "controller" in only:
        rows, bare = validation_alone(out["answer"], 200)
        table(
            "controller, validation alone of the 8-GPU stand-in's answer (200 times)",
            rows,
            bare,
            "/host-poll",
        )


# -- the dashboard ---------------------------------------------------------------------------------


def dashboard_spans(sp: Spans) -> None:
    import inspect

    from fleetdeck.tui.alert_watch import AlertWatch
    from fleetdeck.tui.fleet_state import FleetState
    from fleetdeck.tui.views import fleet, runs, schedules
    from fleetdeck.tui.widgets.keyed_table import KeyedTable
    from fleetdeck.tui.widgets.table_lines import TableLines

    sp.patch(FleetState, "apply", "model update (FleetState.apply)")
    sp.patch_property(FleetState, "runs", "model: runs in order (FleetState.runs)")
    sp.patch_property(FleetState, "schedules", "model: schedules (FleetState.schedules)")
    sp.patch(KeyedTable, "sync_lazy", "table sync (KeyedTable.sync_lazy)")
    sp.patch(AlertWatch, "observe", "alert watch")
    sp.patch(TableLines, "render_line", "table lines (TableLines.render_line)")
    for mod, cls in ((fleet, "FleetScreen"), (runs, "RunsScreen"), (schedules, "SchedulesScreen")):
        sp.patch(getattr(mod, cls), "refresh_view", "view refresh (its own code)")
        if "_fit_columns" in vars(getattr(mod, cls)):
            sp.patch(getattr(mod, cls), "_fit_columns", "view: column widths")
        for name, fn in list(vars(mod).items()):
            if inspect.isfunction(fn) and fn.__module__.startswith(
                ("fleetdeck.tui.rows", "fleetdeck.show")
            ):
                sp.patch(mod, name, "rows (tui/rows, show/)")


async def dashboard_repaints(repeat: int) -> dict[str, tuple[list[dict], list[float]]]:
    import random

    from tui_big import SETTLE_S, snapshot

    from fleetdeck.backend.fleet.config import parse_fleet
    from fleetdeck.tui.app import FleetdeckApp
    from fleetdeck.tui.messages import FleetPolled
    from fleetdeck.tui.sources import RecordedSource

    rng = random.Random(4919)
    snaps = [snapshot(200, 10000, 3000, i, rng) for i in range(2 * repeat + 2)]
    fleet = parse_fleet("".join(f"[hosts.gpu-{h:03d}]\nlocal = true\n" for h in range(200)), "b")
    app = FleetdeckApp(fleet, RecordedSource(snaps[:1]), autopoll=False, clock=lambda: 1000.0)
    sp = Spans(time.process_time)
    out: dict[str, tuple[list[dict], list[float]]] = {}
    k = 1
    async with app.run_test(size=(200, 60)) as pilot:
        app.post_message(FleetPolled(snaps[0]))
        await pilot.pause()
        for view, key in (("1", "Fleet"), ("2", "Runs"), ("3", "Schedules")):
            await pilot.press(view)
            await pilot.pause(SETTLE_S)
            rows, bare = [], []
            for spans in [False] * repeat + [True] * repeat:
                if spans and not sp.undo:
                    dashboard_spans(sp)
                if not spans and sp.undo:
                    sp.unpatch()
                snap, k = snaps[k % len(snaps)], k + 1
                sp.take()
                c = time.process_time()
                sp.enter("the rest (Textual: messages, layout, compositor)")
                app.post_message(FleetPolled(snap))
                await pilot.pause()
                sp.leave()
                if spans:
                    rows.append(sp.take())
                else:
                    bare.append(time.process_time() - c)
                await pilot.pause(SETTLE_S)
            out[key] = (rows, bare)
            sp.unpatch()
    return out


def dashboard_section(args) -> None:
    res = asyncio.run(dashboard_repaints(args.repeat))
    for key, (rows, bare) in res.items():
        table(
            f"dashboard, one repaint after a poll on {key} (tui_big's fleet: 200 hosts x 8 "
            f"GPUs, 10,000 schedules, 3,000 runs; 200x60; {args.repeat} repaints)",
            rows,
            bare,
            "/repaint",
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=20, help="loopback sshd hosts (controller)")
    ap.add_argument("--polls", type=int, default=20, help="polls measured (probe, controller)")
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between probe polls")
    ap.add_argument("--repeat", type=int, default=5, help="repaints measured per view")
    ap.add_argument("--only", default="probe,controller,dashboard", help="the sections to run")
    ap.add_argument("--probe-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.probe_child:
        print(json.dumps(probe_child(json.loads(args.probe_child), args.polls, args.interval)))
        return 0
    only = set(args.only.split(","))
    load = os.getloadavg()
    print(
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} CPUs; "
        "ms of CPU (exclusive spans); share of the summed parts over every poll"
    )
    if "probe" in only or "controller" in only:
        fleet_sections(args, only)
    if "dashboard" in only:
        dashboard_section(args)
    load = os.getloadavg()
    print(f"\nload average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
