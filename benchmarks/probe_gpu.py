"""The probe on a real GPU: every figure it reports beside `nvidia-smi -q`'s, and its own cost.

Run on a machine with an NVIDIA GPU, its driver and torch with CUDA:

    python benchmarks/probe_gpu.py [--gib 10] [--polls 20] [--interval 2] [--probe-file probe.py]

A torch process holds --gib GiB on GPU 0 and keeps it busy (bf16 matrix products and a
256 MiB copy each way between host and GPU, so power, clocks, throttle reasons, PCIe traffic
and per-process utilisation all have something to say). The probe (backend/host/probe/, run as
a resident subprocess exactly as the poller runs it, bundled) is polled through NVML every
--interval seconds, then forced to nvidia-smi (FLEETDECK_PROBE_GPU=nvidia-smi), then with no
GPU section at all (`none`): its figures are printed beside the lines of `nvidia-smi -q` (and
`nvidia-smi pmon` for per-process SM) taken at the same moment, field by field.

Then the cost, against nvidia-smi in the same run:

- probe CPU per poll (median; the resident process's whole CPU, its sampler thread included),
  NVML against nvidia-smi against no GPU section: NVML minus none is the GPU section's cost;
- the poll path on an 8-GPU host, estimated where only one GPU is lent: the GPU section's
  `read()` over eight handles to GPU 0 (each query costs what it costs on its own card), CPU
  per call (median), in this process (fleetdeck importable: installed, or PYTHONPATH=DIR with
  DIR/fleetdeck/backend a link to backend/);
- the sampler's questions (PCIe throughput, per-process utilisation), each one's CPU, and what
  its spacing (SAMPLER_SHARE) makes of them per poll at the fleet's default 5 s interval.

`--pcie-direction` instead checks which way the PCIe throughput figures point: a torch process
copies 512 MiB from GPU to host over and over (the GPU transmits), then host to GPU (it
receives), and during each the probe's own sampler question (TX and RX) is asked beside
`nvidia-smi -q`'s Tx and Rx Throughput lines, three times.

`--controller` needs no GPU: the controller's side of one host-poll of an 8-GPU host, the probe's
answer checked into a HostSnapshot (`validate.host_from_probe`), judged by the GPU rules, and
exported to /metrics, with the health fields (the H200's figures above, two processes a card)
against the same answer without them (memory and utilisation only, as before), CPU per
host-poll (median).

Exits 1 with one sentence when there is no GPU, no torch with CUDA, or no nvidia-smi.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _probe_file() -> Path:
    """The probe as hosts receive it: its bundle (built here, or given as --probe-file where
    fleetdeck is not installed, e.g. `python -m fleetdeck.backend.fleet.link.bundle fleetdeck.backend.host.probe.main`)."""
    if "--probe-file" in sys.argv:
        return Path(sys.argv[sys.argv.index("--probe-file") + 1])
    import tempfile

    from fleetdeck.backend.fleet.link.bundle import bundle

    f = tempfile.NamedTemporaryFile("w", suffix=".py", delete=False)
    f.write(bundle("fleetdeck.backend.host.probe.main"))
    f.close()
    return Path(f.name)


PROBE = _probe_file()
HOLDER = """
import sys, time, torch
x = torch.empty(int(float(sys.argv[1]) * 2**30), dtype=torch.uint8, device="cuda:0")
x.fill_(1)
a = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
h = torch.empty(256 << 20, dtype=torch.uint8).pin_memory()
d = torch.empty(256 << 20, dtype=torch.uint8, device="cuda:0")
torch.cuda.synchronize()
print("ready", torch.cuda.get_device_name(0), flush=True)
end = time.time() + 3600
while time.time() < end:
    for _ in range(20):
        b = a @ a
    d.copy_(h, non_blocking=True); h.copy_(d, non_blocking=True)
    torch.cuda.synchronize()
"""
DEFAULT_POLL_S = 5.0
ONE_WAY = """
import sys, time, torch
h = torch.empty(512 << 20, dtype=torch.uint8).pin_memory()
d = torch.empty(512 << 20, dtype=torch.uint8, device="cuda:0")
torch.cuda.synchronize()
print("ready", flush=True)
end = time.time() + 120
while time.time() < end:
    (h.copy_(d) if sys.argv[1] == "gpu-to-host" else d.copy_(h))
    torch.cuda.synchronize()
