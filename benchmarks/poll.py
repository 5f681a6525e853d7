"""Poll-cycle cost: the resident probe against a fresh `python3 -` per poll (gpustat-web's way).

Starts a fleet of loopback sshd hosts, polls them all concurrently, and prints the median
cycle time, the controller's CPU per cycle and the probe's CPU per poll for both ways, with
the ratio against the fresh-process baseline.

Beside them, in the same run, the floor: the least any probe can do on this host each poll, a
bare stdlib scan of every `/proc/PID/stat` (listed, opened, read) and `os.statvfs` of the same
disks a probe is asked about (one host's `disk_paths`), in this process, CPU per poll (median);
the resident probe's CPU per poll is printed as a ratio to it. For the resident probe also the
bytes of its answer lines a host-poll (median): with deltas, only the sections that changed.

    python benchmarks/poll.py --hosts 20 --polls 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fleetdeck.backend.fleet.config import load_fleet  # noqa: E402
from fleetdeck.backend.fleet.link import channel  # noqa: E402
from fleetdeck.backend.fleet.link.ssh import HostLink  # noqa: E402
from fleetdeck.backend.fleet.poller import Poller, probe_request, probe_source  # noqa: E402

from support.sshfleet import SshdFleet  # noqa: E402


async def resident(fleet, polls: int) -> dict:
    poller = Poller(fleet)
    got = [0]
    read_line = channel.read_line

    async def counted(*a, **k):
        line = await read_line(*a, **k)
        got[0] += len(line)
        return line

    channel.read_line = counted
    try:
        await poller.poll()  # warm-up: connections made, probes started, caches filled
        cycles, ctl_cpu, snaps, wire = [], [], [], []
        for _ in range(polls):
            got[0] = 0
            c0, t0 = time.process_time(), time.perf_counter()
            snap = await poller.poll()
            cycles.append(time.perf_counter() - t0)
            ctl_cpu.append(time.process_time() - c0)
            wire.append(got[0] / len(snap.hosts))
            assert all(h.reachable for h in snap.hosts), [
                h.error for h in snap.hosts if not h.reachable
            ]
            snaps.append(snap)
        # each probe reports its cumulative CPU: the difference over the measured polls
        probe_cpu = [
            (b.probe_cpu_s - a.probe_cpu_s) / (polls - 1)
            for a, b in zip(snaps[0].hosts, snaps[-1].hosts, strict=True)
        ]
        return {
            "cycle_ms": 1000 * statistics.median(cycles),
            "controller_cpu_ms": 1000 * statistics.median(ctl_cpu),
            "probe_cpu_ms": 1000 * statistics.median(probe_cpu),
            "answer_bytes": statistics.median(wire),
        }
    finally:
        channel.read_line = read_line
        await poller.close()


async def fresh(fleet, polls: int) -> dict:
    links = {h.name: HostLink(h) for h in fleet.hosts}
    source = probe_source().encode()
    try:

        async def one(h):
            res = await links[h.name].run(
                [h.python, "-", json.dumps(probe_request(h))], input=source
            )
            return json.loads(res.stdout)

        await asyncio.gather(*(one(h) for h in fleet.hosts))  # warm-up: connections made
        cycles, ctl_cpu, probe_cpu = [], [], []
        for _ in range(polls):
            c0, t0 = time.process_time(), time.perf_counter()
            answers = await asyncio.gather(*(one(h) for h in fleet.hosts))
            cycles.append(time.perf_counter() - t0)
            ctl_cpu.append(time.process_time() - c0)
            probe_cpu.extend(a["probe_cpu_s"] for a in answers)
        return {
            "cycle_ms": 1000 * statistics.median(cycles),
            "controller_cpu_ms": 1000 * statistics.median(ctl_cpu),
            "probe_cpu_ms": 1000 * statistics.median(probe_cpu),
        }
    finally:
        await asyncio.gather(*(link.close() for link in links.values()))


def floor(disk_paths: list[str], polls: int) -> tuple[float, int]:
    """The least a probe can do each poll: every /proc/PID/stat read, and statvfs of each
    disk. (median ms of CPU per poll, a first scan untimed; the /proc/PID entries read)."""
    paths = [os.path.expanduser(p) for p in disk_paths]
    entries = [0]

    def scan() -> None:
        entries[0] = 0
        for name in os.listdir("/proc"):
            if name.isdigit():
                entries[0] += 1
                try:
                    with open(f"/proc/{name}/stat", "rb") as f:
                        f.read()
                except OSError:
                    pass
        for p in paths:
            try:
                os.statvfs(p)
            except OSError:
                pass

    scan()
    cpu = []
    for _ in range(polls):
        c0 = time.process_time()
        scan()
        cpu.append(time.process_time() - c0)
    return 1000 * statistics.median(cpu), entries[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=20)
    ap.add_argument("--polls", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        sf = SshdFleet(Path(d))
        try:
            for i in range(args.hosts):
                sf.add(f"b{i:02d}")
            path = sf.write_fleet(
                Path(d) / "hosts.toml", defaults={"command_timeout": 60, "connect_timeout": 20}
            )
            fleet = load_fleet(str(path))
            base = asyncio.run(fresh(fleet, args.polls))
            res = asyncio.run(resident(fleet, args.polls))
            disk_paths = probe_request(fleet.hosts[0])["disk_paths"]
            floor_ms, entries = floor(disk_paths, args.polls)
        finally:
            sf.stop_all()
    out = {
        "hosts": args.hosts,
        "polls": args.polls,
        "baseline_fresh_python_per_poll": base,
        "resident_probe": res,
        "cycle_speedup": base["cycle_ms"] / res["cycle_ms"],
        "probe_cpu_ratio": base["probe_cpu_ms"] / res["probe_cpu_ms"],
        "floor_cpu_ms": floor_ms,
        "floor_proc_entries": entries,
        "floor_disks": len(disk_paths),
        "probe_to_floor": res["probe_cpu_ms"] / floor_ms,
    }
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{args.hosts} loopback sshd hosts, {args.polls} polls each way, medians")
        print(f"{'':34}{'cycle':>10}{'controller CPU':>16}{'probe CPU/poll':>16}")
        for label, r in (("baseline: fresh python3 - per poll", base), ("resident probe", res)):
            print(
                f"{label:34}{r['cycle_ms']:>8.1f}ms{r['controller_cpu_ms']:>14.1f}ms{r['probe_cpu_ms']:>14.1f}ms"
            )
        print(
            f"resident vs baseline: cycle {out['cycle_speedup']:.1f}x faster, "
            f"probe CPU {out['probe_cpu_ratio']:.1f}x less"
        )
        print(
            f"resident probe: controller CPU {res['controller_cpu_ms'] / args.hosts:.3f}ms "
            f"a host-poll, answer {res['answer_bytes']:.0f} bytes a host-poll"
        )
        print(
            f"floor ({entries} /proc/PID/stat read, statvfs of the same {len(disk_paths)} "
            f"disks): {floor_ms:.2f}ms CPU "
            f"per poll; resident probe {out['probe_to_floor']:.1f}x the floor"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
