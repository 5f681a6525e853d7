"""Severity: every rule has one (critical, warning, info), the fleet file's `[alerts]` changes
it per rule, and everything that shows or sends an alert carries it: the engine's order (by
severity, then newest first), `fleetdeck alerts` (table title and JSON), the Alerts view, the
hook's argv, environment and stdin, the webhook's body (a real command, a real HTTP server)."""

from __future__ import annotations

import json
import sys
import threading
import tomllib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fleetdeck.backend.fleet.config import ConfigError, parse_fleet
from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot, Run, Schedule
from fleetdeck.backend.fleet.seat_model import Seat
from fleetdeck.backend.monitor.rules.alerts import Alert, AlertConfig, AlertEngine, parse_alerts
from fleetdeck.backend.monitor.seats import SeatCheck

from support.watch import local_fleet, rising_evals, state_dir

T0 = 1_800_000_000.0


def snap(t: float, **kw) -> FleetSnapshot:
    return FleetSnapshot(hosts=(HostSnapshot(name="h1", reachable=True, time=t, **kw),), time=t)


def sched(sid: str, *reasons: str) -> Schedule:
    return Schedule(
        id=sid,
        host="h1",
        kind="crontab",
        user="op",
        spec="37 * * * *",
        command="/opt/x.sh",
        source="crontab",
        stray=True,
        reasons=reasons,
    )


def everything_wrong(t: float) -> FleetSnapshot:
    runs = (
        Run(host="h1", path="/r/a", name="a", state="stalled", reason="no progress for 900s"),
        Run(host="h1", path="/r/b", name="b", state="running", reason="loss is nan at step 3"),
        Run(
            host="h1",
            path="/r/c",
            name="c",
            state="running",
            eval_losses=((25, 3.1), (50, 3.2), (75, 3.3)),
        ),
    )
    seat = Seat(host="h1", kind="vllm", port=8000, pid=6, restarts=0)
    return snap(
        t,
        runs=runs,
        seats=(seat,),
        schedules=(sched("c-1", "unacknowledged"), sched("c-2", "dead-target", "unacknowledged")),
    )


def test_each_rule_has_its_severity_and_a_stray_naming_a_missing_path_is_a_warning():
    e = AlertEngine()
    e.evaluate(
        snap(T0 - 5)
    )  # the first look: the strays that come later are news, each its own alert
    bad = SeatCheck(host="h1", port=8000, sound=False, signature="logprob-nonfinite", message="NaN")
    out = e.evaluate(everything_wrong(T0), checks={"h1:8000:vllm": bad})
    got = {(a.rule, a.subject): a.severity for a in out}
    assert got == {
        ("run-stalled", "/r/a"): "warning",
        ("loss-nonfinite", "/r/b"): "critical",
        ("overfitting", "/r/c"): "warning",
        ("seat-check", "port 8000"): "critical",
        ("new-stray", "c-1"): "info",
        ("new-stray", "c-2"): "warning",
    }
    down = FleetSnapshot(
        hosts=(HostSnapshot(name="h1", reachable=False, error="timed out", time=T0 + 10),),
        time=T0 + 10,
    )
    e.evaluate(down)
    e.evaluate(
        FleetSnapshot(
            hosts=(HostSnapshot(name="h1", reachable=False, error="x", time=T0 + 500),),
            time=T0 + 500,
        )
    )
    assert [(a.rule, a.severity) for a in e.firing() if a.rule == "host-down"] == [
        ("host-down", "critical")
    ]
    # the order everything shows them in: critical, warning, info; each newest first
    sevs = [a.severity for a in e.alerts() if a.state == "firing"]
    assert sevs == sorted(sevs, key=["critical", "warning", "info"].index)
    crit = [a for a in e.alerts() if a.severity == "critical"]
    assert [a.rule for a in crit][0] == "host-down"  # the newest critical first


def test_the_fleet_file_changes_a_rules_severity_and_refuses_what_is_not_one():
    f = parse_fleet(
        '[hosts.h1]\naddress = "x"\n[alerts.severity]\nrun-stalled = "critical"\nnew-stray = "warning"\n',
        "hosts.toml",
    )
    assert f.alerts.severity == (("new-stray", "warning"), ("run-stalled", "critical"))
    e = AlertEngine(f.alerts)
    e.evaluate(snap(T0 - 5))
    out = e.evaluate(everything_wrong(T0))
    assert {
        (a.rule, a.subject): a.severity for a in out if a.rule in ("run-stalled", "new-stray")
    } == {
        ("run-stalled", "/r/a"): "critical",
        ("new-stray", "c-1"): "warning",
        ("new-stray", "c-2"): "warning",
    }
    for table, message in [
        (
            'severity = { run-stalled = "urgent" }',
            "run-stalled must be one of critical, warning, info, not 'urgent'",
        ),
        ('severity = { stalled = "info" }', "unknown rule 'stalled'"),
        ('severity = "critical"', "key 'severity' must be a table of rule = severity"),
    ]:
        with pytest.raises(ConfigError) as err:
            parse_alerts(tomllib.loads(table), "hosts.toml")
        assert message in str(err.value)