"""


def fail(msg: str) -> None:
    print(f"probe_gpu: {msg}", file=sys.stderr)
    sys.exit(1)


def preflight() -> None:
    if shutil.which("nvidia-smi") is None:
        fail("nvidia-smi is not on PATH; this benchmark needs an NVIDIA GPU and its driver")
    p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    if p.returncode != 0 or "GPU 0" not in p.stdout:
        fail(f"nvidia-smi lists no GPU ({(p.stderr or p.stdout).strip() or p.returncode})")
    p = subprocess.run(
        [sys.executable, "-c", "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 3)"],
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        why = (
            "torch sees no CUDA device"
            if p.returncode == 3
            else (p.stderr.strip().splitlines() or ["?"])[-1]
        )
        fail(f"needs torch with CUDA in {sys.executable}: {why}")


class Resident:
    """The probe as the poller runs it: one process, a JSON line in, a JSON line out."""

    def __init__(self, mode: str) -> None:
        env = dict(os.environ, FLEETDECK_PROBE_GPU=mode)
        self.p = subprocess.Popen(
            [sys.executable, str(PROBE), "--resident"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def poll(self) -> tuple[dict, float]:
        t = time.perf_counter()
        self.p.stdin.write(
            json.dumps({"op": "snapshot", "runs": [], "disk_paths": [], "stall_factor": 10}) + "\n"
        )
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            fail("the probe exited without answering")
        return json.loads(line), time.perf_counter() - t

    def close(self) -> None:
        self.p.stdin.close()
        self.p.wait(10)


def cost(mode: str, polls: int, interval: float) -> dict:
    """Median probe CPU and wall per poll over `polls` polls `interval` s apart (the first,
    start-up and NVML's set-up, is not counted)."""
    r = Resident(mode)
    try:
        first, _ = r.poll()
        cpu, wall = [], []
        prev = first
        for _ in range(polls):
            time.sleep(interval)
            rep, dt = r.poll()
            cpu.append(
                (rep["probe_cpu_s"] - prev["probe_cpu_s"])
                + (rep["probe_children_cpu_s"] - prev["probe_children_cpu_s"])
            )
            wall.append(dt)
            prev = rep
        return {
            "source": prev["gpu_source"],
            "cpu_ms": statistics.median(cpu) * 1e3,
            "cpu_max_ms": max(cpu) * 1e3,
            "wall_ms": statistics.median(wall) * 1e3,
            "reply": prev,
        }
    finally:
        r.close()


# -- nvidia-smi -q, parsed by indentation ---------------------------------------------------
def smi_q() -> dict[str, str]:
    """`nvidia-smi -q -i 0` as {"Section/Sub/Key": value}."""
    out = subprocess.run(
        ["nvidia-smi", "-q", "-i", "0"], capture_output=True, text=True, check=True
    ).stdout
    flat, stack = {}, []
    for line in out.splitlines():
        if not line.strip() or line.startswith("="):
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 4
        key, sep, val = line.strip().partition(":")
        key = key.strip()
        stack = stack[: max(0, depth - 1)] + [key]
        if sep and val.strip():
            flat["/".join(stack)] = val.strip()
    return flat


def smi_pmon() -> str:
    p = subprocess.run(
        ["nvidia-smi", "pmon", "-c", "1", "-s", "u", "-i", "0"], capture_output=True, text=True
    )
    rows = [x for x in p.stdout.splitlines() if x.strip() and not x.startswith("#")]
    return "; ".join(" ".join(r.split()) for r in rows) or (p.stderr.strip() or "no answer")


#: (our field, the -q paths whose lines say the same; a path segment may be a regex)
BESIDE = (
    ("temperature_c", ["Temperature/GPU Current Temp"]),
    (
        "temperature_slowdown_c",
        [
            "Temperature/GPU Slowdown Temp",
            "Temperature/GPU Slowdown T.Limit Temp",
            "Temperature/GPU Max Operating T.Limit Temp",
        ],
    ),
    (
        "temperature_shutdown_c",
        ["Temperature/GPU Shutdown Temp", "Temperature/GPU Shutdown T.Limit Temp"],
    ),
    (
        "power_w",
        [
            "GPU Power Readings/Average Power Draw",
            "GPU Power Readings/Instantaneous Power Draw",
            "Power Readings/Power Draw",
        ],
    ),
    (
        "power_limit_w",
        ["GPU Power Readings/Current Power Limit", "Power Readings/Enforced Power Limit"],
    ),
    ("sm_clock_mhz", ["Clocks/SM"]),
    ("sm_clock_max_mhz", ["Max Clocks/SM"]),
    ("mem_clock_mhz", ["Clocks/Memory"]),
    ("mem_clock_max_mhz", ["Max Clocks/Memory"]),
    ("throttle_reasons", ["Clocks Event Reasons/.*", "Clocks Throttle Reasons/.*"]),
    ("fan_pct", ["Fan Speed"]),
    ("utilization_pct", ["Utilization/GPU"]),
    ("memory_util_pct", ["Utilization/Memory"]),
    ("pcie.gen", ["PCI/GPU Link Info/PCIe Generation/Current"]),
    ("pcie.gen_max", ["PCI/GPU Link Info/PCIe Generation/Max"]),
    ("pcie.width", ["PCI/GPU Link Info/Link Width/Current"]),
    ("pcie.width_max", ["PCI/GPU Link Info/Link Width/Max"]),
    ("pcie.tx_bytes_s", ["PCI/Tx Throughput"]),
    ("pcie.rx_bytes_s", ["PCI/Rx Throughput"]),
    ("ecc.mode", ["ECC Mode/Current"]),
    (
        "ecc.corrected",
        ["ECC Errors/Volatile/.*Correctable.*", "ECC Errors/Volatile/Single Bit/Total"],
    ),
    (
        "ecc.uncorrected",
        ["ECC Errors/Volatile/.*Uncorrectable.*", "ECC Errors/Volatile/Double Bit/Total"],
    ),
    ("ecc.corrected_aggregate", ["ECC Errors/Aggregate/.*Correctable.*"]),
    ("ecc.uncorrected_aggregate", ["ECC Errors/Aggregate/.*Uncorrectable.*"]),
    (
        "ecc.pending_retirement",
        [
            "Remapped Rows/Pending",
            "Retired Pages/Pending Page Blacklist",
            "Retired Pages/Pending Page Retirement",
        ],
    ),
    ("ecc.remapped_correctable", ["Remapped Rows/Correctable Error"]),
    ("ecc.remapped_uncorrectable", ["Remapped Rows/Uncorrectable Error"]),
    ("ecc.remap_failure", ["Remapped Rows/Remapping Failure Occurred"]),
    ("persistence_mode", ["Persistence Mode"]),
    ("compute_mode", ["Compute Mode"]),
    ("mig_mode", ["MIG Mode/Current"]),
    ("xid", []),
)


def field(g: dict, key: str):
    part, _, sub = key.partition(".")
    return g.get(part, {}).get(sub) if sub else g.get(part)


def q_lines(q: dict[str, str], paths: list[str]) -> str:
    got = []
    for pat in paths:
        rx = re.compile(
            "^"
            + "/".join(p if any(c in p for c in ".*") else re.escape(p) for p in pat.split("/"))
            + "$"
        )
        for k, v in q.items():
            if rx.match(k) and not (pat.endswith(".*") and v == "Not Active"):
                got.append(f"{k.rsplit('/', 1)[-1]}: {v}")
    return "; ".join(dict.fromkeys(got)) or "(not in nvidia-smi -q)"


def beside(nvml: dict, smi: dict, q: dict[str, str], pmon: str, pid: int) -> None:
    g, s = nvml["gpus"][0], smi["gpus"][0]
    print(f"\n{'field':<28} {'probe via NVML':<34} {'probe via nvidia-smi':<24} nvidia-smi -q")
    for key, paths in BESIDE:
        ours, fallback = json.dumps(field(g, key)), json.dumps(field(s, key))
        where = (
            q_lines(q, paths)
            if paths
            else "(nvidia-smi -q has no Xid section; the kernel log has them)"
        )
        print(f"{key:<28} {ours:<34} {fallback:<24} {where}")
    for label, rep in (("NVML", g), ("nvidia-smi", s)):
        mine = [p for p in rep["processes"] if p["pid"] == pid]
        procs = mine or rep["processes"]  # in a container NVML may report host pids
        print(
            f"processes via {label:<14} "
            + "; ".join(
                f"pid {p['pid']} {p['used_mib']:.0f} MiB sm_pct={p['sm_pct']} memory_util_pct={p['memory_util_pct']}"
                for p in procs
            )
        )
    print(f"{'':<28} nvidia-smi pmon: {pmon}")
    print(
        f"{'':<28} nvidia-smi -q processes: {q_lines(q, ['Processes/Process ID', 'Processes/Used GPU Memory'])}"
    )


# -- the poll path on eight handles, and the sampler's questions, in this process --------------
def eight_gpus(polls: int) -> dict | None:
    try:
        from fleetdeck.backend.host.probe import nvml as probe_nvml
        from fleetdeck.backend.host.probe import sampler as probe_sampler
    except ImportError as e:
        print(f"  (8-GPU estimate skipped: {e}; see the module docstring)")
        return None
    n = probe_nvml.Nvml(resident=False)
    i, h, name, uuid = n.devices[0]
    n.devices = [(k, h, name, uuid) for k in range(8)]
    n.read()  # the constants (clock maxima, thresholds) and the rare fields are asked here, once
    cpu = []
    for _ in range(polls):
        t = time.thread_time()
        n.read()
        cpu.append(time.thread_time() - t)
    s = probe_sampler.Sampler.__new__(probe_sampler.Sampler)  # its questions, without its thread
    s.nvml, s.pcie, s.procs, s.busy, s._last_seen, s._turn = n, {}, {}, {0: True}, {}, 0
    asked = {}
    for kind in ("pcie", "procs"):
        spent = []
        for _ in range(3):
            qs = [q for q in s._questions() if q[0] == kind and q[1] == 0]
            if not qs:
                break
            s._turn = s._questions().index(qs[0])
            t = time.thread_time()
            s._one()
            spent.append(time.thread_time() - t)
            time.sleep(1.0)
        asked[kind] = statistics.median(spent) * 1e3 if spent else None
    return {
        "cpu_ms": statistics.median(cpu) * 1e3,
        "cpu_max_ms": max(cpu) * 1e3,
        "questions_ms": asked,
        "share": probe_sampler.SAMPLER_SHARE,
        "gap_s": probe_sampler.SAMPLER_GAP_S,
        "pcie": s.pcie.get(0),
        "procs": s.procs.get(0),
    }


def pcie_direction() -> None:
    from fleetdeck.backend.host.probe import nvml as probe_nvml
    from fleetdeck.backend.host.probe import sampler as probe_sampler

    n = probe_nvml.Nvml(resident=False)
    s = probe_sampler.Sampler.__new__(probe_sampler.Sampler)  # its questions, without its thread
    s.nvml, s.pcie, s.procs, s.busy, s._last_seen, s._turn = n, {}, {}, {}, {}, 0
    print("copy direction   probe tx_bytes_s   probe rx_bytes_s   nvidia-smi -q")
    for way in ("gpu-to-host", "host-to-gpu"):
        p = subprocess.Popen(
            [sys.executable, "-c", ONE_WAY, way], stdout=subprocess.PIPE, text=True
        )
        try:
            if not p.stdout.readline().startswith("ready"):
                fail(f"the copying process failed (exit {p.wait()})")
            time.sleep(1.0)
            for _ in range(3):
                s._turn = 0
                s._one()
                tx, rx, _at = s.pcie[0]
                q = smi_q()
                print(
                    f"{way:<16} {tx:>18,.0f} {rx:>18,.0f}   Tx {q.get('PCI/Tx Throughput')}, "
                    f"Rx {q.get('PCI/Rx Throughput')}"
                )
        finally:
            p.kill()
            p.wait()


def controller(repeat: int) -> None:
    from fleetdeck.backend.fleet.models import FleetSnapshot
    from fleetdeck.backend.fleet.validate import host_from_probe
    from fleetdeck.backend.monitor.metrics.export import Latest, fleet_metrics
    from fleetdeck.backend.monitor.rules.alerts import AlertEngine

    now = time.time()
    health = {
        "memory_util_pct": 20,
        "temperature_c": 59,
        "temperature_slowdown_c": 89,
        "temperature_shutdown_c": 95,
        "power_w": 653.0,
        "power_limit_w": 700.0,
        "sm_clock_mhz": 1680,
        "sm_clock_max_mhz": 1980,
        "mem_clock_mhz": 3201,
        "mem_clock_max_mhz": 3201,
        "throttle_reasons": ["sw-power-cap"],
        "fan_pct": None,
        "pcie": {
            "gen": 5,
            "gen_max": 5,
            "width": 16,
            "width_max": 16,
            "tx_bytes_s": 1.6e10,
            "rx_bytes_s": 2.5e7,
            "sampled_at": now - 3,
        },
        "ecc": {
            "mode": "enabled",
            "corrected": 0,
            "uncorrected": 0,
            "corrected_aggregate": 0,
            "uncorrected_aggregate": 0,
            "pending_retirement": False,
            "remapped_correctable": 0,
            "remapped_uncorrectable": 0,
            "remap_failure": False,
        },
        "persistence_mode": True,
        "compute_mode": "default",
        "mig_mode": False,
        "xid": [],
    }

    def answer(with_health: bool) -> dict:
        gpus = []
        for i in range(8):
            procs = [
                {
                    "pid": 1000 + 10 * i + k,
                    "user": "ops",
                    "used_mib": 40000.0,
                    "command": "python3 serve.py",
                    **({"sm_pct": 99, "memory_util_pct": 18} if with_health else {}),
                }
                for k in range(2)
            ]
            g = {
                "index": i,
                "name": "NVIDIA H200",
                "uuid": f"GPU-{i}",
                "unified_memory": False,
                "memory_total_mib": 143771.0,
                "memory_used_mib": 80000.0,
                "utilization_pct": 99,
                "processes": procs,
            }
            gpus.append({**g, **(json.loads(json.dumps(health)) if with_health else {})})
        return {
            "time": now,
            "memory": {"total_bytes": 2 << 40, "used_bytes": 1 << 40},
            "load1": 3.0,
            "gpu_source": "nvml",
            "gpus": gpus,
            "disks": [],
            "runs": [],
            "schedules": [],
            "warnings": [],
        }

    print(f"controller, one host-poll of an 8-GPU host, median of {repeat} (CPU ms):")
    base = None
    for label, with_health in (
        ("memory and utilisation only", False),
        ("with the health fields", True),
    ):
        d = answer(with_health)
        engine = AlertEngine()
        check, judge, export = [], [], []
        for _ in range(repeat):
            c0 = time.process_time()
            h = host_from_probe("h200", d, 20.0, now)
            c1 = time.process_time()
            snap = FleetSnapshot(hosts=(h,), time=now)
            engine.evaluate(snap)
            c2 = time.process_time()
            fleet_metrics(Latest(snap=snap, polls=1))
            c3 = time.process_time()
            check.append(c1 - c0)
            judge.append(c2 - c1)
            export.append(c3 - c2)
        m = [statistics.median(x) * 1e3 for x in (check, judge, export)]
        total = sum(m)
        print(
            f"  {label:<28}: check {m[0]:.3f}, rules {m[1]:.3f}, /metrics {m[2]:.3f} = {total:.3f} ms"
            + (f" ({total / base:.2f}x)" if base else "")
        )
        base = base or total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", type=float, default=10.0, help="GiB the torch process holds on GPU 0")
    ap.add_argument("--polls", type=int, default=20)
    ap.add_argument("--interval", type=float, default=2.0, help="seconds between polls")
    ap.add_argument("--probe-file", help="the bundled probe, where fleetdeck is not installed")
    ap.add_argument("--pcie-direction", action="store_true", help="check which way TX and RX point")
    ap.add_argument(
        "--controller",
        action="store_true",
        help="the controller's cost of the health fields (no GPU)",
    )
    args = ap.parse_args()
    if args.controller:
        controller(args.polls * 10)
        return
    preflight()
    if args.pcie_direction:
        pcie_direction()
        return
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(args.gib)], stdout=subprocess.PIPE, text=True
    )
    try:
        ready = holder.stdout.readline()
        if not ready.startswith("ready"):
            fail(f"the torch process could not hold {args.gib:g} GiB (exit {holder.wait()})")
        print(
            f"torch pid {holder.pid} holds {args.gib:g} GiB on {ready.split(' ', 1)[1].strip()} and keeps it busy"
        )
        drv = smi_q()
        print(
            f"driver {drv.get('Driver Version')}, {drv.get('Product Name')}; {args.polls} polls "
            f"{args.interval:g} s apart per source"
        )
        nvml = cost("nvml", args.polls, args.interval)
        q, pmon = smi_q(), smi_pmon()
        smi = cost("nvidia-smi", max(5, args.polls // 4), 0.5)
        none = cost("none", max(5, args.polls // 4), 0.5)
        if nvml["source"] != "nvml":
            print(
                "  note: NVML was not used (libnvidia-ml.so.1 not loadable?): "
                + "; ".join(nvml["reply"]["warnings"])
            )
        beside(nvml["reply"], smi["reply"], q, pmon, holder.pid)
        for label, rep in (("NVML", nvml), ("nvidia-smi", smi)):
            for w in rep["reply"]["warnings"]:
                print(f"  warning via {label}: {w}")
        print(
            "\ncost per poll, median (probe CPU incl. its threads and children; wall = request to reply):"
        )
        print(
            f"  resident NVML (probe)           : {nvml['cpu_ms']:7.2f} ms CPU (max {nvml['cpu_max_ms']:.2f})"
            f"  {nvml['wall_ms']:7.2f} ms wall"
        )
        print(
            f"  no GPU section                  : {none['cpu_ms']:7.2f} ms CPU  {none['wall_ms']:7.2f} ms wall"
        )
        print(
            f"  nvidia-smi per poll (baseline)  : {smi['cpu_ms']:7.2f} ms CPU  {smi['wall_ms']:7.2f} ms wall"
        )
        gpu_nvml, gpu_smi = nvml["cpu_ms"] - none["cpu_ms"], smi["cpu_ms"] - none["cpu_ms"]
        print(
            f"  the GPU section alone           : NVML {gpu_nvml:.2f} ms CPU, nvidia-smi {gpu_smi:.2f} ms CPU"
            + (f" ({gpu_smi / gpu_nvml:.1f}x)" if gpu_nvml > 0 else "")
        )
        est = eight_gpus(args.polls * 5)
        if est:
            qm = est["questions_ms"]
            per_s = min(max(v or 0 for v in qm.values()) / est["gap_s"], est["share"] * 1e3)
            print(
                f"\n8-GPU host, estimated from 8 handles to GPU 0 (this process, {args.polls * 5} reads):"
            )
            print(
                f"  poll path (read() of 8 GPUs)    : {est['cpu_ms']:7.2f} ms CPU median (max {est['cpu_max_ms']:.2f})"
            )
            print(
                f"  sampler questions, one GPU      : PCIe TX+RX {qm['pcie'] or float('nan'):.2f} ms CPU, "
                f"per-process utilisation {qm['procs'] or float('nan'):.2f} ms CPU"
            )
            print(
                f"  sampler, by its spacing         : at most {per_s:.3f} ms CPU a second = "
                f"{per_s * DEFAULT_POLL_S:.2f} ms per {DEFAULT_POLL_S:g} s poll, whatever the GPU count"
            )
            total = est["cpu_ms"] + per_s * DEFAULT_POLL_S
            print(
                f"  GPU section per poll, 8 GPUs    : {total:.2f} ms CPU (budget 3 ms) against nvidia-smi's "
                f"{gpu_smi:.2f} ms for one"
            )
            print(f"  sampled here: pcie (tx, rx, at) = {est['pcie']}; procs = {est['procs']}")
    finally:
        holder.kill()
        holder.wait()


if __name__ == "__main__":
    main()
