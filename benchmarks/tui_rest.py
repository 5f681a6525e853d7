"""The dashboard at rest: what `fleetdeck` costs while nothing happens on the fleet, over a long
window, beside the least a Textual screen of that size costs in the same window.

Starts --hosts loopback sshd hosts (tests/support's test fleet), each with one finished run,
and, at the same moment, two programs in their own tmux windows (--cols x --rows):

- the dashboard: `fleetdeck --hosts FILE` polling every host each --interval seconds (its own
  state folder, so its history and audit are written as an operator's are);
- the baseline: a bare Textual app holding a DataTable of the same number of rows, whose timer
  sets every cell to the value it already holds each --interval seconds (Textual's own floor
  for a table of that size at that rate, no polling).

Every --sample seconds it reads each process's CPU (utime + stime of /proc/PID/stat) and RSS
(VmRSS). After --warmup seconds it prints, for each: % of one core over the window, RSS at the
start and end of the window and its slope (least squares, KiB a minute); then the ratio of the
dashboard's CPU to the baseline's, the load average over the run, and the screen's last lines
(the dashboard must show every host answering, or the figures mean nothing). `PYTHONPATH`, when
set, is passed to both windows: two builds compared side by side in the same minutes, each on a
`PYTHONPATH` holding its tree as `fleetdeck`.

    python benchmarks/tui_rest.py --hosts 12 --minutes 30 --interval 1
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from fleetdeck.backend.host.lib import procfs  # noqa: E402

from support.sshfleet import SshdFleet  # noqa: E402

BASELINE = """
import sys
from textual.app import App
from textual.widgets import DataTable, Footer, Header

ROWS, COLS, EVERY = int(sys.argv[1]), 10, float(sys.argv[2])


class Bare(App):
    def compose(self):
        yield Header()
        yield DataTable()
        yield Footer()

    def on_mount(self):
        t = self.query_one(DataTable)
        self.cols = t.add_columns(*(f"col {i}" for i in range(COLS)))
        self.rows = [t.add_row(*(f"cell {r}.{c}" for c in range(COLS))) for r in range(ROWS)]
        self.set_interval(EVERY, self.tick)

    def tick(self):
        t = self.query_one(DataTable)
        for r, row in enumerate(self.rows):
            for c, col in enumerate(self.cols):
                t.update_cell(row, col, f"cell {r}.{c}")


Bare().run()
"""


def cpu_rss(pid: int) -> tuple[float, int]:
    """(CPU seconds so far, RSS in KiB) of `pid`, from /proc/PID/stat (the host library's)."""
    ticks, pages, _, _ = procfs.usage(pid)
    return ticks / os.sysconf("SC_CLK_TCK"), pages * os.sysconf("SC_PAGE_SIZE") // 1024


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (t, y) (the standard library's); 0 for fewer than two."""
    if len(points) < 2 or len({t for t, _ in points}) < 2:
        return 0.0
    return statistics.linear_regression([t for t, _ in points], [y for _, y in points]).slope


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True).stdout


def start(session: str, command: str, cols: int, rows: int, env: dict[str, str]) -> int:
    """Run `command` alone in a new detached tmux session; the pid of the program itself."""
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    tmux(
        "new-session", "-d", "-s", session, "-x", str(cols), "-y", str(rows),
        f"exec env {exports} {command}",
    )  # fmt: skip
    return int(tmux("list-panes", "-t", session, "-F", "#{pane_pid}").split()[0])


def summary(samples: list[tuple[float, float, int]], warmup: float) -> dict:
    t0 = samples[0][0]
    window = [s for s in samples if s[0] - t0 >= warmup]
    (ta, ca, ra), (tb, cb, rb) = window[0], window[-1]
    return {
        "core_pct": round(100 * (cb - ca) / (tb - ta), 3),
        "rss_kib_start": ra,
        "rss_kib_end": rb,
        "rss_slope_kib_per_min": round(slope([(t / 60, r) for t, _, r in window]), 2),
        "window_s": round(tb - ta, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=12)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--interval", type=float, default=1.0, help="the fleet's poll_interval")
    ap.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--warmup", type=float, default=60.0, help="seconds left out at the start")
    ap.add_argument("--cols", type=int, default=160)
    ap.add_argument("--rows", type=int, default=48)
    ap.add_argument("--json", help="write the figures here too")
    a = ap.parse_args()
    if shutil.which("tmux") is None or shutil.which("fleetdeck") is None:
        print("needs tmux and the fleetdeck command (pip install -e .)", file=sys.stderr)
        return 2
    tag = f"fdrest{os.getpid()}"
    with tempfile.TemporaryDirectory() as d:
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
            env = {"XDG_STATE_HOME": str(Path(d) / "state"), "TERM": "xterm-256color"}
            if os.environ.get("PYTHONPATH"):  # another build's tree, as `fleetdeck`
                env["PYTHONPATH"] = os.environ["PYTHONPATH"]
            pids = {
                "dashboard": start(
                    f"{tag}a", f"fleetdeck --hosts {shlex.quote(str(hosts))}", a.cols, a.rows, env
                ),
                "baseline": start(
                    f"{tag}b",
                    f"{shlex.quote(sys.executable)} -c {shlex.quote(BASELINE)} {a.hosts} "
                    f"{a.interval}",
                    a.cols,
                    a.rows,
                    env,
                ),
            }
            load0 = os.getloadavg()[0]
            samples: dict[str, list[tuple[float, float, int]]] = {k: [] for k in pids}
            end = time.monotonic() + a.minutes * 60
            while time.monotonic() < end:
                now = time.monotonic()
                for k, pid in pids.items():
                    samples[k].append((now, *cpu_rss(pid)))
                time.sleep(a.sample)
            screen = tmux("capture-pane", "-p", "-t", f"{tag}a")
            out = {k: summary(v, a.warmup) for k, v in samples.items()}
            out["ratio_cpu"] = round(
                out["dashboard"]["core_pct"] / max(out["baseline"]["core_pct"], 1e-9), 2
            )
            out["load"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
            out["hosts"], out["interval"], out["minutes"] = a.hosts, a.interval, a.minutes
        finally:
            for s in (f"{tag}a", f"{tag}b"):
                subprocess.run(["tmux", "kill-session", "-t", s], capture_output=True)
            sf.stop_all()
    for k in ("dashboard", "baseline"):
        f = out[k]
        print(
            f"{k:9}  {f['core_pct']:6.2f}% of a core   RSS {f['rss_kib_start'] / 1024:.1f} -> "
            f"{f['rss_kib_end'] / 1024:.1f} MiB, slope {f['rss_slope_kib_per_min']:+.1f} KiB/min "
            f"over {f['window_s']:.0f} s"
        )
    print(f"ratio (dashboard / bare Textual table): {out['ratio_cpu']}x; load {out['load']}")
    print("the dashboard's screen at the end:")
    print("\n".join(line.rstrip() for line in screen.splitlines()[:20]))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
