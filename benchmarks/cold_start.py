"""Cold start: a fresh `fleetdeck status` against plain OpenSSH clients running the same probe.

Starts loopback sshd hosts sharing this machine's CPU, writes the probe's payload to one file
(`python -m fleetdeck.backend.fleet.link.bundle fleetdeck.backend.host.probe.main`), and times, in the same run:

  baseline   N OpenSSH `ssh` clients in parallel, each running `python3 probe.py REQUEST` on its
             host (the file already there: no transfer, its bytecode compiled every time, as
             Python does for a script); with `--installed` also `python3 -m
             fleetdeck.backend.host.probe.main REQUEST` (the package installed on the host, its bytecode on
             disk: what no agentless tool can beat)
  status     a new `fleetdeck status --json` process polling the N hosts: the host payload cache
             empty (first contact), then warm (every later command), and with
             `payload_cache = false` in the fleet file
  paint      the dashboard, headless, from its start to the first frame showing every host up
  reconnect  a poll whose connections and probes were all dropped just before (a host restart)
  host CPU   what one start of the probe costs the host in CPU, answering a ping and a first
             snapshot: from the cache, sent whole (compressed, not kept), and as the bundle
             source BOOT ran before the cache (compiled on every start); `python3 -c pass` for scale

The arms take turns round after round; each figure is the median of `--runs` rounds, and each
ratio the median of a round's time over the OpenSSH clients' time in that same round. With
`--legacy` the status, reconnect and paint arms also run the way before the cache (the bundle's
source through BOOT, compiled on every start: `LEGACY`) in the same rounds, so before and
after meet the same baseline. Reconnect and paint run in a process of their own each time,
timed inside it (its own start-up not counted).

    python benchmarks/cold_start.py --hosts 1,12 --runs 5 --legacy --installed
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fleetdeck.backend.fleet.config import load_fleet  # noqa: E402
from fleetdeck.backend.fleet.link.bundle import bundle  # noqa: E402
from fleetdeck.backend.fleet.poller import Poller, probe_request  # noqa: E402

from support.sshfleet import SshdFleet  # noqa: E402

FLEETDECK = [sys.executable, "-m", "fleetdeck.cli.main"]
PROBE = "fleetdeck.backend.host.probe.main"


def openssh_clients(sf: SshdFleet, names: list[str], probe_file: Path | None, fleet) -> None:
    """N `ssh` clients at once, each running the probe file on its host (None: the installed
    module, `python3 -m fleetdeck.backend.host.probe.main`, its bytecode already on disk); all must answer."""
    procs = []
    for n in names:
        h, cfg = sf.hosts[n], fleet.host(n)
        req = json.dumps(probe_request(cfg))
        probe = [str(probe_file)] if probe_file is not None else ["-m", PROBE]
        procs.append(
            subprocess.Popen(
                [
                    "ssh",
                    "-q",
                    "-p",
                    str(h.port),
                    "-i",
                    str(sf.client_key),
                    "-o",
                    "IdentitiesOnly=yes",
                    "-o",
                    f"UserKnownHostsFile={sf.known_hosts}",
                    "-o",
                    "StrictHostKeyChecking=yes",
                    "-o",
                    "BatchMode=yes",
                    "127.0.0.1",
                    shlex.join([cfg.python, *probe, req]),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )
    for p in procs:
        out, err = p.communicate(timeout=120)
        answer = json.loads(out)
        assert "gpus" in answer, (out[:300], err[-300:])


def status(fleet_file: Path, env: dict, legacy: bool = False) -> None:
    """A new `fleetdeck status --json` process; every host must be up."""
    cmd = (
        [sys.executable, "-c", LEGACY + "from fleetdeck.cli.main import main; sys.exit(main())"]
        if legacy
        else FLEETDECK
    )
    res = subprocess.run(
        [*cmd, "status", "--hosts", str(fleet_file), "--json"],
        env=env,
        capture_output=True,
        timeout=300,
    )
    doc = json.loads(res.stdout)
    down = [h["error"] for h in doc["hosts"] if not h["reachable"]]
    assert res.returncode == 0 and not down, (res.returncode, down, res.stderr[-500:])


def host_cpu(cache: Path, runs: int) -> dict[str, dict[str, float]]:
    """Median CPU (user + system, ms) of one probe start on this machine, per way of sending it."""
    from fleetdeck.backend.fleet.link import boot as helpers

    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    python = shutil.which("python3") or sys.executable
    ways = {"python3 -c pass": None, "bundle source (before)": helpers.helper_stdin(bundle(PROBE))}
    if hasattr(helpers, "payload_stdin"):
        from fleetdeck.backend.fleet.link.bundle import payload

        p = payload(PROBE)
        ways["sent whole, not kept"] = helpers.payload_stdin(p, cached=False, keep=False)
        ways["sent whole, kept"] = helpers.payload_stdin(p, cached=False, keep=True)
        ways["from the cache"] = helpers.payload_stdin(p, cached=True)
    requests = {
        "ping": b'{"op": "ping"}',
        "snapshot": json.dumps(
            {"op": "snapshot", "runs": [str(cache)], "disk_paths": [str(cache)]}
        ).encode(),
    }
    out: dict[str, dict[str, float]] = {}
    for way, data in ways.items():
        for label, req in requests.items():
            xs = []
            for _ in range(runs):
                if way == "sent whole, kept":
                    shutil.rmtree(cache, ignore_errors=True)
                argv = (
                    [python, "-c", "pass"]
                    if data is None
                    else [python, "-c", helpers.BOOT, "--tied"]
                )
                r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                res = subprocess.run(
                    argv, input=None if data is None else data + req, capture_output=True, env=env
                )
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                assert res.returncode == 0 and (data is None or b'"ok": true' in res.stdout), (
                    res.stderr[-500:]
                )
                xs.append(1000 * (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime))
            out.setdefault(way, {})[label] = statistics.median(xs)
    return out


async def _reconnect(fleet) -> float:
    async with Poller(fleet) as poller:
        await poller.poll()
        for h in fleet.hosts:
            poller._forget(h.name, drop_link=True)  # as after a host restart: all gone
        t0 = time.perf_counter()
        snap = await poller.poll()
        took = time.perf_counter() - t0
        assert all(h.reachable for h in snap.hosts), [
            h.error for h in snap.hosts if not h.reachable
        ]
        return took


async def _paint(fleet) -> float:
    from fleetdeck.tui.app import FleetdeckApp

    t0 = time.perf_counter()
    app = FleetdeckApp(fleet)
    async with app.run_test(size=(160, 50)) as pilot:
        while True:
            snap = app.state.snapshot if app.state.polls else None
            if snap is not None and snap.hosts and all(h.reachable for h in snap.hosts):
                await pilot.pause()  # the frame that shows them
                return time.perf_counter() - t0
            await asyncio.sleep(0.005)
            if time.perf_counter() - t0 > 120:
                raise RuntimeError("the dashboard never showed every host up")


def in_process(arm: str, fleet_file: Path, env: dict, legacy: bool) -> float:
    """Seconds of one reconnect or paint, timed in a process of its own (this script, `--one`)."""
    res = subprocess.run(
        [
            sys.executable,
            __file__,
            "--one",
            arm,
            "--fleet",
            str(fleet_file),
            *(["--legacy"] if legacy else []),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-1000:]
    return float(res.stdout.split()[-1])


# The way before the cache, in this same tree: the payload path bypassed, so a bundled helper
# goes through BOOT as its bundle's source (`helper_stdin`), compiled on every start.
LEGACY = "import sys; import fleetdeck.backend.fleet.link.ssh as s; s.payload_for = lambda source: None; "


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="1,12", help="fleet sizes, comma-separated")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--skip-paint", action="store_true")
    ap.add_argument(
        "--legacy",
        action="store_true",
        help="also measure the way before the cache (the bundle's source through BOOT)",
    )
    ap.add_argument(
        "--installed",
        action="store_true",
        help="also time OpenSSH clients running the installed probe module (nothing to compile)",
    )
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--one", choices=("reconnect", "paint"), help=argparse.SUPPRESS)
    ap.add_argument("--fleet", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        if args.legacy:
            exec(LEGACY)
        fleet = load_fleet(args.fleet)
        print(asyncio.run(_reconnect(fleet) if args.one == "reconnect" else _paint(fleet)))
        return 0
    sizes = [int(x) for x in args.hosts.split(",")]
    results = []
    with tempfile.TemporaryDirectory() as d:
        base = Path(d)
        cache = base / "cache"
        sf = SshdFleet(base)
        try:
            for i in range(max(sizes)):
                sf.add(f"c{i:02d}", sshd_extra=(f"SetEnv XDG_CACHE_HOME={cache}",))
            probe_file = base / "probe.py"
            probe_file.write_text(bundle(PROBE))
            env = {
                **os.environ,
                "XDG_CACHE_HOME": str(cache),
                "XDG_STATE_HOME": str(base / "state"),
            }
            codes = {"": False, "_before": True} if args.legacy else {"": False}
            for n in sizes:
                names = list(sf.hosts)[:n]
                defaults = {"command_timeout": 120, "connect_timeout": 60}
                on = sf.write_fleet(base / f"hosts-{n}.toml", names, defaults=defaults)
                off = sf.write_fleet(
                    base / f"hosts-{n}-off.toml",
                    names,
                    defaults={**defaults, "payload_cache": False},
                )
                fleet = load_fleet(str(on))
                arms: dict[str, list[float]] = {}

                def timed(key, fn, *a):
                    t0 = time.perf_counter()
                    fn(*a)
                    arms.setdefault(key, []).append(time.perf_counter() - t0)  # noqa: B023

                for legacy in codes.values():  # untimed: the hosts' caches and bytecode warm
                    status(on, env, legacy)
                # the arms take turns, round after round, so a change in the machine's load
                # (other work on it) falls on all of them alike
                for _ in range(args.runs):
                    timed("openssh_s", openssh_clients, sf, names, probe_file, fleet)
                    if args.installed:
                        timed("openssh_installed_s", openssh_clients, sf, names, None, fleet)
                    for tag, legacy in codes.items():
                        if not legacy:  # the way before has no cache: one status arm
                            shutil.rmtree(cache, ignore_errors=True)
                            timed("status_first_s", status, on, env)
                        timed(f"status_cached{tag}_s", status, on, env, legacy)
                        if not legacy:
                            timed("status_no_cache_s", status, off, env)
                        arms.setdefault(f"reconnect{tag}_s", []).append(
                            in_process("reconnect", on, env, legacy)
                        )
                        if not args.skip_paint:
                            arms.setdefault(f"paint{tag}_s", []).append(
                                in_process("paint", on, env, legacy)
                            )
                r = {"hosts": n, "runs": args.runs}
                for key, xs in arms.items():
                    r[key] = statistics.median(xs)
                    r[key[:-2] + "_ratio"] = statistics.median(
                        x / o for x, o in zip(xs, arms["openssh_s"], strict=True)
                    )
                    r[key + "_all"] = [round(x, 3) for x in xs]
                results.append(r)
            cpu = host_cpu(base / "cpu-cache", max(5, args.runs))
        finally:
            sf.stop_all()
    if args.json:
        print(json.dumps({"cold_start": results, "host_cpu_ms": cpu}, indent=1))
        return 0
    print(
        f"loopback sshd hosts on this machine ({os.cpu_count()} CPUs), medians of {args.runs} rounds; "
        "ratio: the median of each round's time / that round's OpenSSH clients"
    )
    for r in results:
        print(
            f"{r['hosts']} host(s): {r['hosts']} parallel OpenSSH clients running probe.py "
            f"{r['openssh_s']:.2f} s"
        )
        for key, label in (
            ("openssh_installed_s", "OpenSSH clients, installed module"),
            ("status_first_s", "status, cache empty"),
            ("status_cached_s", "status, cache warm"),
            ("status_no_cache_s", "status, payload_cache = false"),
            ("status_cached_before_s", "status, before the cache"),
            ("reconnect_s", "reconnect poll"),
            ("reconnect_before_s", "reconnect poll, before"),
            ("paint_s", "dashboard: first paint, all up"),
            ("paint_before_s", "dashboard: first paint, before"),
        ):
            if key in r:
                print(f"  {label:34} {r[key]:6.2f} s  {r[key[:-2] + '_ratio']:5.2f}x")
    print("host CPU of one probe start (user + system, median ms):")
    for way, v in cpu.items():
        print(f"  {way:34} " + "  ".join(f"{k} {ms:6.1f}" for k, ms in v.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
