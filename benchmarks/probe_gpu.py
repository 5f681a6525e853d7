"""The probe on a real GPU: its figures next to nvidia-smi's, and its own cost per poll.

Run on a machine with an NVIDIA GPU, its driver and torch with CUDA:

    python benchmarks/probe_gpu.py [--gib 10] [--polls 20]

A torch process allocates --gib GiB on GPU 0 and holds it. The probe (backend/host/probe/main.py, run as a
resident subprocess exactly as the poller runs it, bundled) is asked through NVML and, forced with
FLEETDECK_PROBE_GPU=nvidia-smi, through nvidia-smi; both answers are printed beside what
nvidia-smi itself says. Then the cost of a poll: median probe CPU and wall time over --polls
polls, resident NVML against an nvidia-smi subprocess per poll (the baseline). Exits 1 with one
sentence when there is no GPU, no torch with CUDA, or no nvidia-smi.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _probe_file() -> Path:
    """The probe as hosts receive it: its bundle (built here, or given as --probe-file where
    fleetdeck is not installed, e.g. `python -m fleetdeck.backend.fleet.bundle fleetdeck.backend.host.probe.main`)."""
    if "--probe-file" in sys.argv:
        return Path(sys.argv[sys.argv.index("--probe-file") + 1])
    import tempfile

    from fleetdeck.backend.fleet.bundle import bundle

    f = tempfile.NamedTemporaryFile("w", suffix=".py", delete=False)
    f.write(bundle("fleetdeck.backend.host.probe.main"))
    f.close()
    return Path(f.name)


PROBE = _probe_file()
HOLDER = """
import sys, time, torch
x = torch.empty(int(float(sys.argv[1]) * 2**30), dtype=torch.uint8, device="cuda:0")
x.fill_(1)
torch.cuda.synchronize()
print("ready", torch.cuda.get_device_name(0), flush=True)
time.sleep(3600)
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
    p = subprocess.run([sys.executable, "-c", "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 3)"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        why = "torch sees no CUDA device" if p.returncode == 3 else (p.stderr.strip().splitlines() or ["?"])[-1]
        fail(f"needs torch with CUDA in {sys.executable}: {why}")


def smi_truth(pid: int) -> dict:
    """What nvidia-smi says: per GPU used/total MiB, and the holder's own MiB."""
    q = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu",
                        "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True).stdout
    a = subprocess.run(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory",
                        "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True).stdout
    gpus = [[c.strip() for c in line.split(",")] for line in q.strip().splitlines()]
    apps = [[c.strip() for c in line.split(",")] for line in a.strip().splitlines()]
    mine = [x for x in apps if len(x) == 3 and x[1] == str(pid)]
    return {"gpus": gpus, "holder": mine}


class Resident:
    """The probe as the poller runs it: one process, a JSON line in, a JSON line out."""

    def __init__(self, mode: str) -> None:
        env = dict(os.environ, FLEETDECK_PROBE_GPU=mode)
        self.p = subprocess.Popen([sys.executable, str(PROBE), "--resident"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=env)

    def poll(self) -> tuple[dict, float]:
        t = time.perf_counter()
        self.p.stdin.write(json.dumps({"op": "snapshot", "runs": [], "disk_paths": [], "stall_factor": 10}) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            fail("the probe exited without answering")
        return json.loads(line), time.perf_counter() - t

    def close(self) -> None:
        self.p.stdin.close()
        self.p.wait(10)


def cost(mode: str, polls: int) -> dict:
    r = Resident(mode)
    try:
        first, _ = r.poll()   # start-up (and NVML init) is paid once, not per poll
        cpu, wall = [], []
        prev = first
        for _ in range(polls):
            rep, dt = r.poll()
            cpu.append((rep["probe_cpu_s"] - prev["probe_cpu_s"]) +
                       (rep["probe_children_cpu_s"] - prev["probe_children_cpu_s"]))
            wall.append(dt)
            prev = rep
        return {"source": prev["gpu_source"], "cpu_ms": statistics.median(cpu) * 1e3,
                "wall_ms": statistics.median(wall) * 1e3, "reply": prev}
    finally:
        r.close()


def show(label: str, rep: dict, pid: int) -> None:
    print(f"  probe via {label:<11} (gpu_source={rep['gpu_source']}):")
    for g in rep["gpus"]:
        mine = [p for p in g["processes"] if p["pid"] == pid]
        # in a container NVML may report host pids: then list what it saw
        held = (f"{mine[0]['used_mib']:.0f} MiB held by pid {pid} ({mine[0]['user']})" if mine else
                "processes: " + ", ".join(f"pid {p['pid']} {p['used_mib']:.0f} MiB" for p in g["processes"]))
        print(f"    GPU{g['index']} {g['name']}: used {g['memory_used_mib']:.0f} / {g['memory_total_mib']:.0f} MiB, "
              f"util {g['utilization_pct']}%, unified={g['unified_memory']}; {held}")
    for w in rep["warnings"]:
        print(f"    warning: {w}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", type=float, default=10.0, help="GiB the torch process holds on GPU 0")
    ap.add_argument("--polls", type=int, default=20)
    ap.add_argument("--probe-file", help="the bundled probe, where fleetdeck is not installed")
    args = ap.parse_args()
    preflight()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(args.gib)], stdout=subprocess.PIPE, text=True)
    try:
        ready = holder.stdout.readline()
        if not ready.startswith("ready"):
            fail(f"the torch process could not hold {args.gib:g} GiB (exit {holder.wait()})")
        print(f"torch pid {holder.pid} holds {args.gib:g} GiB = {args.gib * 1024:.0f} MiB on {ready.split(' ', 1)[1].strip()}"
              " (plus its CUDA context)")
        truth = smi_truth(holder.pid)
        print("  nvidia-smi itself:")
        for idx, uuid, name, total, used, util in truth["gpus"]:
            mine = [x for x in truth["holder"] if x[0] == uuid]
            held = f"{mine[0][2]} MiB held by pid {holder.pid}" if mine else "-"
            print(f"    GPU{idx} {name}: used {used} / {total} MiB, util {util}%; {held}")
        nvml = cost("nvml", args.polls)
        smi = cost("nvidia-smi", args.polls)
        show("NVML", nvml["reply"], holder.pid)
        show("nvidia-smi", smi["reply"], holder.pid)
        print(f"\ncost per poll, median of {args.polls} (probe CPU incl. its children; wall = request to reply):")
        print(f"  resident NVML (probe)        : {nvml['cpu_ms']:7.2f} ms CPU  {nvml['wall_ms']:7.2f} ms wall")
        print(f"  nvidia-smi per poll (baseline): {smi['cpu_ms']:7.2f} ms CPU  {smi['wall_ms']:7.2f} ms wall")
        print(f"  the GPU query alone (difference): {smi['cpu_ms'] - nvml['cpu_ms']:7.2f} ms CPU  "
              f"{smi['wall_ms'] - nvml['wall_ms']:7.2f} ms wall more per poll through nvidia-smi")
        if nvml["cpu_ms"] > 0 and nvml["wall_ms"] > 0:
            print(f"  baseline / probe             : {smi['cpu_ms'] / nvml['cpu_ms']:7.1f}x CPU  "
                  f"{smi['wall_ms'] / nvml['wall_ms']:7.1f}x wall")
        if nvml["source"] != "nvml":
            print("  note: NVML was not used (libnvidia-ml.so.1 not loadable?); see the warnings above")
    finally:
        holder.kill()
        holder.wait()


if __name__ == "__main__":
    main()
