"""Timer removal against a real systemd (skipped where systemd is not PID 1, as in most containers).

Also runnable as a plain script (`python3 tests/test_schedules_timer.py`) on a machine with
systemd and no pytest: it drives the host helper exactly as `HostLink.run_helper` does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

UNITS = Path("/etc/systemd/system")


def have_systemd() -> bool:
    """systemd is PID 1 and we may install system units."""
    return os.path.isdir("/run/systemd/system") and os.geteuid() == 0


def helper(op: str, schedule: dict, **extra) -> dict:
    req = {"op": op, "schedule": schedule, **extra}
    from fleetdeck.backend.bundle import bundle

    src = bundle("fleetdeck.backend.actions.schedules_remote")
    p = subprocess.run([sys.executable, "-c", src], input=json.dumps(req).encode(), capture_output=True)
    return json.loads(p.stdout)


def props(unit: str) -> dict:
    out = subprocess.run(["systemctl", "show", "-p", "ActiveState", "-p", "UnitFileState", "-p", "LoadState",
                          "--", unit], capture_output=True, text=True).stdout
    return dict(x.split("=", 1) for x in out.splitlines() if "=" in x)


def timer(unit: str, scope: str = "system") -> dict:
    return {"id": "t-" + unit, "kind": "systemd-timer", "user": "root", "command": "/bin/true",
            "source": str(UNITS / unit), "unit": unit, "scope": scope}


def check_enabled_timer_disabled_now() -> None:
    name = "fleetdeck-test-t1"
    (UNITS / f"{name}.service").write_text("[Service]\nType=oneshot\nExecStart=/bin/true\n")
    (UNITS / f"{name}.timer").write_text("[Timer]\nOnCalendar=hourly\n[Install]\nWantedBy=timers.target\n")
    try:
        subprocess.run(["systemctl", "daemon-reload"], check=True)
        subprocess.run(["systemctl", "enable", "--now", f"{name}.timer"], check=True, capture_output=True)
        assert props(f"{name}.timer")["ActiveState"] == "active"
        s = timer(f"{name}.timer")
        assert helper("inspect", s)["ok"]
        rep = helper("apply", s)
        assert rep["ok"], rep
        after = props(f"{name}.timer")
        assert after["ActiveState"] == "inactive" and after["UnitFileState"] == "disabled", after
        gone = helper("apply", timer("fleetdeck-test-nosuch.timer"))
        assert gone["error"]["code"] == "not-found", gone
    finally:
        subprocess.run(["systemctl", "disable", "--now", f"{name}.timer"], capture_output=True)
        for suffix in ("service", "timer"):
            (UNITS / f"{name}.{suffix}").unlink(missing_ok=True)
        subprocess.run(["systemctl", "daemon-reload"], check=True)


def check_transient_timer_stopped() -> None:
    name = "fleetdeck-test-t2"
    subprocess.run(["systemd-run", "--on-calendar=hourly", f"--unit={name}", "/bin/true"], check=True,
                   capture_output=True)
    try:
        assert props(f"{name}.timer")["ActiveState"] == "active"
        rep = helper("apply", timer(f"{name}.timer"))
        assert rep["ok"] and "stopped, not disabled" in rep["message"], rep
        assert props(f"{name}.timer").get("ActiveState") != "active"
    finally:
        subprocess.run(["systemctl", "stop", f"{name}.timer"], capture_output=True)


if "pytest" in sys.modules:
    import pytest

    pytestmark = pytest.mark.skipif(not have_systemd(), reason="systemd is not PID 1 here (or not root)")

    def test_enabled_timer_is_disabled_now():
        check_enabled_timer_disabled_now()

    def test_transient_timer_is_stopped():
        check_transient_timer_stopped()


if __name__ == "__main__":
    if not have_systemd():
        print("SKIP: systemd is not PID 1 here (or not root)")
        sys.exit(0)
    check_enabled_timer_disabled_now()
    print("ok: enabled timer disabled --now")
    check_transient_timer_stopped()
    print("ok: transient timer stopped")
