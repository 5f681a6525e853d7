"""What checking a poll's other sections costs the controller, against parsing them.

Builds the `disks`, `processes`, `schedules` and `runs` sections of an answer as the probe
sends them (`--items` processes and schedules, a fifth as many disks, a quarter as many runs,
each run with 5 checkpoints and 50 points of loss), then times in this process, `--rounds`
rounds of `--loops` calls each, in CPU time, for each section:

- baseline: `json.loads` of the section's text, which every answer costs already;
- the check: `validate.check_section(host, section, value)`, every field of every item.

Prints the medians in microseconds a call and the ratio. It reads only `check_section`, so the
same script measures an older tree (`PYTHONPATH` pointing at it) for a before and after:

    python benchmarks/record_check.py --items 40 --rounds 7 --loops 300
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

from fleetdeck.backend.fleet.validate import check_section


def sections(n: int) -> dict[str, list[dict]]:
    """The sections, shaped as backend/host/probe/wire.py declares their records."""
    run = {
        "state": "running",
        "pid": 5,
        "step": 100,
        "max_steps": 1000,
        "loss": 1.0,
        "eval_loss": 1.1,
        "losses": [[s, 1.0] for s in range(50)],
        "eval_losses": [],
        "seconds_per_step": 0.5,
        "last_seconds_per_step": 0.5,
        "step_times": 20,
        "eta_seconds": 450.0,
        "adapter": None,
        "reason": None,
        "last_update": 1.7e9,
    }
    return {
        "disks": [
            {
                "path": f"/d{i}",
                "mount": "/",
                "fstype": "ext4",
                "total_bytes": 10**12,
                "used_bytes": 10**11,
                "free_bytes": 9 * 10**11,
                "error": None,
            }
            for i in range(max(1, n // 5))
        ],
        "processes": [
            {
                "pid": 100 + i,
                "start": 12345 + i,
                "ppid": 1,
                "user": "ml",
                "cpu_pct": 1.5,
                "rss_bytes": 10**8,
                "gpu_mib": None,
                "why": ["cpu"],
                "command": "python train.py --config run.toml",
            }
            for i in range(n)
        ],
        "schedules": [
            {
                "id": f"c-{i:032x}",
                "kind": "crontab",
                "user": "ml",
                "spec": "*/5 * * * *",
                "command": "/usr/bin/true",
                "source": "crontab -l",
                "next_run": "2031-01-01T00:00:00+00:00",
                "pid": None,
                "active": True,
                "start_time": None,
                "reasons": [],
                "raw": "*/5 * * * * /usr/bin/true",
                "line": i + 1,
            }
            for i in range(n)
        ],
        "runs": [
            dict(
                run,
                path=f"/r/run{i}",
                name=f"run{i}",
                checkpoints=[
                    {
                        "path": f"/r/run{i}/checkpoint-{k}",
                        "step": k,
                        "bytes": 10**9,
                        "problem": None,
                        "complete": True,
                    }
                    for k in range(5)
                ],
            )
            for i in range(max(1, n // 4))
        ],
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
    ap.add_argument("--items", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--loops", type=int, default=300)
    args = ap.parse_args(argv)
    for name, value in sections(args.items).items():
        text = json.dumps(value)
        items, warnings = check_section("h", name, value)
        assert len(items) == len(value) and not warnings, warnings
        parse = median_us(lambda: json.loads(text), args.rounds, args.loops)  # noqa: B023
        check = median_us(lambda: check_section("h", name, value), args.rounds, args.loops)  # noqa: B023
        print(
            f"{name:10} {len(value):3} items, {len(text):6} bytes: json.loads {parse:6.1f} us, "
            f"check_section {check:6.1f} us, check / parse {check / parse:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
