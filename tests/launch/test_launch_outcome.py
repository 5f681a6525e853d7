"""The audit log records a launched run's end once, from the monitor that delivers (`watch`):
state and reason as the host shows them; a second launch of the same folder gets its own."""

from __future__ import annotations

import json
import time

from fleetdeck.backend.actions import audit
from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot, Run
from fleetdeck.backend.monitor.service import Monitor


class _Nowhere:
    """A source that is never asked: the test hands the monitor its snapshots."""

    async def poll(self, *a, **k):
        raise AssertionError("not polled")


def _snap(t: float, run: Run) -> FleetSnapshot:
    return FleetSnapshot(
        hosts=(HostSnapshot(name="gx10", reachable=True, time=t, runs=(run,)),), time=t
    )


def test_a_launched_runs_end_is_audited_once_and_again_after_a_new_launch(tmp_path):
    fleet = parse_fleet(
        '[hosts.gx10]\nlocal = true\n[alerts]\ndisabled = ["new-stray"]\n', "t.toml"
    )
    mon = Monitor(fleet, role="deliver", source=_Nowhere())
    path = "/runs/run-4"
    launched = audit.audit("launch", "gx10", "started", run=path)["ts"]
    running = Run(
        host="gx10",
        path=path,
        name="run-4",
        state="running",
        step=10,
        max_steps=159,
        last_update=launched + 1,
    )
    mon.after_poll(_snap(launched + 1, running), {})
    failed = Run(
        host="gx10",
        path=path,
        name="run-4",
        state="failed",
        step=61,
        max_steps=159,
        reason="CUDA out of memory at step 61",
        last_update=launched + 5,
    )
    mon.after_poll(_snap(launched + 10, failed), {})
    mon.after_poll(_snap(launched + 20, failed), {})
    outs = [r for r in audit.read_audit() if r["action"] == "launch-outcome"]
    assert len(outs) == 1
    assert outs[0]["host"] == "gx10" and outs[0]["run"] == path and outs[0]["result"] == "failed"
    assert outs[0]["reason"] == "CUDA out of memory at step 61" and outs[0]["step"] == 61
    # resumed a while later (the record as `launch` writes it, at a later time): the run still
    # shows its old end until it moves, then it finishes
    relaunch = launched + 100
    with open(audit.audit_path(), "a") as f:
        f.write(
            json.dumps(
                {
                    "time": "-",
                    "ts": relaunch,
                    "action": "launch",
                    "host": "gx10",
                    "result": "started",
                    "run": path,
                    "resume": True,
                }
            )
            + "\n"
        )
    mon.after_poll(_snap(relaunch + 1, failed), {})
    assert len([r for r in audit.read_audit() if r["action"] == "launch-outcome"]) == 1
    done = Run(
        host="gx10",
        path=path,
        name="run-4",
        state="finished",
        step=159,
        max_steps=159,
        adapter=path + "/adapter",
        last_update=relaunch + 30,
    )
    mon.after_poll(_snap(relaunch + 40, done), {})
    outs = [r for r in audit.read_audit() if r["action"] == "launch-outcome"]
    assert [o["result"] for o in outs] == ["failed", "finished"] and outs[1][
        "adapter"
    ] == path + "/adapter"
    mon.after_poll(_snap(relaunch + 50, done), {})
    assert len([r for r in audit.read_audit() if r["action"] == "launch-outcome"]) == 2
    # a run nobody launched from here is not recorded
    other = Run(
        host="gx10",
        path="/runs/hand-made",
        name="hand-made",
        state="finished",
        last_update=relaunch,
    )
    mon.after_poll(_snap(relaunch + 50, other), {})
    assert len([r for r in audit.read_audit() if r["action"] == "launch-outcome"]) == 2


def test_an_observing_dashboard_records_no_outcome(tmp_path):
    fleet = parse_fleet("[hosts.gx10]\nlocal = true\n", "t.toml")
    mon = Monitor(fleet, role="observe", source=_Nowhere())
    audit.audit("launch", "gx10", "started", run="/runs/run-5")
    done = Run(
        host="gx10", path="/runs/run-5", name="run-5", state="finished", last_update=time.time() + 1
    )
    mon.after_poll(_snap(time.time() + 2, done), {})
    assert not [r for r in audit.read_audit() if r["action"] == "launch-outcome"]
