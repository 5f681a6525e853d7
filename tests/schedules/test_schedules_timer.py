"""Timer listing and removal against a real systemd, PID 1 of its own PID + mount namespace.

These machines do not boot systemd, so it runs as in /work/shared/notes/systemd-in-tests.md:
private tmpfs on /run, /tmp and /var/tmp (and /etc/systemd/system, so that enabling a unit
writes nothing outside) mounted before systemd starts, a minimal target, `kill -9` of the
namespace's init to end everything in it. A loopback sshd runs inside the namespace, so the
probe and the removal helper reach that systemd exactly as they reach a host's. Its keys and
config live under /srv (its sessions see the private /tmp).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from fleetdeck.backend.host.lib import procfs

from support import sshfleet
from support.cli import run_cli

SYSTEMD = "/lib/systemd/systemd"
PRIVATE = ("/run/", "/tmp/", "/var/tmp/")  # what the namespace mounts its own tmpfs over
# The host's interpreter: the one this venv was made from, since a venv inside a clone under
# /tmp (CI's .venv) is hidden by the namespace's private /tmp. The probe and the helpers need
# only the standard library.
HOST_PYTHON = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
# mounts first, each checked (`|| exit 1`): without them systemd-tmpfiles would empty the
# machine's /tmp and /var/tmp
INIT = r"""mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /tmp && mount -t tmpfs tmpfs /var/tmp \
  && mount -t tmpfs tmpfs /etc/systemd/system || exit 1
