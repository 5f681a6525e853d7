"""What checking a poll's GPU section costs the controller, against parsing it.

Builds the `gpus` section of an answer with `--cards` cards as the NVML path sends them (every
health figure, a process, an Xid), then times in this process, `--rounds` rounds of `--loops`
calls each, in CPU time:

- baseline: `json.loads` of the section's text, which every answer costs already;
- the check: `validate.check_section(host, "gpus", section)`, every figure of every card.

Prints the medians in microseconds a call and the ratio. It reads only `check_section`, so the
same script measures an older tree (`PYTHONPATH` pointing at it) for a before and after:

    python benchmarks/gpu_check.py --cards 8 --rounds 7 --loops 2000
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

from fleetdeck.backend.fleet.validate import check_section


def card(i: int) -> dict:
    """One card as the probe's NVML path answers it (backend/host/probe/wire.py, GpuRecord)."""
    return {
        "index": i,
        "name": "NVIDIA H200",
        "uuid": f"GPU-{i:04d}",
        "unified_memory": False,
        "memory_total_mib": 143771.0,
        "memory_used_mib": 9792.0,
        "utilization_pct": 42,
        "processes": [
            {
                "pid": 1000 + i,
                "user": "ml",
                "used_mib": 10240.0,
                "command": "python train.py",
                "sm_pct": 40,
                "memory_util_pct": 7,
            }
        ],
        "memory_util_pct": 7,
        "temperature_c": 61,
        "temperature_slowdown_c": 89,
        "temperature_shutdown_c": 95,
        "power_w": 350.1,
        "power_limit_w": 700.0,
        "sm_clock_mhz": 1755,
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
            "tx_bytes_s": 1.5e9,
            "rx_bytes_s": 2e8,
            "sampled_at": 1.7e9,
        },
        "ecc": {
            "mode": "enabled",
            "corrected": 3,
            "uncorrected": 0,
            "corrected_aggregate": 7,
            "uncorrected_aggregate": 0,
            "pending_retirement": False,
            "remapped_correctable": 0,
            "remapped_uncorrectable": 0,
            "remap_failure": False,
        },
        "persistence_mode": True,
        "compute_mode": "default",
        "mig_mode": False,
        "xid": [{"time": 1.7e9, "code": 79}],
    }


def median_us(fn: Callable[[], object], rounds: int, loops: int) -> float:
    """The median over `rounds` of the CPU microseconds one call of `fn` takes."""
    times = []
    for _ in range(rounds):
        t0 = time.process_time()
        for _ in range(loops):
            fn()
        times.append((time.process_time() - t0) / loops * 1e6)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cards", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--loops", type=int, default=2000)
    args = ap.parse_args(argv)
    section = [card(i) for i in range(args.cards)]
    text = json.dumps(section)
    gpus, warnings = check_section("h", "gpus", section)
    assert len(gpus) == args.cards and not warnings, warnings
    parse = median_us(lambda: json.loads(text), args.rounds, args.loops)
    check = median_us(lambda: check_section("h", "gpus", section), args.rounds, args.loops)
    print(f"section: {args.cards} cards, {len(text)} bytes of JSON")
    print(f"baseline json.loads: {parse:.1f} us (median of {args.rounds})")
    print(f"check_section:       {check:.1f} us (median of {args.rounds})")
    print(f"check / parse: {check / parse:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
