"""Benchmark: `fleetdeck mirror` against the operator's manual way, in the same run.

Two loopback sshd hosts (tests/support/sshfleet.py) and a 1 GiB adapter-like folder (one big
safetensors file, a few small ones). Each method copies the folder into a fresh destination
and proves it by sha256 on both hosts:

- manual (the baseline): `scp -O -3 -r` through this machine, then `sha256sum` of every file
  on both hosts (run at the same time) and the two listings compared;
- rsync: `rsync -a` over ssh to the destination host, then the same hashing;
- fleetdeck: `mirror()` (stream through the controller, fsync, hash on both hosts, rename).

Then hashing throughput on the big file: the mirror helper (over SSH, as a host runs it) against
`openssl dgst -sha256` and `sha256sum`.

    python benchmarks/mirror.py [--size-mib 1024] [--repeat 3]

Prints seconds per method (median of the repeats) and the ratio to the manual baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fleetdeck.backend.actions.mirror.main import mirror  # noqa: E402
from fleetdeck.backend.fleet.config import load_fleet  # noqa: E402
from fleetdeck.backend.fleet.link.ssh import HostLink  # noqa: E402

from support.sshfleet import SshdFleet, have_sshd  # noqa: E402

SRC, DST = "bench-src", "bench-dst"  # names no test uses (SshdFleet.kill matches by name)


def make_adapter(root: Path, size: int) -> None:
    """An adapter folder: one big weights file and the small files that go with it."""
    root.mkdir(parents=True)
    small = {
        "adapter_config.json": 2_000,
        "tokenizer.json": 11_000_000,
        "README.md": 5_000,
        "training_args.bin": 6_000,
        "trainer_state.json": 40_000,
    }
    for name, n in small.items():
        (root / name).write_bytes(os.urandom(n))
    big = size - sum(small.values())
    with open(root / "adapter_model.safetensors", "wb") as f:
        block = os.urandom(1 << 20)
        left = big
        while left > 0:
            f.write(block[: min(left, len(block))])
            left -= len(block)


class Ssh:
    """argv builders for OpenSSH against the loopback fleet."""

    def __init__(self, fleet: SshdFleet) -> None:
        self.fleet = fleet
        self.user = getpass.getuser()
        self.opts = [
            "-o",
            f"UserKnownHostsFile={fleet.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-i",
            str(fleet.client_key),
        ]

    def port(self, host: str) -> int:
        return self.fleet.hosts[host].port

    def ssh(self, host: str, command: str) -> list[str]:
        return ["ssh", *self.opts, "-p", str(self.port(host)), f"{self.user}@127.0.0.1", command]

    def scp3(self, src_host: str, src: Path, dst_host: str, dst: Path) -> list[str]:
        # -O: the loopback sshd offers no sftp subsystem, so scp speaks its classic protocol
        return [
            "scp",
            "-O",
            "-3",
            "-r",
            "-q",
            *self.opts,
            f"scp://{self.user}@127.0.0.1:{self.port(src_host)}/{src}",
            f"scp://{self.user}@127.0.0.1:{self.port(dst_host)}/{dst}",
        ]

    def rsync(self, src: Path, dst_host: str, dst: Path) -> list[str]:
        e = shlex.join(["ssh", *self.opts, "-p", str(self.port(dst_host))])
        return ["rsync", "-a", "-e", e, f"{src}/", f"{self.user}@127.0.0.1:{dst}/"]

    def hash_listing(self, host: str, folder: Path) -> list[str]:
        cmd = f"cd {shlex.quote(str(folder))} && find . -type f -print0 | sort -z | xargs -0 sha256sum"
        return self.ssh(host, cmd)


def hash_both(s: Ssh, src: Path, dst: Path) -> None:
    """sha256sum on both hosts at once; the listings must be equal."""
    a = subprocess.Popen(s.hash_listing(SRC, src), stdout=subprocess.PIPE)
    b = subprocess.Popen(s.hash_listing(DST, dst), stdout=subprocess.PIPE)
    out_a, out_b = a.communicate()[0], b.communicate()[0]
    if a.returncode or b.returncode or out_a != out_b or not out_a:
        raise SystemExit("benchmark: sha256 listings differ or failed")


def run_manual(s: Ssh, src: Path, dst: Path) -> None:
    subprocess.run(s.scp3(SRC, src, DST, dst), check=True)
    hash_both(s, src, dst)


def run_rsync(s: Ssh, src: Path, dst: Path) -> None:
    subprocess.run(s.rsync(src, DST, dst), check=True)
    hash_both(s, src, dst)


def run_fleetdeck(fleet_file: Path, src: Path, dst: Path) -> None:
    fleet = load_fleet(str(fleet_file))

    async def go() -> None:
        a, b = HostLink(fleet.host(SRC)), HostLink(fleet.host(DST))
        try:
            rep = await mirror(a, str(src), b, str(dst))
        finally:
            await a.close()
            await b.close()
        if not rep.verified:
            raise SystemExit(f"benchmark: mirror failed: {rep.error}")

    asyncio.run(go())


def timed(fn, *args, **kw) -> float:
    t = time.perf_counter()
    fn(*args, **kw)
    return time.perf_counter() - t


def hashing(fleet_file: Path, big_dir: Path, big: Path, repeat: int) -> dict[str, float]:
    """Seconds to hash the big file: helper over SSH vs openssl vs sha256sum (medians)."""
    fleet = load_fleet(str(fleet_file))
    from fleetdeck.backend.actions.mirror.common import HELPER

    async def helper() -> None:
        link = HostLink(fleet.host(SRC))
        try:
            await link.connection()
            t = time.perf_counter()
            res = await link.run_helper(
                HELPER, {"op": "list", "path": str(big_dir), "hash": True}, timeout=600
            )
            out["fleetdeck helper (hashlib)"].append(time.perf_counter() - t)
            assert res["files"][0]["sha256"]
        finally:
            await link.close()

    out: dict[str, list[float]] = {
        "fleetdeck helper (hashlib)": [],
        "openssl dgst -sha256": [],
        "sha256sum": [],
    }
    for _ in range(repeat):
        asyncio.run(helper())
        for name, argv in (
            ("openssl dgst -sha256", ["openssl", "dgst", "-sha256", str(big)]),
            ("sha256sum", ["sha256sum", str(big)]),
        ):
            out[name].append(timed(subprocess.run, argv, stdout=subprocess.DEVNULL, check=True))
    return {k: statistics.median(v) for k, v in out.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if not have_sshd():
        print("benchmark: needs OpenSSH sshd", file=sys.stderr)
        return 2
    size = args.size_mib << 20
    base = Path(tempfile.mkdtemp(prefix="fleetdeck-bench-"))
    # benchmark mirrors are not the operator's actions: keep them out of the real audit log
    os.environ["XDG_STATE_HOME"] = str(base / "state")
    fleet = SshdFleet(base / "fleet")
    try:
        fleet.add(SRC)
        fleet.add(DST)
        fleet_file = fleet.write_fleet(base / "hosts.toml")
        s = Ssh(fleet)
        src = fleet.hosts[SRC].root / "run-1" / "adapter"
        make_adapter(src, size)
        dst_root = fleet.hosts[DST].root
        methods = {"manual: scp -3 + sha256sum both sides": lambda d: run_manual(s, src, d)}
        if shutil.which("rsync"):
            methods["rsync over ssh + sha256sum both sides"] = lambda d: run_rsync(s, src, d)
        methods["fleetdeck mirror (copy + fsync + sha256 both sides)"] = lambda d: run_fleetdeck(
            fleet_file, src, d
        )
        times: dict[str, list[float]] = {m: [] for m in methods}
        for i in range(args.repeat):
            for m, fn in methods.items():
                dst = dst_root / f"try-{i}-{len(times[m])}-{abs(hash(m)) % 1000}" / "adapter"
                dst.parent.mkdir(parents=True)
                times[m].append(timed(fn, dst))
                shutil.rmtree(dst.parent)
        print(
            f"mirror of {args.size_mib} MiB ({len(os.listdir(src))} files), median of "
            f"{args.repeat}, {os.cpu_count()} CPU cores, loopback sshd (OpenSSH), page cache warm"
        )
        if not shutil.which("rsync"):
            print("  rsync: not installed, skipped")
        base_t = statistics.median(next(iter(times.values())))
        for m, ts in times.items():
            t = statistics.median(ts)
            print(f"  {m:<55} {t:7.2f} s  {size / t / 1e6:7.1f} MB/s  x{t / base_t:.2f} of manual")
        only = fleet.hosts[SRC].root / "hash-only"  # the big file alone, for the helper
        only.mkdir()
        os.link(big_file(src), only / big_file(src).name)
        hs = hashing(fleet_file, only, big_file(src), args.repeat)
        print(f"sha256 of {big_file(src).stat().st_size / 2**20:.0f} MiB, median of {args.repeat}")
        for m, t in hs.items():
            print(f"  {m:<55} {t:7.2f} s  {big_file(src).stat().st_size / t / 1e6:7.1f} MB/s")
    finally:
        fleet.stop_all()
        shutil.rmtree(base, ignore_errors=True)
    return 0


def big_file(src: Path) -> Path:
    return src / "adapter_model.safetensors"


if __name__ == "__main__":
    sys.exit(main())
