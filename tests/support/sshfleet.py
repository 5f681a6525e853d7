"""A fleet of real OpenSSH sshd processes on loopback, for tests and benchmarks.

Each "host" is its own sshd on 127.0.0.1 with a generated host key, checked against a
known_hosts file of the fleet's own, and its own root folder (runs/, purge roots...).
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def have_sshd() -> bool:
    """True when this machine can run the loopback fleet."""
    return os.path.exists(SSHD) and shutil.which("ssh-keygen") is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path) -> str:
    """Make an ed25519 key pair at `path`; the public key line."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return (
        path.with_suffix(".pub").read_text().strip()
        if path.suffix
        else Path(str(path) + ".pub").read_text().strip()
    )


@dataclass
class FakeHost:
    """One loopback sshd standing in for a fleet host."""

    name: str
    port: int
    root: Path
    dir: Path
    host_key: Path
    proc: subprocess.Popen | None = None
    #: extra sshd_config lines (e.g. `SetEnv BASH_ENV=...` for a chatty login shell)
    sshd_extra: tuple[str, ...] = ()

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    def host_pub(self) -> str:
        return Path(str(self.host_key) + ".pub").read_text().strip()

    def known_hosts_line(self) -> str:
        algo, b64 = self.host_pub().split()[:2]
        return f"[127.0.0.1]:{self.port} {algo} {b64}"


@dataclass
class SshdFleet:
    """Start, stop and describe loopback sshd hosts, all trusting one client key."""

    base: Path
    hosts: dict[str, FakeHost] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        self.client_key = self.base / "client_ed25519"
        if not self.client_key.exists():
            keygen(self.client_key)
        self.authorized_keys = self.base / "authorized_keys"
        self.authorized_keys.write_text(Path(str(self.client_key) + ".pub").read_text())
        os.chmod(self.authorized_keys, 0o600)
        self.known_hosts = self.base / "known_hosts"
        self.known_hosts.touch()
        Path("/run/sshd").mkdir(exist_ok=True) if os.geteuid() == 0 else None

    def add(self, name: str, trust: bool = True, sshd_extra: tuple[str, ...] = ()) -> FakeHost:
        """Create and start a host; `trust` writes its key into the fleet's known_hosts;
        `sshd_extra` adds lines to its sshd_config."""
        d = self.base / f"sshd-{name}"
        d.mkdir(exist_ok=True)
        root = self.base / "hosts" / name
        (root / "runs").mkdir(parents=True, exist_ok=True)
        key = d / "host_ed25519"
        if not key.exists():
            keygen(key)
        h = FakeHost(
            name=name,
            port=free_port(),
            root=root,
            dir=d,
            host_key=key,
            sshd_extra=tuple(sshd_extra),
        )
        self.hosts[name] = h
        self.start(name)
        if trust:
            self.trust(name)
        return h

    def trust(self, name: str) -> None:
        with open(self.known_hosts, "a") as f:
            f.write(self.hosts[name].known_hosts_line() + "\n")

    def start(self, name: str) -> None:
        h = self.hosts[name]
        cfg = h.dir / "sshd_config"
        cfg.write_text(
            "\n".join(
                [
                    f"Port {h.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {h.host_key}",
                    f"AuthorizedKeysFile {self.authorized_keys}",
                    f"PidFile {h.dir / 'sshd.pid'}",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PubkeyAuthentication yes",
                    "PermitRootLogin yes",
                    "StrictModes no",
                    "UsePAM no",
                    "MaxSessions 64",
                    "MaxStartups 200",
                    "LogLevel ERROR",
                    *h.sshd_extra,
                    "",
                ]
            )
        )
        with open(h.dir / "sshd.log", "ab") as log:
            h.proc = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(cfg)],
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if h.proc.poll() is not None:
                raise RuntimeError(
                    f"sshd for {name} exited: {(h.dir / 'sshd.log').read_text()[-2000:]}"
                )
            try:
                with socket.create_connection(("127.0.0.1", h.port), timeout=0.5) as s:
                    if s.recv(8).startswith(b"SSH-"):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd for {name} did not come up on port {h.port}")

    def kill(self, name: str) -> None:
        """Take the host down: its sshd, every session it forked and everything they run."""
        h = self.hosts[name]
        if h.proc is None or h.proc.poll() is not None:
            return
        _signal_tree(h.proc.pid, signal.SIGKILL)
        h.proc.wait()

    def pause(self, name: str) -> list[int]:
        """The host goes silent with its connections open: its sshd and every session and
        process below it SIGSTOPped (the kernel still accepts and acknowledges, nobody reads
        or answers). The pids stopped; `resume` or `kill` ends it."""
        h = self.hosts[name]
        assert h.proc is not None and h.proc.poll() is None
        return _signal_tree(h.proc.pid, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        h = self.hosts[name]
        if h.proc is None or h.proc.poll() is not None:
            return
        _signal_tree(h.proc.pid, signal.SIGCONT)

    def stop_all(self) -> None:
        for name in list(self.hosts):
            self.kill(name)

    def host_toml(self, name: str, **extra: object) -> str:
        """The [hosts.NAME] table for this fake host."""
        h = self.hosts[name]
        lines = [
            f"[hosts.{name}]",
            'address = "127.0.0.1"',
            f"port = {h.port}",
            f'user = "{getpass.getuser()}"',
        ]
        if "runs" not in extra:
            lines.append(f'runs = ["{h.runs}"]')
        for k, v in extra.items():
            lines.append(f"{k} = {_toml(v)}")
        return "\n".join(lines) + "\n"

    def fleet_toml(
        self,
        names: list[str] | None = None,
        defaults: dict | None = None,
        per_host: dict[str, dict] | None = None,
    ) -> str:
        """A whole fleet file for these hosts, with this fleet's keys and known_hosts."""
        d = {
            "known_hosts": str(self.known_hosts),
            "client_keys": [str(self.client_key)],
            "python": sys.executable,
            "connect_timeout": 3,
            "command_timeout": 20,
        }
        d.update(defaults or {})
        out = ["[defaults]"] + [f"{k} = {_toml(v)}" for k, v in d.items()] + [""]
        for n in list(self.hosts) if names is None else names:
            out.append(self.host_toml(n, **(per_host or {}).get(n, {})))
        return "\n".join(out)

    def write_fleet(self, path: Path, names: list[str] | None = None, **kw: object) -> Path:
        path.write_text(self.fleet_toml(names, **kw))  # type: ignore[arg-type]
        return path


def _signal_tree(root: int, sig: int) -> list[int]:
    """Send `sig` to `root` and every process below it (one that is gone is skipped); the pids."""
    victims = [root, *_descendants(root)]
    for pid in victims:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    return victims


def _descendants(root: int) -> list[int]:
    """Every process below `root` (sshd sessions call setsid, so process groups miss them)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _toml(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'