mkdir -p /run/systemd/system
printf '[Unit]\nDescription=minimal target for tests\nDefaultDependencies=no\n' > /run/systemd/system/fbtest.target
exec /lib/systemd/systemd --system --unit=fbtest.target --log-target=null"""


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (a PID + mount namespace and tmpfs mounts)"
    for tool in ("unshare", "nsenter", "systemctl", "systemd-run"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not os.access(SYSTEMD, os.X_OK):
        return f"{SYSTEMD} is not installed (apt-get install systemd)"
    if not os.path.isdir("/etc/systemd/system"):
        return "/etc/systemd/system does not exist to mount over"
    if not sshfleet.have_sshd():
        return "OpenSSH sshd is not installed"
    if HOST_PYTHON.startswith(PRIVATE):
        return f"this Python ({HOST_PYTHON}) lies where the namespace mounts a private tmpfs"
    return None


pytestmark = [
    pytest.mark.root,
    pytest.mark.sshd,
    pytest.mark.skipif(_why_not() is not None, reason=str(_why_not())),
]


class NsSystemd:
    """A systemd in its own namespace; `run(argv)` runs a command inside it."""

    def __init__(self) -> None:
        self.unshare = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount", "--mount-proc", "sh", "-c", INIT],
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.pid = 0
        for _ in range(400):
            kids = procfs.children(self.unshare.pid)
            if kids and procfs.comm(kids[0]) == "systemd":
                self.pid = kids[0]
                break
            if self.unshare.poll() is not None:
                raise RuntimeError(
                    f"the namespace did not start: {self.unshare.stderr.read().decode()[-500:]}"
                )
            time.sleep(0.05)
        state = ""
        for _ in range(300):
            state = self.run(["systemctl", "is-system-running"]).stdout.strip()
            if state in ("running", "degraded"):
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"systemd in the namespace never came up (state {state!r})")

    def run(self, argv: list[str], check: bool = False) -> subprocess.CompletedProcess:
        if not self.pid:
            raise RuntimeError("no systemd")
        return subprocess.run(
            ["nsenter", "-t", str(self.pid), "-m", "-p", *argv],
            capture_output=True,
            text=True,
            check=check,
            timeout=60,
        )

    def props(self, unit: str) -> dict[str, str]:
        out = self.run(
            [
                "systemctl",
                "show",
                "-p",
                "LoadState",
                "-p",
                "ActiveState",
                "-p",
                "UnitFileState",
                "--",
                unit,
            ]
        ).stdout
        return dict(x.split("=", 1) for x in out.splitlines() if "=" in x)

    def stop(self) -> None:
        # killing a PID namespace's init ends every process in it
        if self.pid and procfs.alive(self.pid):
            os.kill(self.pid, 9)
        self.unshare.wait(timeout=30)


@pytest.fixture(scope="module")
def ns_systemd():
    ns = NsSystemd()
    try:
        yield ns
    finally:
        ns.stop()


@pytest.fixture
def ns_host(ns_systemd, monkeypatch):
    """A fleet of one host, `ns1`, whose sshd (and so every session) runs inside the namespace."""
    base = Path(tempfile.mkdtemp(prefix="fleetdeck-timer-test-", dir="/srv"))
    wrapper = base / "sshd-in-namespace"
    wrapper.write_text(
        f"#!/bin/sh\nexec nsenter -t {ns_systemd.pid} -m -p sh -c "
        f'\'mkdir -p /run/sshd && exec {sshfleet.SSHD} "$@"\' sshd "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setattr(sshfleet, "SSHD", str(wrapper))
    fleet = sshfleet.SshdFleet(base / "fleet")
    try:
        fleet.add("ns1")
        yield (
            fleet,
            str(
                fleet.write_fleet(
                    base / "hosts.toml", names=["ns1"], defaults={"python": HOST_PYTHON}
                )
            ),
        )
    finally:
        fleet.stop_all()
        shutil.rmtree(base, ignore_errors=True)


def timers(hosts: str, capsys) -> dict[str, dict]:
    rc, out, err = run_cli(["--hosts", hosts, "schedules", "--json"], capsys)
    assert rc == 0, err
    return {s["unit"]: s for s in json.loads(out)["schedules"] if s["kind"] == "systemd-timer"}


def remove(hosts: str, sid: str, capsys) -> dict:
    rc, out, err = run_cli(
        ["--hosts", hosts, "schedules", "remove", "ns1", sid, "--confirm", sid, "--json"], capsys
    )
    assert rc == 0, err
    return json.loads(out)


def test_namespace_leaves_this_machines_tmp_alone(ns_systemd, tmp_path):
    mark = tmp_path / "still-here"
    mark.write_text("x")
    ns_systemd.run(["systemctl", "start", "systemd-tmpfiles-clean.service"])
    assert mark.read_text() == "x"
    inside = ns_systemd.run(
        ["sh", "-c", "stat -f -c %T /tmp /var/tmp /run /etc/systemd/system"]
    ).stdout.split()
    assert inside == ["tmpfs"] * 4


def test_transient_and_enabled_timers_listed_and_removed(ns_systemd, ns_host, capsys):
    _, hosts = ns_host
    ns_systemd.run(
        ["systemd-run", "--on-calendar=*:37", "--unit=fdt1", "/bin/true", "check-on-the-run"],
        check=True,
    )
    ns_systemd.run(
        [
            "sh",
            "-c",
            "printf '[Service]\\nType=oneshot\\nUser=nobody\\nExecStart=/bin/true fdt2 /nonexistent/fdt2-target\\n'"
            " > /etc/systemd/system/fdt2.service"
            " && printf '[Timer]\\nOnCalendar=hourly\\n[Install]\\nWantedBy=timers.target\\n'"
            " > /etc/systemd/system/fdt2.timer && systemctl daemon-reload"
            " && systemctl enable --now fdt2.timer",
        ],
        check=True,
    )
    try:
        listed = timers(hosts, capsys)
        assert {"fdt1.timer", "fdt2.timer"} <= set(listed), (
            listed,
            ns_systemd.run(["systemctl", "list-timers", "--all", "--output=json"]).stdout,
        )
        t1, t2 = listed["fdt1.timer"], listed["fdt2.timer"]
        assert (
            t1["scope"] == "system"
            and "OnCalendar" in t1["spec"]
            and "check-on-the-run" in t1["command"]
        )
        assert t1["next_run"] and t1["active"] and t1["stray"] and not t1["system"]
        assert t2["command"] == "/bin/true fdt2 /nonexistent/fdt2-target" and t2["user"] == "nobody"
        assert (
            t2["source"] == "/etc/systemd/system/fdt2.timer"
            and t2["spec"] == "OnCalendar=*-*-* *:00:00"
        )
        assert "dead-target" in t2["reasons"] and t2["missing_paths"] == [
            "/nonexistent/fdt2-target"
        ]
        assert ns_systemd.props("fdt2.timer")["UnitFileState"] == "enabled"

        rep = remove(hosts, t1["id"], capsys)
        assert rep["removed"] and "stopped" in rep["message"]
        assert ns_systemd.props("fdt1.timer").get("ActiveState") != "active"
        rep = remove(hosts, t2["id"], capsys)
        assert rep["removed"] and "stopped and disabled" in rep["message"]
        # its witness: the state re-read after the change
        assert (
            "re-read, systemd says timer fdt2.timer is LoadState=loaded, ActiveState=inactive, "
            "UnitFileState=disabled"
        ) in rep["message"]
        after = ns_systemd.props("fdt2.timer")
        assert (after["ActiveState"], after["UnitFileState"]) == ("inactive", "disabled")

        again = timers(hosts, capsys)
        assert "fdt1.timer" not in again  # a stopped transient timer is gone
        # disabled and stopped: systemd may unload it; if still listed, it no longer fires
        assert "fdt2.timer" not in again or again["fdt2.timer"]["active"] is False
    finally:
        ns_systemd.run(["systemctl", "stop", "fdt1.timer", "fdt2.timer"])


def test_timer_that_changed_since_listing_is_refused(ns_systemd, ns_host, capsys):
    _, hosts = ns_host
    ns_systemd.run(["systemd-run", "--on-calendar=*:41", "--unit=fdt3", "/bin/true"], check=True)
    listed = timers(hosts, capsys)["fdt3.timer"]
    ns_systemd.run(["systemctl", "stop", "fdt3.timer"])  # someone else removed it meanwhile
    rc, _, err = run_cli(
        ["--hosts", hosts, "schedules", "remove", "ns1", listed["id"], "--confirm", listed["id"]],
        capsys,
    )
    assert rc == 1 and "not-found" in err


async def test_a_timer_already_inactive_and_disabled_is_refused_nothing_to_remove(
    ns_systemd, ns_host
):
    """Loaded but neither active nor enabled: `disable --now` would change nothing, so the
    removal is a refusal, never "stopped and disabled" over nothing."""
    from fleetdeck.backend.actions.schedules import remove_schedule
    from fleetdeck.backend.fleet.config import load_fleet
    from fleetdeck.backend.fleet.link.ssh import HostLink
    from fleetdeck.backend.fleet.models import Schedule

    _, hosts = ns_host
    ns_systemd.run(
        [
            "sh",
            "-c",
            "printf '[Service]\\nType=oneshot\\nExecStart=/bin/true fdt4\\n' > /etc/systemd/system/fdt4.service"
            " && printf '[Timer]\\nOnCalendar=hourly\\n[Install]\\nWantedBy=timers.target\\n'"
            " > /etc/systemd/system/fdt4.timer && systemctl daemon-reload",
        ],
        check=True,
    )
    before = ns_systemd.props("fdt4.timer")
    assert (before["ActiveState"], before["UnitFileState"]) == ("inactive", "disabled")
    sched = Schedule(
        id="timer-fdt4",
        host="ns1",
        kind="systemd-timer",
        user="root",
        spec="OnCalendar=hourly",
        command="/bin/true fdt4",
        source="/etc/systemd/system/fdt4.timer",
        unit="fdt4.timer",
        scope="system",
    )
    async with HostLink(load_fleet(hosts).host("ns1")) as link:
        rep = await remove_schedule(link, sched, "timer-fdt4")
    assert not rep.ok and rep.reason_code == "nothing-to-remove" and rep.result == "refused", rep
    assert (
        "timer fdt4.timer is already inactive and disabled: nothing to stop or disable"
        in rep.message
    )