def test_a_saved_alert_keeps_its_severity_and_one_saved_before_severities_gets_its_rules():
    e = AlertEngine()
    e.evaluate(snap(T0, runs=(Run(host="h1", path="/r/a", name="a", state="stalled"),)))
    doc = json.loads(json.dumps(e.to_state()))
    assert doc["firing"][0]["severity"] == "warning"
    doc["firing"][0].pop("severity")
    again = AlertEngine(AlertConfig(severity=(("run-stalled", "critical"),)))
    assert again.load_state(doc) == [] and again.firing()[0].severity == "warning"
    # the next poll brings it to what the fleet file says now, without a new transition
    assert (
        again.evaluate(snap(T0 + 5, runs=(Run(host="h1", path="/r/a", name="a", state="stalled"),)))
        == []
    )
    assert again.firing()[0].severity == "critical"


# -- the command line ----------------------------------------------------------------------------
def test_fleetdeck_alerts_lists_by_severity_with_counts_and_json_carries_it(
    tmp_path, capsys, monkeypatch
):
    """A real poll of this machine: a run whose eval loss rises (overfitting, a warning) and a
    host that has not answered for long (host-down, critical, carried on from watch's state)."""
    from fleetdeck.cli.main import main

    from support.sshfleet import free_port

    runs = tmp_path / "runs"
    rising_evals(runs / "run-1")
    dead = (
        f'[hosts.dead]\naddress = "127.0.0.1"\nport = {free_port()}\nconnect_timeout = 3\n'
        f'known_hosts = "{tmp_path / "kh"}"\n'
    )
    fleet = local_fleet(tmp_path, runs, extra_hosts=dead)
    state_dir().mkdir(parents=True, exist_ok=True)
    (state_dir() / "alerts.json").write_text(json.dumps({"down_since": {"dead": 1000.0}}))
    assert main(["--hosts", str(fleet), "alerts", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(a["rule"], a["severity"]) for a in doc["alerts"]] == [
        ("host-down", "critical"),
        ("overfitting", "warning"),
    ]
    monkeypatch.setenv("COLUMNS", "300")
    assert main(["--hosts", str(fleet), "alerts"]) == 0
    out = capsys.readouterr().out
    assert "Alerts: 1 critical · 1 warning · 0 info firing" in out
    assert out.index("host-down") < out.index("overfitting")


# -- hooks and webhooks ------------------------------------------------------------------------------
class Got(BaseHTTPRequestHandler):
    bodies: list = []

    def do_POST(self) -> None:
        Got.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *a) -> None:
        pass


async def test_hooks_and_webhooks_carry_the_severity(tmp_path):
    from fleetdeck.backend.monitor.delivery.deliver import Deliverer

    Got.bodies = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Got)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    log = tmp_path / "hook.json"
    script = tmp_path / "hook.py"
    script.write_text(
        "import json, os, sys\n"
        f"open({str(log)!r}, 'a').write(json.dumps({{'argv': sys.argv[1:], "
        "'env': os.environ.get('FLEETDECK_SEVERITY'), 'stdin': json.loads(sys.stdin.read())}) + '\\n')\n"
    )
    d = Deliverer(
        (sys.executable, str(script), "[{severity}] {title}"),
        f"http://127.0.0.1:{srv.server_address[1]}/h",
        group_wait=0,
    )
    try:
        d.enqueue(
            [
                Alert("seat-check", "h1", "port 8000", "firing", T0, "nan"),
                Alert("new-stray", "h1", "c-1", "firing", T0, "stray", "info"),
            ]
        )
        await d.drain()
    finally:
        srv.shutdown()
        srv.server_close()
    got = [json.loads(x) for x in log.read_text().splitlines()]
    assert sorted((g["argv"][0], g["env"], g["stdin"]["severity"]) for g in got) == [
        ("[critical] ALERT seat-check on h1: port 8000", "critical", "critical"),
        ("[info] ALERT new-stray on h1: c-1", "info", "info"),
    ]
    assert sorted((b["rule"], b["severity"]) for b in Got.bodies) == [
        ("new-stray", "info"),
        ("seat-check", "critical"),
    ]


# -- the Alerts view --------------------------------------------------------------------------------
async def test_the_alerts_view_lists_by_severity_then_newest_with_counts_in_its_title():
    from fleetdeck.tui.widgets.keyed_table import KeyedTable

    from support.alert_polls import app_over, nan_run, stray, up

    stalled = Run(
        host="h1", path="/runs/run-8", name="run-8", state="stalled", reason="no progress"
    )
    app = app_over(
        (up("h1", schedules=(stray("h1", 1),)),),
        (up("h1", t=1005.0, schedules=(stray("h1", 1),), runs=(stalled,)),),
        (up("h1", t=1010.0, schedules=(stray("h1", 1),), runs=(stalled, nan_run("h1"))),),
    )
    async with app.run_test(size=(120, 40)) as pilot:
        from support.recorded import feed

        await feed(app, pilot, n=3)
        await pilot.press("5")
        await pilot.pause()
        table = app.screen.query_one("#alerts-table", KeyedTable)
        order = [app.screen.shown[k] for k in table.keys]
        assert [(a.rule, a.severity) for a in order] == [
            ("loss-nonfinite", "critical"),
            ("run-stalled", "warning"),
            ("new-stray", "info"),
        ]
        title = str(app.screen.query_one("#alerts-title").render())
        assert title == "Alerts: 1 critical · 1 warning · 1 info firing"
