"""The controller's host-poll against its transport floor: `Poller.poll()` beside a bare asyncssh
exchange of the same lines on the same connections, in one run.

    python benchmarks/controller_floor.py [--hosts 60] [--polls 20] [--rounds 3]

Starts --hosts loopback sshd hosts (benchmarks/poll.py's set-up) and a `Poller` over them. After
its warm-up polls, the requests it sends and the answer lines it reads are recorded; then on each
host's own connection (the poller's link, the same ciphers) a stand-in is started: a `python3 -c`
loop that answers each request line with that host's last recorded answer line, as it is. Each
round then measures, alternated, process CPU per host-poll (median over --polls cycles, every
host asked at once, each in its own task as the poller does):

- floor: asyncssh alone, one request line written (and drained) and one answer line read a host;
- floor + JSON: the same, and the answer parsed with `json.loads` (no checks);
- poller, replayed: `Poller.poll()` (the request made, the answer's strict decode, the delta
  applied, the changed sections validated, the snapshot, the stray verdict) against a second
  stand-in on each connection that replays that host's recorded whole answer, then its recorded
  delta renumbered on the answer held, at once: the same lines and arrivals as the floor's;
- poller, probes: `Poller.poll()` against the real resident probes (their answers come as each
  probe finishes, spread over the cycle, so the event loop wakes more often).

What "poller, replayed" costs above "floor + JSON" is the controller's own work a host-poll; the
floor is what any controller pays over asyncssh on this machine for one line out and one in.

    python benchmarks/controller_floor.py --calls --lines /tmp/lines.json

`--calls` also counts the Python calls a host-poll (cProfile, builtins included) of "floor + JSON"
and "poller, replayed", by package; `--lines FILE` writes the recorded lines to FILE, or replays
FILE's when it exists, so that two trees (`PYTHONPATH` naming each) are measured on the very same
answers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fleetdeck.backend.fleet import held  # noqa: E402
from fleetdeck.backend.fleet.config import load_fleet  # noqa: E402
from fleetdeck.backend.fleet.link import channel  # noqa: E402
from fleetdeck.backend.fleet.poller import Poller  # noqa: E402

from support.sshfleet import SshdFleet  # noqa: E402

#: the stand-in on each host: its first line is the answer it gives to every line after it
ECHO = (
    "import sys\n"
    "r, w = sys.stdin.buffer, sys.stdout.buffer\n"
    "a = r.readline()\n"
    "for line in iter(r.readline, b''):\n"
    "    w.write(a)\n"
    "    w.flush()\n"
)
#: the replaying stand-in: its first two lines are a whole answer and a delta, numbered SEQ and
#: BASE; each request is answered with the delta on the answer it names, else the whole one
SEQ, BASE = b"9000000000000001", b"9000000000000002"
REPLAY = (
    "import json, sys\n"
    "r, w = sys.stdin.buffer, sys.stdout.buffer\n"
    "whole, delta, n = r.readline(), r.readline(), 0\n"
    "for line in iter(r.readline, b''):\n"
    "    held, n = json.loads(line).get('held'), n + 1\n"
    f"    a = whole.replace({SEQ!r}, b'%d' % n) if held is None else "
    f"delta.replace({SEQ!r}, b'%d' % n).replace({BASE!r}, b'%d' % held)\n"
    "    w.write(a)\n"
    "    w.flush()\n"
)


async def recorded(poller: Poller, warm: int) -> dict[str, dict[str, bytes]]:
    """host -> its last request line, answer line, whole answer and delta answer (templates
    numbered SEQ and BASE), after `warm` polls."""
    last: dict[int, bytes] = {}
    sent: dict[int, bytes] = {}
    kinds: dict[str, dict[str, bytes]] = {}
    read_line, send_json = channel.read_line, channel.HelperProcess.send_json
    take = held.Held.take

    async def counted(stream, *a, **k):
        line = await read_line(stream, *a, **k)
        last[id(stream)] = line
        return line

    async def sending(self, obj):
        sent[id(self.stdout)] = json.dumps(obj).encode() + b"\n"
        await send_json(self, obj)

    def taking(self, host, answer):
        kind = "delta" if "base" in answer else "whole"
        a = dict(answer, seq=int(SEQ), **({"base": int(BASE)} if kind == "delta" else {}))
        kinds.setdefault(host, {})[kind] = json.dumps(a).encode() + b"\n"
        return take(self, host, answer)

    channel.read_line = counted
    channel.HelperProcess.send_json = sending  # type: ignore[method-assign]
    held.Held.take = taking  # type: ignore[method-assign]
    try:
        for _ in range(warm):
            snap = await poller.poll()
            assert all(h.reachable for h in snap.hosts), [h.error for h in snap.hosts]
    finally:
        channel.read_line = read_line
        channel.HelperProcess.send_json = send_json  # type: ignore[method-assign]
        held.Held.take = take  # type: ignore[method-assign]
    out = {}
    for h in poller.fleet.hosts:
        probe = poller._probes[h.name]  # noqa: SLF001 (the benchmark reads the poller's probe)
        out[h.name] = dict(
            kinds[h.name], request=sent[id(probe.stdout)], answer=last[id(probe.stdout)]
        )
    return out


async def stand_in(poller: Poller, name: str, source: str, *first: bytes):
    conn = await poller.link(name).connection()
    python = poller.fleet.host(name).python
    p = await conn.create_process(f"{python} -c {shlex.quote(source)}", encoding=None)
    for line in first:
        p.stdin.write(line)
    return p


async def bare_cycle(procs: dict, lines: dict, parse: bool) -> None:
    async def one(name: str) -> None:
        p = procs[name]
        p.stdin.write(lines[name]["request"])
        await p.stdin.drain()
        line = await p.stdout.readline()
        assert line.endswith(b"\n"), f"{name}: the stand-in did not answer ({line[:80]!r})"
        if parse:
            json.loads(line)

    await asyncio.wait([asyncio.ensure_future(one(n)) for n in procs])


async def measure(
    fleet, polls: int, rounds: int, warm: int, calls: bool = False, keep: Path | None = None
) -> dict:
    poller = Poller(fleet)
    n = len(fleet.hosts)
    try:
        lines = await recorded(poller, warm)
        if keep is not None and keep.exists():  # the same lines as another run (another tree)
            kept = json.loads(keep.read_text())
            lines = {h: {k: v.encode() for k, v in x.items()} for h, x in kept.items()}
        elif keep is not None:
            keep.write_text(
                json.dumps({h: {k: v.decode() for k, v in x.items()} for h, x in lines.items()})
            )
        procs = {
            h.name: await stand_in(poller, h.name, ECHO, lines[h.name]["answer"])
            for h in fleet.hosts
        }

        async def replaying(host):
            p = await stand_in(
                poller, host.name, REPLAY, lines[host.name]["whole"], lines[host.name]["delta"]
            )
            return channel.HelperProcess(p, True, "probe")

        replayed = Poller(fleet, open_probe=replaying)
        for _ in range(3):
            await replayed.poll()
            await bare_cycle(procs, lines, True)
        counted: dict[str, tuple[float, dict[str, float]]] = {}
        if calls:
            import cProfile  # deferred: only --calls profiles
            import pstats  # deferred: only --calls profiles

            for arm in ("floor + JSON", "poller, replayed"):
                pr = cProfile.Profile()
                pr.enable()
                for _ in range(polls):
                    if arm == "floor + JSON":
                        await bare_cycle(procs, lines, True)
                    else:
                        await replayed.poll()
                pr.disable()
                by: dict[str, float] = {}
                for (path, _, _), v in pstats.Stats(pr).stats.items():  # type: ignore[attr-defined]
                    part = next(
                        (
                            k
                            for k in ("fleetdeck", "asyncssh", "asyncio", "json")
                            if f"/{k}/" in path
                        ),
                        "builtins" if path == "~" else "the rest",
                    )
                    by[part] = by.get(part, 0) + v[1] / polls / n
                counted[arm] = (sum(by.values()), by)
        res: dict[str, list[float]] = {
            "floor": [],
            "floor + JSON": [],
            "poller, replayed": [],
            "poller, probes": [],
        }
        for _ in range(rounds):
            for arm in res:
                cpu = []
                for _ in range(polls):
                    c = time.process_time()
                    if arm == "poller, probes":
                        snap = await poller.poll()
                    elif arm == "poller, replayed":
                        snap = await replayed.poll()
                    else:
                        await bare_cycle(procs, lines, arm == "floor + JSON")
                    cpu.append((time.process_time() - c) / n * 1e3)
                    if arm.startswith("poller"):
                        assert all(h.reachable for h in snap.hosts), [h.error for h in snap.hosts]
                res[arm].append(statistics.median(cpu))
        for p in procs.values():
            p.close()
        await replayed.close()  # its stand-ins (on the first poller's connections)
        return {
            "medians_ms": res,
            "calls": counted,
            "request_bytes": statistics.median(len(x["request"]) for x in lines.values()),
            "answer_bytes": statistics.median(len(x["answer"]) for x in lines.values()),
            "delta_bytes": statistics.median(len(x["delta"]) for x in lines.values()),
            "deltas": sum(replayed.held(h.name).deltas for h in fleet.hosts),
        }
    finally:
        await poller.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=60, help="loopback sshd hosts")
    ap.add_argument("--polls", type=int, default=20, help="cycles a measure (median)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the three arms, alternated")
    ap.add_argument("--warm", type=int, default=5, help="the poller's polls before (recorded)")
    ap.add_argument(
        "--calls",
        action="store_true",
        help="also count Python calls a host-poll (cProfile) of floor + JSON and the replayed poller",
    )
    ap.add_argument(
        "--lines",
        type=Path,
        help="a file of the recorded lines: read when it exists (every stand-in replays them: "
        "two trees compared on the same answers), else written",
    )
    args = ap.parse_args()
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as d:
        sf = SshdFleet(Path(d))
        try:
            for i in range(args.hosts):
                sf.add(f"b{i:02d}")
            path = sf.write_fleet(
                Path(d) / "hosts.toml", defaults={"command_timeout": 60, "connect_timeout": 20}
            )
            out = asyncio.run(
                measure(
                    load_fleet(str(path)),
                    args.polls,
                    args.rounds,
                    args.warm,
                    args.calls,
                    args.lines,
                )
            )
        finally:
            sf.stop_all()
    print(
        f"{args.hosts} loopback sshd hosts; request {out['request_bytes']:.0f} bytes, answer "
        f"{out['answer_bytes']:.0f} bytes (medians); ms of CPU a host-poll, median of "
        f"{args.polls} cycles, each round:"
    )
    res = out["medians_ms"]
    for arm, xs in res.items():
        print(
            f"  {arm:<14}"
            + "".join(f"{x:>8.3f}" for x in xs)
            + f"   median {statistics.median(xs):.3f}"
        )
    floor, json_floor = statistics.median(res["floor"]), statistics.median(res["floor + JSON"])
    for arm in ("poller, replayed", "poller, probes"):
        whole = statistics.median(res[arm])
        print(
            f"{arm}: {whole / floor:.2f}x the floor; above floor + JSON "
            f"{whole - json_floor:.3f} ms a host-poll"
        )
    for arm, (total, by) in out["calls"].items():
        parts = ", ".join(f"{k} {v:.0f}" for k, v in sorted(by.items(), key=lambda kv: -kv[1]))
        print(f"Python calls a host-poll, {arm}: {total:.0f} ({parts})")
    print(f"(replayed: {out['deltas']} delta answers taken, {out['delta_bytes']:.0f} bytes each)")
    load = os.getloadavg()
    print(f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
