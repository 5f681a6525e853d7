"""Soak `fleetdeck watch` as a service: a loopback fleet of real sshd hosts going down and up,
one hostile host, one slow webhook, an accelerated poll, for `--minutes` (10 at least for the
record).

The fleet: `--hosts` plain hosts, each with a run whose eval loss rises (an `overfitting` alert
that fires at start); every `--flap` seconds one of them is taken down (its sshd and every
session killed) and brought back a little later, so `host-down` fires and resolves over and
over. One hostile host sends what a host can: a run folder whose name holds undecodable bytes
and an escape sequence, a progress log with NaN, infinities and a 5000-digit loss. The webhook
answers every POST slowly (its head comes after `--webhook-delay` s, under the 5 s deadline);
the command hook appends each delivery to a file. Half way through, `watch` is killed with
SIGKILL and started again, as `Restart=on-failure` would.

Measured from outside the process: RSS and open file descriptors (from /proc), CPU time per
poll (utime + stime over `fleetdeck_watch_polls` from its own /metrics), the longest gap
between two polls (from `fleetdeck_last_poll_timestamp_seconds`, scraped every 0.2 s), and
deliveries per transition: each transition's id (in the webhook body and the hook's
`{id}`) must arrive exactly once at each sink.

    python benchmarks/watch_soak.py --minutes 10 --json benchmarks/results/watch-soak.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from sshfleet import SshdFleet  # noqa: E402

HOOK = "import sys\nopen(sys.argv[1], 'a').write(sys.argv[2] + '\\t' + sys.argv[3] + '\\n')\n"


class SlowHook(BaseHTTPRequestHandler):
    """A webhook that takes its time over every answer; it records each id it acknowledged."""

    delay = 1.5
    got: list[str] = []
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        time.sleep(self.delay)
        self.send_response(204)
        self.end_headers()
        with self.lock:
            SlowHook.got.append(body["id"])

    def log_message(self, *a) -> None:
        pass


def rising_evals(path: Path) -> None:
    lines = [{"step": s, "max_steps": 200, "loss": 3.0, "eval_loss": v, "time": time.time()}
             for s, v in ((25, 3.20), (50, 3.17), (75, 3.18), (100, 3.19))]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def hostile(root: Path) -> None:
    """What a hostile host can put in front of the probe."""
    bad = os.fsencode(str(root)) + b"/run-\xff\xfe\x1b[31mred\x07"
    os.makedirs(bad, exist_ok=True)
    lines = [b'{"step": 25, "max_steps": 200, "loss": NaN, "eval_loss": 3.2, "time": 1}',
             b'{"step": 50, "max_steps": 200, "loss": Infinity, "eval_loss": 3.3, "time": 2}',
             b'{"step": 75, "max_steps": 200, "loss": ' + b"9" * 5000 + b', "eval_loss": 3.4, "time": 3}',
             b'{"step": 100, "max_steps": 1e999, "loss": -Infinity, "eval_loss": 3.5, "time": 4}']
    with open(bad + b"/progress.jsonl", "wb") as f:
        f.write(b"\n".join(lines) + b"\n")


#: the hostile host's `python`: one start in four is the real interpreter, the others answer
#: whatever is asked with garbage bytes, one 4 MiB line, or JSON nested 100 000 levels deep
FAKE_PYTHON = """\
import os, sys, time
count = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "starts")
try:
    n = int(open(count).read() or 0)
except (OSError, ValueError):
    n = 1
open(count, "w").write(str(n + 1))
mode = n % 4
if mode == 0:
    os.execv(REAL, [REAL, *sys.argv[1:]])
answer = {1: b"\\xff\\xfe\\x1b[2J garbage {{{ not json \\x00\\n",
          2: b'{"gpus": "' + b"A" * (4 << 20) + b'"}\\n',
          3: b'{"gpus": ' + b"[" * 100000 + b"]" * 100000 + b"}\\n"}[mode]
out = sys.stdout.buffer
try:
    out.write(answer)
    out.flush()
    while sys.stdin.buffer.read(65536):
        out.write(answer)
        out.flush()
except (BrokenPipeError, OSError):
    pass
"""


def fake_python(where: Path) -> Path:
    """A `python` for the hostile host (see FAKE_PYTHON)."""
    where.mkdir(parents=True, exist_ok=True)
    path = where / "python3"
    path.write_text(f"#!{sys.executable}\nREAL = {sys.executable!r}\n" + FAKE_PYTHON)
    path.chmod(0o755)
    return path


def state_figures(state: Path) -> dict[str, int]:
    """Sizes in bytes of the watch's state files, and the history's row counts."""
    d = state / "fleetdeck"
    out: dict[str, int] = {}
    for key, name in (("alerts_json", "alerts.json"), ("outbox", "outbox.jsonl"), ("history_db", "history.sqlite3"),
                      ("history_wal", "history.sqlite3-wal")):
        try:
            out[key] = (d / name).stat().st_size
        except OSError:
            out[key] = 0
    q = d / "quarantine"
    out["quarantine"] = sum(p.stat().st_size for p in q.rglob("*") if p.is_file()) if q.exists() else 0
    out["state_folder"] = sum(p.stat().st_size for p in state.rglob("*") if p.is_file()) if state.exists() else 0
    db = d / "history.sqlite3"
    if db.exists():
        import sqlite3
        try:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=2)
            try:
                for t in ("samples", "samples_10m", "events"):
                    out[f"rows_{t}"] = con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            finally:
                con.close()
        except sqlite3.Error:
            pass
    return out


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y) points; 0 for fewer than two."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0


#: what each sample measures, and how much growth after the warm-up still counts as flat over
#: the rest of the run: RSS 8 MiB, 2 descriptors, 64 KiB of alerts.json, 1 MiB of outbox (the
#: journal is compacted as it goes), the history's files and rows (bounded by design: minute rows
#: for raw_hours, ten-minute rows for the retention; flat only once both windows are full)
FLAT = {"rss": 8 << 20, "fds": 2, "alerts_json": 64 << 10, "outbox": 1 << 20, "quarantine": 0,
        "history_db": 4 << 20, "rows_samples": 2000, "rows_samples_10m": 500, "rows_events": 500}


def verdict(rows: list[dict], warmup: float, unit: float, unit_name: str) -> dict:
    """First `unit` of the run after `warmup` against the last `unit`, and the least-squares
    slope per `unit` of each figure over everything after `warmup`; flat when that slope over
    the span after the warm-up stays within FLAT."""
    if not rows:
        return {}
    end = rows[-1]["t"]
    after = [r for r in rows if r["t"] >= warmup] or rows[-1:]
    first = [r for r in after if r["t"] < after[0]["t"] + unit] or after[:1]
    last = [r for r in rows if r["t"] > end - unit] or rows[-1:]
    span = (end - after[0]["t"]) / unit
    out: dict = {"span": round(end / unit, 2), "unit": unit_name, "warmup": round(warmup / unit, 2), "figures": {}}
    flat = True
    for key, tol in FLAT.items():
        pts = [(r["t"] / unit, r[key]) for r in after if key in r]
        if not pts:
            continue
        k = slope(pts)
        ok = k * span <= tol
        flat = flat and ok
        out["figures"][key] = {
            "first": max(r.get(key, 0) for r in first), "last": max(r.get(key, 0) for r in last),
            "max": max(v for _, v in pts), f"slope_per_{unit_name}": round(k, 2), "flat": ok}
    out["flat"] = flat
    return out


def print_verdict(v: dict) -> None:
    if not v:
        print("soak: no samples")
        return
    u = v["unit"]
    print(f"soak: {v['span']} {u}s; after the first {v['warmup']} {u}(s): first {u} (max) / last {u} (max) / "
          f"slope per {u} over the rest / flat")
    for key, f in v["figures"].items():
        print(f"  {key:18} {f['first']:>12} {f['last']:>12} {f[f'slope_per_{u}']:>12} {'flat' if f['flat'] else 'GROWS'}")
    print(f"soak: verdict: {'flat' if v['flat'] else 'NOT FLAT'} after the first {v['warmup']} {u}(s)", flush=True)


def proc_figures(pid: int) -> tuple[int, int, float]:
    """(RSS bytes, open fds, CPU seconds) of `pid`."""
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    stat = Path(f"/proc/{pid}/stat").read_text()
    rest = stat[stat.rindex(")") + 2:].split()
    cpu = (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")
    return rss, fds, cpu


def scrape(url: str) -> dict[str, float]:
    text = urllib.request.urlopen(url, timeout=2).read().decode()
    out = {}
    for name in ("fleetdeck_watch_polls", "fleetdeck_last_poll_timestamp_seconds"):
        m = re.search(rf"^{name} (\S+)$", text, re.M)
        if m:
            out[name] = float(m.group(1))
    return out


class Watch:
    """One `fleetdeck watch` process and what it prints."""

    def __init__(self, fleet_file: Path, env: dict[str, str], interval: float, log: Path) -> None:
        self.log = log.open("a")
        self.proc = subprocess.Popen([sys.executable, "-m", "fleetdeck.cli.main", "--hosts", str(fleet_file), "watch",
                                      "--interval", str(interval), "--prometheus", "127.0.0.1:0"],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, env=env)
        line = self.proc.stdout.readline()
        m = re.search(r"metrics on (\S+)", line)
        if not m:
            raise SystemExit(f"watch did not start: {line!r}")
        self.url = m.group(1)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            self.log.write(line)
            self.log.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--hosts", type=int, default=4, help="plain hosts (plus one hostile host)")
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between polls")
    ap.add_argument("--flap", type=float, default=20.0, help="seconds between one host going down and the next")
    ap.add_argument("--webhook-delay", type=float, default=1.5)
    ap.add_argument("--webhook-timeout", type=float, default=5.0)
    ap.add_argument("--no-restart", action="store_true", help="do not kill and restart watch half way")
    ap.add_argument("--sample-every", type=float, default=30.0, help="seconds between two samples")
    ap.add_argument("--samples", help="append each sample here as one JSON line, as it is taken")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()

    base = Path(tempfile.mkdtemp(prefix="watch-soak-", dir="/var/tmp"))
    env = {**os.environ, "XDG_STATE_HOME": str(base / "state"), "XDG_CONFIG_HOME": str(base / "config")}
    env.pop("FLEETDECK_HOSTS", None)
    fleet = SshdFleet(base / "fleet")
    names = [f"h{i}" for i in range(1, args.hosts + 1)]
    for n in [*names, "hostile"]:
        h = fleet.add(n)
        (h.runs / "run-1").mkdir(exist_ok=True)
        rising_evals(h.runs / "run-1" / "progress.jsonl")
    hostile(fleet.hosts["hostile"].runs)
    bad_python = fake_python(base / "hostile-bin")

    SlowHook.delay = args.webhook_delay
    web = ThreadingHTTPServer(("127.0.0.1", 0), SlowHook)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    hook, hook_log = base / "hook.py", base / "hook.log"
    hook.write_text(HOOK)
    fleet_file = base / "hosts.toml"
    fleet_file.write_text(fleet.fleet_toml(defaults={"connect_timeout": 2, "command_timeout": 5},
                                                   per_host={"hostile": {"python": str(bad_python)}}) + "\n".join([
        "[alerts]", "host_down_after = 2",
        # the disk-rate window keeps every sample of its span in memory (3600 a root at a 0.5 s
        # poll and the default 1800 s): a short one fills within the warm-up, so what RSS does
        # after it is the rest of the process
        "disk_rate_window = 60", "disk_rate_min_span = 30",
        # the loopback hosts are this one machine: its crontab and loops are not the soak's
        'disabled = ["new-stray"]',
        f"on_alert = {json.dumps([sys.executable, str(hook), str(hook_log), '{id}', '{state}'])}",
        f'webhook = "http://127.0.0.1:{web.server_address[1]}/hook"', f"webhook_timeout = {args.webhook_timeout}", ""]))

    print(f"soak: {args.hosts} hosts + 1 hostile, poll every {args.interval}s, {args.minutes} min, in {base}",
          flush=True)
    watch = Watch(fleet_file, env, args.interval, base / "watch.log")
    t0 = time.monotonic()
    end = t0 + args.minutes * 60
    samples: list[tuple[float, int, int, float, float]] = []   # (t, rss, fds, cpu, polls)
    states: list[dict[str, int]] = []
    rows: list[dict] = []
    gaps: list[float] = []
    longest_at = 0.0
    last_poll: float | None = None
    down: tuple[str, float] | None = None
    next_flap = t0 + args.flap
    flaps = 0
    restarted = args.no_restart
    cpu_before_restart = polls_before_restart = 0.0
    next_sample = t0
    sample_file = open(args.samples, "a") if args.samples else None
    scrape_every = max(0.2, min(1.0, args.interval / 10))
    while time.monotonic() < end:
        now = time.monotonic()
        if down is None and now >= next_flap:
            victim = [*names, "hostile"][flaps % (len(names) + 1)]   # its helper starts again
            fleet.kill(victim)
            down = (victim, now + args.flap / 2)
            flaps += 1
        elif down is not None and now >= down[1]:
            fleet.start(down[0])
            down, next_flap = None, now + args.flap / 2
        if not restarted and now >= t0 + args.minutes * 30:
            _, _, cpu = proc_figures(watch.proc.pid)
            m = scrape(watch.url)
            cpu_before_restart += cpu
            polls_before_restart += m.get("fleetdeck_watch_polls", 0)
            watch.proc.send_signal(signal.SIGKILL)
            watch.proc.wait()
            old_lines = watch.lines
            watch = Watch(fleet_file, env, args.interval, base / "watch.log")
            watch.lines[:0] = old_lines
            restarted, last_poll = True, None
            print("soak: watch killed with SIGKILL and started again", flush=True)
        try:
            m = scrape(watch.url)
        except OSError:
            m = {}
        t = m.get("fleetdeck_last_poll_timestamp_seconds")
        if t is not None and t != last_poll:
            if last_poll is not None:
                gaps.append(t - last_poll)
                if gaps[-1] == max(gaps):
                    longest_at = now - t0
            last_poll = t
        if now >= next_sample:
            rss, fds, cpu = proc_figures(watch.proc.pid)
            samples.append((now - t0, rss, fds, cpu + cpu_before_restart,
                            m.get("fleetdeck_watch_polls", 0) + polls_before_restart))
            files = state_figures(base / "state")
            states.append(files)
            n_trans = sum(1 for x in watch.lines if ' ALERT ' in x or ' RESOLVED ' in x)
            print(f"soak: {now - t0:6.0f}s rss {rss / 2**20:.1f} MiB fds {fds} polls "
                  f"{samples[-1][4]:.0f} transitions {n_trans} alerts.json {files['alerts_json']} "
                  f"outbox {files['outbox']} history {files['history_db'] + files['history_wal']} B "
                  f"rows {files.get('rows_samples', 0)}+{files.get('rows_samples_10m', 0)}",
                  flush=True)
            rows.append({"t": round(now - t0, 1), "wall": round(time.time()), "rss": rss, "fds": fds,
                         "cpu_s": round(samples[-1][3], 2), "polls": samples[-1][4], "transitions": n_trans, **files})
            if sample_file is not None:
                sample_file.write(json.dumps(rows[-1]) + "\n")
                sample_file.flush()
            next_sample = now + args.sample_every
        time.sleep(scrape_every)
    if down is not None:
        fleet.start(down[0])
    time.sleep(args.webhook_delay + 6)   # the last deliveries land
    watch.proc.send_signal(signal.SIGTERM)
    t_stop = time.monotonic()
    rc = watch.proc.wait(30)
    stop_s = time.monotonic() - t_stop
    web.shutdown()
    fleet.stop_all()

    transitions = [x for x in watch.lines if re.match(r"\S+ (ALERT|RESOLVED) ", x)]
    hook_ids = Counter(line.split("\t")[0] for line in hook_log.read_text().splitlines()) if hook_log.exists() else Counter()
    web_ids = Counter(SlowHook.got)
    warnings = [x for x in watch.lines if x.startswith("warning:")]
    tracebacks = (base / "watch.log").read_text(errors="replace").count("Traceback")
    after_warmup = [s for s in samples if s[0] >= 60] or samples
    cpu_polls = samples[-1][4] - after_warmup[0][4]
    fig = {
        "minutes": args.minutes, "hosts": args.hosts + 1, "interval_s": args.interval, "flaps": flaps,
        "polls": samples[-1][4],
        "rss_mib_first": round(after_warmup[0][1] / 2**20, 1), "rss_mib_last": round(samples[-1][1] / 2**20, 1),
        "rss_mib_max": round(max(s[1] for s in after_warmup) / 2**20, 1),
        "fds_first": after_warmup[0][2], "fds_last": samples[-1][2], "fds_max": max(s[2] for s in after_warmup),
        "cpu_ms_per_poll": round(1000 * (samples[-1][3] - after_warmup[0][3]) / cpu_polls, 2) if cpu_polls else None,
        "longest_gap_between_polls_s": round(max(gaps), 2) if gaps else None,
        "longest_gap_at_s": round(longest_at),
        "median_gap_s": round(sorted(gaps)[len(gaps) // 2], 2) if gaps else None,
        "transitions_printed": len(transitions),
        "transition_ids_command": len(hook_ids), "transition_ids_webhook": len(web_ids),
        "deliveries_per_transition_command": sorted(set(hook_ids.values())),
        "deliveries_per_transition_webhook": sorted(set(web_ids.values())),
        "ids_only_one_sink": len(set(hook_ids) ^ set(web_ids)),
        "warnings": len(warnings), "distinct_warnings": len({re.sub(r"[0-9a-f]{24}|\d+", "#", w) for w in warnings}),
        "tracebacks": tracebacks,
        "state_folder_kib": round(sum(p.stat().st_size for p in (base / "state").rglob("*") if p.is_file()) / 1024), "restarted_with_sigkill": not args.no_restart,
        "sigterm_exit": rc, "sigterm_stop_s": round(stop_s, 2),
        "samples": [{"t": round(s[0]), "rss_mib": round(s[1] / 2**20, 1), "fds": s[2], "polls": s[4]} for s in samples],
    }
    unit = min(3600.0, max(60.0, args.minutes * 60 / 4))
    fig["verdict"] = verdict(rows, unit, unit, "hour" if unit == 3600 else f"{unit:.0f}s")
    print(json.dumps({k: v for k, v in fig.items() if k not in ("samples", "verdict")}, indent=1))
    print_verdict(fig["verdict"])
    if args.json:
        Path(args.json).write_text(json.dumps(fig, indent=1) + "\n")


if __name__ == "__main__":
    main()
