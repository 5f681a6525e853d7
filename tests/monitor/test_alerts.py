"""The alert engine: each rule, one transition per change, hooks delivered exactly once
(a real command writing a file, a real HTTP server receiving the webhook), strict [alerts]."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fleetdeck.backend.fleet.config import ConfigError, parse_fleet
from fleetdeck.backend.fleet.models import (
    Disk,
    FleetSnapshot,
    Gpu,
    GpuProcess,
    HostSnapshot,
    Run,
    Schedule,
)
from fleetdeck.backend.fleet.seat_model import Seat
from fleetdeck.backend.monitor.delivery.deliver import Notifier
from fleetdeck.backend.monitor.delivery.payloads import hook_argv
from fleetdeck.backend.monitor.rules.alerts import (
    Alert,
    AlertConfig,
    AlertEngine,
    parse_alerts,
)
from fleetdeck.backend.monitor.seats import SeatCheck

T0 = 1_800_000_000.0


def host(name="h1", t=T0, **kw) -> HostSnapshot:
    return HostSnapshot(name=name, reachable=True, time=t, **kw)


def fleet(*hosts: HostSnapshot, t: float | None = None) -> FleetSnapshot:
    return FleetSnapshot(hosts=hosts, time=t if t is not None else hosts[0].time)


def rules(transitions: list[Alert]) -> list[tuple[str, str]]:
    return [(a.rule, a.state) for a in transitions]


def run(**kw) -> Run:
    return Run(host="h1", path="/runs/run-7", name="run-7", state=kw.pop("state", "running"), **kw)


def test_overfitting_fires_once_when_eval_loss_rises_twice_and_resolves_when_it_falls():
    e = AlertEngine()
    evals = [(25, 3.20), (50, 3.17), (75, 3.18)]
    assert e.evaluate(fleet(host(runs=(run(eval_losses=tuple(evals)),)))) == []  # one rise: not yet
    evals.append((100, 3.19))
    out = e.evaluate(fleet(host(t=T0 + 5, runs=(run(eval_losses=tuple(evals)),))))
    assert rules(out) == [("overfitting", "firing")]
    assert "best so far is step 50" in out[0].text and out[0].subject == "/runs/run-7"
    assert (
        e.evaluate(fleet(host(t=T0 + 10, runs=(run(eval_losses=tuple(evals)),)))) == []
    )  # no storm
    evals.append((125, 3.10))
    out = e.evaluate(fleet(host(t=T0 + 15, runs=(run(eval_losses=tuple(evals)),))))
    assert rules(out) == [("overfitting", "resolved")] and out[0].since == T0 + 15


def test_a_plateau_is_not_overfitting():
    e = AlertEngine()
    evals = ((25, 3.176), (50, 3.173), (75, 3.172), (100, 3.172))
    assert e.evaluate(fleet(host(runs=(run(eval_losses=evals),)))) == []


def test_stalled_nonfinite_and_spiking_runs():
    e = AlertEngine()
    losses = tuple((i, 2.0 - i * 0.01) for i in range(10)) + ((10, 9.5),)
    r1 = run(state="stalled", reason="no progress for 900s (step time 20.0s)")
    r2 = Run(
        host="h1",
        path="/runs/run-8",
        name="run-8",
        state="running",
        reason="loss is nan at step 40",
    )
    r3 = Run(host="h1", path="/runs/run-9", name="run-9", state="running", losses=losses)
    out = e.evaluate(fleet(host(runs=(r1, r2, r3))))
    assert sorted(rules(out)) == [
        ("loss-nonfinite", "firing"),
        ("loss-spike", "firing"),
        ("run-stalled", "firing"),
    ]
    spike = [a for a in out if a.rule == "loss-spike"][0]
    assert "step 10" in spike.text and spike.subject == "/runs/run-9"


def test_host_down_fires_only_after_the_threshold_and_a_down_host_keeps_its_other_alerts():
    e = AlertEngine(AlertConfig(host_down_after=60))
    stalled = run(state="stalled", reason="no progress")
    assert rules(e.evaluate(fleet(host(runs=(stalled,))))) == [("run-stalled", "firing")]
    down = HostSnapshot(
        name="h1", reachable=False, error="connection to h1 timed out after 5s", time=T0 + 10
    )
    assert e.evaluate(fleet(down)) == []  # down 0 s, and the stalled run is not "recovered"
    down = HostSnapshot(name="h1", reachable=False, error="timed out", time=T0 + 75)
    out = e.evaluate(fleet(down))
    assert rules(out) == [("host-down", "firing")] and out[0].since == T0 + 10
    out = e.evaluate(fleet(host(t=T0 + 80)))
    assert sorted(rules(out)) == [("host-down", "resolved"), ("run-stalled", "resolved")]


def disk(used: int, total: int = 100 * 2**30) -> Disk:
    return Disk(
        path="/tank",
        mount="/tank",
        fstype="zfs",
        total_bytes=total,
        used_bytes=used,
        free_bytes=total - used,
    )


def test_disk_full_eta_from_a_sustained_rate_over_the_window():
    e = AlertEngine(
        AlertConfig(disk_full_hours=24, disk_rate_min_span=300, for_=(("disk-full-eta", 0.0),))
    )
    gib = 2**30
    assert e.evaluate(fleet(host(disks=(disk(50 * gib),)))) == []
    assert (
        e.evaluate(fleet(host(t=T0 + 60, disks=(disk(51 * gib),)))) == []
    )  # too short a span to say
    for minute in range(2, 11):
        e.evaluate(fleet(host(t=T0 + 60 * minute, disks=(disk((50 + minute) * gib),))))
    # 1 GiB a minute, steadily; 40 GiB left at minute 10: 2400 s
    assert rules(e.firing()) == [("disk-full-eta", "firing")]
    assert e.disk_eta("h1", "/tank") == pytest.approx(2400)
    assert "40 min" in e.firing()[0].text
    # deleting checkpoints (used falls) resolves it
    out = e.evaluate(fleet(host(t=T0 + 700, disks=(disk(20 * gib),))))
    assert rules(out) == [("disk-full-eta", "resolved")]


def test_a_burst_of_writes_is_no_trend_and_a_trend_fires_only_after_its_for_duration():
    gib = 2**30
    e = AlertEngine()  # the defaults: a 30-min window, and disk-full-eta must hold for 10 min
    # 25 quiet minutes, then 5 GiB a minute for five minutes (25 GiB left): a burst, not a trend
    used = [50] * 26 + [55, 60, 65, 70, 75]
    for minute, u in enumerate(used):
        assert e.evaluate(fleet(host(t=T0 + 60 * minute, disks=(disk(u * gib),)))) == [], minute
    assert e.disk_eta("h1", "/tank") is None
    # a steady 0.5 GiB a minute: the ETA holds from minute 5 on, and fires ten minutes later
    e = AlertEngine()
    fired = []
    for minute in range(31):
        out = e.evaluate(
            fleet(host(t=T0 + 60 * minute, disks=(disk(int((50 + minute / 2) * gib)),)))
        )
        fired += [(minute, a.rule) for a in out]
    assert fired == [(15, "disk-full-eta")]


def test_disk_full_eta_never_fires_nor_stays_for_writing_that_stopped():
    """The report: it fired critical 4 minutes after writing stopped, free space flat. The fill
    rate must be recent (used grew within the last tenth of the window): a wait for `for` under
    way when writing stops starts over, and a firing alert resolves 3 minutes after it stopped."""
    gib = 2**30
    e = AlertEngine()  # 30-min window, for 10 min: steady writing from minute 0 fires at 15
    fired = []
    for minute in range(31):
        u = 50 + min(minute, 12) / 2  # 0.5 GiB a minute, then nothing from minute 12
        out = e.evaluate(fleet(host(t=T0 + 60 * minute, disks=(disk(int(u * gib)),))))
        fired += [(minute, a.rule, a.state) for a in out]
    assert fired == [] and e.disk_eta("h1", "/tank") is None
    e = AlertEngine()
    for minute in range(40):
        u = 50 + min(minute, 20) / 2  # fires at 15; writing stops at 20
        out = e.evaluate(fleet(host(t=T0 + 60 * minute, disks=(disk(int(u * gib)),))))
        fired += [(minute, a.rule, a.state) for a in out]
    assert fired == [(15, "disk-full-eta", "firing"), (23, "disk-full-eta", "resolved")]


def test_a_rule_with_a_for_duration_ignores_a_flap_and_keeps_waiting_across_a_restart():
    cfg = parse_alerts({"for": {"gpu-headroom": 120}}, "hosts.toml")
    assert cfg.for_seconds("gpu-headroom") == 120 and cfg.for_seconds("run-stalled") == 0
    seats = (Seat(host="h1", kind="vllm", port=8038, pid=10, pids=(10,)),)
    tight = gpu(40, [(10, 79000, "vllm")])
    roomy = gpu(40, [(10, 30000, "vllm")])
    e = AlertEngine(cfg)
    assert e.evaluate(fleet(host(gpus=(tight,), seats=seats))) == []
    assert (
        e.evaluate(fleet(host(t=T0 + 60, gpus=(roomy,), seats=seats))) == []
    )  # a flap: starts over
    assert e.evaluate(fleet(host(t=T0 + 90, gpus=(tight,), seats=seats))) == []
    again = AlertEngine(cfg)  # the watcher restarts: the wait carries on
    again.load_state(json.loads(json.dumps(e.to_state())))
    assert again.evaluate(fleet(host(t=T0 + 180, gpus=(tight,), seats=seats))) == []
    assert rules(again.evaluate(fleet(host(t=T0 + 210, gpus=(tight,), seats=seats)))) == [
        ("gpu-headroom", "firing")
    ]


def gpu(util: float, procs: list[tuple[int, float, str]], total: float = 81559) -> Gpu:
    return Gpu(
        index=0,
        name="H100",
        uuid="GPU-0",
        unified_memory=False,
        memory_total_mib=total,
        memory_used_mib=sum(p[1] for p in procs),
        utilization_pct=util,
        processes=tuple(GpuProcess(pid=p, user="op", used_mib=m, command=c) for p, m, c in procs),
    )


def test_gpu_headroom_under_the_floor_on_a_card_with_seats():
    seats = (
        Seat(host="h1", kind="vllm", port=8038, pid=10, pids=(10,), container={"name": "seat-38"}),
        Seat(host="h1", kind="vllm", port=8052, pid=20, pids=(20,), container={"name": "seat-52"}),
    )
    g = gpu(40, [(10, 0.38 * 81559 + 5000, "vllm"), (20, 0.52 * 81559 + 2000, "vllm")])
    out = AlertEngine().evaluate(fleet(host(gpus=(g,), seats=seats)))
    assert rules(out) == [("gpu-headroom", "firing")]
    assert "seat-38" in out[0].text and "under the 6 GiB floor" in out[0].text
    # a training card that is full but serves nothing is not a headroom alert
    assert AlertEngine().evaluate(fleet(host(gpus=(g,), seats=()))) == []


def test_an_idle_holder_fires_after_thirty_idle_minutes_and_never_for_seats_or_runs():
    e = AlertEngine()
    procs = [
        (5, 3000, "python notebook.py"),
        (6, 9000, "vllm serve m"),
        (7, 9000, "fleetdeck train r.toml"),
    ]
    seats = (Seat(host="h1", kind="vllm", port=8000, pid=6, pids=(6,)),)
    runs = (run(pid=7),)
    for minute in (0, 10, 29):
        assert (
            e.evaluate(
                fleet(host(t=T0 + 60 * minute, gpus=(gpu(0, procs),), seats=seats, runs=runs))
            )
            == []
        )
    out = e.evaluate(fleet(host(t=T0 + 60 * 31, gpus=(gpu(0, procs),), seats=seats, runs=runs)))
    assert rules(out) == [("idle-holder", "firing")] and out[0].subject == "pid 5"
    # the card gets busy: resolved
    out = e.evaluate(fleet(host(t=T0 + 60 * 32, gpus=(gpu(80, procs),), seats=seats, runs=runs)))
    assert rules(out) == [("idle-holder", "resolved")]


def test_stray_schedules_seat_checks_and_seat_restarts():
    e = AlertEngine(AlertConfig(event_hold_minutes=10))
    stray = Schedule(
        id="cron:abc",
        host="h1",
        kind="crontab",
        user="op",
        spec="37 * * * *",
        command="check-on-run.sh",
        source="crontab",
        stray=True,
        reasons=("unacknowledged",),
    )
    seat = Seat(
        host="h1",
        kind="vllm",
        port=8000,
        pid=6,
        restarts=2,
        oom_killed=False,
        container={"name": "seat-52"},
    )
    bad = SeatCheck(
        host="h1",
        port=8000,
        sound=False,
        signature="logprob-unserialisable",
        message="Out of range float values are not JSON compliant: nan",
    )
    out = e.evaluate(fleet(host(schedules=(stray,), seats=(seat,))), checks={seat.key: bad})
    assert sorted(rules(out)) == [("new-stray", "firing"), ("seat-check", "firing")]
    assert "logprob-unserialisable" in [a for a in out if a.rule == "seat-check"][0].text
    restarted = Seat(
        host="h1",
        kind="vllm",
        port=8000,
        pid=9,
        restarts=3,
        oom_killed=True,
        container={"name": "seat-52"},
    )
    ok = SeatCheck(host="h1", port=8000, sound=True, signature=None, message="fine")
    out = e.evaluate(fleet(host(t=T0 + 5, seats=(restarted,))), checks={seat.key: ok})
    assert sorted(rules(out)) == [
        ("new-stray", "resolved"),
        ("seat-check", "resolved"),
        ("seat-restart", "firing"),
    ]
    text = [a for a in out if a.rule == "seat-restart"][0].text
    assert "RestartCount 3" in text and "OOM-killed" in text
    assert e.evaluate(fleet(host(t=T0 + 60, seats=(restarted,)))) == []
    out = e.evaluate(fleet(host(t=T0 + 700, seats=(restarted,))))
    assert rules(out) == [("seat-restart", "resolved")]


def test_a_stray_command_with_hostile_bytes_is_escaped_in_the_alert_text():
    e = AlertEngine()
    cmd = "printf 'caf\udce9'\n\x1b[2Jrm -rf ~"  # an undecodable byte, a newline, an escape
    stray = Schedule(
        id="c-1",
        host="h1",
        kind="crontab",
        user="op",
        spec="* * * * *",
        command=cmd,
        source="crontab",
        stray=True,
        reasons=("unacknowledged",),
    )
    (a,) = e.evaluate(fleet(host(schedules=(stray,))))
    assert "\\xe9" in a.text and "\\n" in a.text and "\\x1b" in a.text
    assert "\n" not in a.text and "\x1b" not in a.text and "\udce9" not in a.text


def test_state_survives_a_restart_of_the_engine():
    e = AlertEngine()
    e.evaluate(fleet(host(runs=(run(state="stalled"),))))
    again = AlertEngine()
    again.load_state(json.loads(json.dumps(e.to_state())))
    assert again.evaluate(fleet(host(t=T0 + 5, runs=(run(state="stalled"),)))) == []
    assert [a.rule for a in again.firing()] == ["run-stalled"]
    broken = AlertEngine()
    broken.load_state({"firing": [{"rule": "x"}]})
    assert broken.firing() == []


def test_disabled_rules_are_not_judged():
    e = AlertEngine(AlertConfig(disabled=("run-stalled",)))
    assert e.evaluate(fleet(host(runs=(run(state="stalled"),)))) == []


# -- the fleet file ------------------------------------------------------------------------------
BASE = '[hosts.h1]\naddress = "x"\n'


def test_alerts_table_is_parsed_into_the_fleet():
    f = parse_fleet(
        BASE + "[alerts]\nhost_down_after = 30\ngpu_headroom_floor_gib = 4.5\n"
        'on_alert = ["notify-send", "{title}", "{text}"]\nwebhook = "http://127.0.0.1:9/x"\n'
        'disabled = ["idle-holder"]\n',
        "hosts.toml",
    )
    assert f.alerts == AlertConfig(
        host_down_after=30.0,
        gpu_headroom_floor_gib=4.5,
        on_alert=("notify-send", "{title}", "{text}"),
        webhook="http://127.0.0.1:9/x",
        disabled=("idle-holder",),
    )
    assert parse_fleet(BASE, "hosts.toml").alerts is None


@pytest.mark.parametrize(
    "table,message",
    [
        ("hostdown_after = 3", "hosts.toml: [alerts]: unknown key 'hostdown_after'"),
        ('host_down_after = "5m"', "key 'host_down_after' must be a number"),
        (
            "host_down_after = 0",
            "host_down_after = 0 is out of range: key 'host_down_after' must be between 1 and 604800",
        ),
        ("loss_spike_factor = 1", "must be greater than 1"),
        ('disabled = ["disk"]', "unknown rule 'disk'"),
        ('on_alert = "notify-send {title}"', "key 'on_alert' must be a list of strings"),
        ("on_alert = []", "must name a command"),
        ('webhook = "file:///etc/passwd"', "must be an http:// or https:// URL"),
        ("seat_check_interval = true", "must be a number"),
        ("for = 60", "key 'for' must be a table of rule = seconds"),
        ("for = { disk = 60 }", "unknown rule 'disk'"),
        ("for = { disk-full-eta = -1 }", "disk-full-eta must be a number of seconds, 0 or more"),
        ("for_ = []", "unknown key 'for_'"),
    ],
)
def test_a_bad_alerts_table_names_the_key(table, message):
    with pytest.raises(ConfigError) as e:
        parse_alerts(__import__("tomllib").loads(table), "hosts.toml")
    assert message in str(e.value)


# -- delivery ------------------------------------------------------------------------------------
def test_placeholders_are_replaced_once_inside_each_argument():
    a = Alert("seat-check", "h1", "port 8000", "firing", T0, "text with {title} and $(rm -rf ~)")
    argv = hook_argv(("notify-send", "{title}", "[{state}] {text}"), a)
    assert argv == [
        "notify-send",
        "ALERT seat-check on h1: port 8000",
        "[firing] text with {title} and $(rm -rf ~)",
    ]


class Hook(BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self) -> None:
        Hook.received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *a) -> None:
        pass


@pytest.fixture
def webhook():
    Hook.received = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/hook", Hook.received
    srv.shutdown()
    srv.server_close()


async def test_each_transition_is_delivered_exactly_once_to_command_and_webhook(tmp_path, webhook):
    url, received = webhook
    log = tmp_path / "hook.log"
    script = tmp_path / "hook.py"
    script.write_text("import sys\nopen(sys.argv[1], 'a').write(repr(sys.argv[2:]) + '\\n')\n")
    cfg = AlertConfig(
        on_alert=(sys.executable, str(script), str(log), "{state}", "{title}", "{text}"),
        webhook=url,
    )
    e, n = AlertEngine(cfg), Notifier(cfg)
    stalled = (run(state="stalled", reason="no progress for 900s"),)
    for i, runs in enumerate([stalled, stalled, stalled, (), ()]):
        warnings = await n.deliver(e.evaluate(fleet(host(t=T0 + i, runs=runs))))
        assert warnings == []
    lines = log.read_text().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("['firing', 'ALERT run-stalled on h1: /runs/run-7'")
    assert lines[1].startswith("['resolved', 'RESOLVED run-stalled on h1")
    assert [(r["rule"], r["state"]) for r in received] == [
        ("run-stalled", "firing"),
        ("run-stalled", "resolved"),
    ]
    assert received[0]["text"] == "run run-7 on h1 is stalled: no progress for 900s"


async def test_a_failing_hook_is_a_warning_not_a_crash(tmp_path):
    cfg = AlertConfig(
        on_alert=(str(tmp_path / "missing-notifier"), "{title}"), webhook="http://127.0.0.1:9/"
    )
    out = await Notifier(cfg).deliver([Alert("host-down", "h1", "h1", "firing", T0, "down")])
    assert len(out) == 2 and "could not start" in out[0] and "webhook" in out[1]


def test_a_stray_loop_pages_only_once_it_has_lasted_a_minute_and_a_crontab_entry_at_once():
    from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot, Schedule
    from fleetdeck.backend.monitor.rules.alerts import LOOP_SETTLE_S, AlertEngine

    loop = Schedule(
        id="l-" + "a" * 32,
        host="h",
        kind="loop",
        user="ops",
        spec="loop",
        command="bash x.sh",
        source="process",
        stray=True,
        reasons=("unacknowledged",),
        pid=42,
    )
    cron = Schedule(
        id="c-" + "b" * 32,
        host="h",
        kind="crontab",
        user="ops",
        spec="* * * * *",
        command="/usr/bin/true",
        source="crontab",
        stray=True,
        reasons=("unacknowledged",),
    )

    def snap(t, *scheds):
        return FleetSnapshot(
            hosts=(HostSnapshot(name="h", reachable=True, time=t, schedules=scheds),), time=t
        )

    e = AlertEngine()
    assert (
        e.evaluate(snap(990.0)) == []
    )  # the first look (nothing stray then): what comes later is news
    fired = e.evaluate(snap(1000.0, loop, cron))
    assert [(a.rule, a.subject) for a in fired] == [("new-stray", cron.id)]
    # a loop that ended within the minute never paged
    assert e.evaluate(snap(1030.0, cron)) == []
    assert e.evaluate(snap(1040.0, loop, cron)) == []
    fired = e.evaluate(snap(1040.0 + LOOP_SETTLE_S, loop, cron))
    assert [(a.rule, a.subject) for a in fired] == [("new-stray", loop.id)]
    # a loop naming a path that does not exist is wrong at once
    dead = Schedule(
        id="l-" + "d" * 32,
        host="h",
        kind="loop",
        user="ops",
        spec="loop",
        command="bash /gone/x.sh",
        source="process",
        stray=True,
        reasons=("dead-target", "unacknowledged"),
        pid=43,
    )
    fired = e.evaluate(snap(2000.0, loop, cron, dead))
    assert [(a.rule, a.subject) for a in fired] == [("new-stray", dead.id)]


def test_a_seat_check_alert_resolves_when_its_seat_is_gone_and_says_so():
    """A seat stopped with K (verified gone) takes its seat-check alert with it, with the reason
    in the resolve; its stale check never pages again."""
    e = AlertEngine(AlertConfig())
    seat = Seat(host="h1", kind="vllm", port=28003, pid=6, restarts=0, oom_killed=False)
    bad = SeatCheck(host="h1", port=28003, sound=False, signature="nan", message="NaN logprobs")
    out = e.evaluate(fleet(host(seats=(seat,))), checks={seat.key: bad})
    assert rules(out) == [("seat-check", "firing")]
    out = e.evaluate(fleet(host(t=T0 + 30, seats=())), checks={seat.key: bad})
    assert rules(out) == [("seat-check", "resolved")]
    assert "seat 28003 on h1 is gone" in out[0].text
    assert e.evaluate(fleet(host(t=T0 + 86400, seats=())), checks={seat.key: bad}) == []


def test_an_alert_whose_run_folder_card_or_host_is_gone_resolves_saying_so():
    """An alert ends when its subject does: a run folder removed, a GPU no longer present, a
    host taken out of the fleet file. Each resolves with the reason (never the words it fired
    with, which would read as the trouble again), once; a host that does not answer is not a
    host gone, and an alert whose subject is still there resolves with its own words."""
    from dataclasses import replace

    e = AlertEngine(AlertConfig(for_=(("gpu-hot", 0.0),)))
    rising = tuple((25 * i, v) for i, v in enumerate((3.2, 3.17, 3.18, 3.19)))
    hot = replace(gpu(40, []), index=1, temperature_c=88, temperature_slowdown_c=90)
    other = replace(run(eval_losses=rising), path="/runs/run-8", name="run-8")
    h1 = host(runs=(run(eval_losses=rising), other), gpus=(hot,))
    h2 = host("h2", runs=(run(eval_losses=rising),))
    out = e.evaluate(fleet(h1, h2))
    first = {(a.host, a.subject): a for a in out}
    assert sorted((a.rule, a.host, a.subject) for a in out) == [
        ("gpu-hot", "h1", "GPU1"),
        ("overfitting", "h1", "/runs/run-7"),
        ("overfitting", "h1", "/runs/run-8"),
        ("overfitting", "h2", "/runs/run-7"),
    ]
    # h2 does not answer: nothing of it resolves
    down = HostSnapshot(name="h2", reachable=False, error="timed out", time=T0 + 30)
    assert e.evaluate(fleet(host(t=T0 + 30, runs=h1.runs, gpus=h1.gpus), down)) == []
    # run-7's folder removed, the card gone from the listing, h2 out of the fleet file
    out = e.evaluate(fleet(host(t=T0 + 60, runs=(other,), gpus=())))
    said = {(a.host, a.subject): a for a in out}
    assert {a.state for a in out} == {"resolved"} and len(out) == 3, out
    assert said[("h1", "/runs/run-7")].text.startswith(
        "run folder /runs/run-7 on h1 is gone (not listed at "
    )
    assert said[("h1", "GPU1")].text.startswith("GPU1 on h1 is no longer present (not listed at ")
    assert said[("h2", "/runs/run-7")].text.startswith(
        "h2 is no longer in the fleet file (not polled at "
    )
    assert e.evaluate(fleet(host(t=T0 + 90, runs=(other,), gpus=()))) == []  # once
    # a subject still there that turned sound keeps its own words
    fell = replace(other, eval_losses=(*rising, (100, 3.0)))
    (r,) = e.evaluate(fleet(host(t=T0 + 120, runs=(fell,))))
    fired = [a for a in e.alerts() if a.subject == "/runs/run-8" and a.state == "resolved"]
    assert r.state == "resolved" and r.text == first[("h1", "/runs/run-8")].text == fired[0].text


def test_a_removed_stray_that_comes_back_is_said_first():
    """The ':37 check on the run ... inform when ready' line, removed with `schedules remove`,
    back with the same id (or the same command under another): `stray-returned`, a warning
    naming who removed it, when, and the audit record, above every unacknowledged line."""
    from fleetdeck.backend.actions import audit

    cmd = "/home/op/bin/check-run.sh run-7 # inform when ready"
    audit.audit(
        "schedule-remove", "h1", "done", schedule={"id": "c-37", "command": cmd, "kind": "crontab"}
    )
    audit.audit(
        "schedule-remove", "h1", "refused", schedule={"id": "c-99", "command": "other", "kind": "x"}
    )

    def stray(sid: str, command: str) -> Schedule:
        return Schedule(
            id=sid,
            host="h1",
            kind="crontab",
            user="op",
            spec="37 * * * *",
            command=command,
            source="crontab",
            stray=True,
            reasons=("unacknowledged",),
        )

    e = AlertEngine(AlertConfig())
    back = stray("c-37", cmd)
    again = stray("c-38", "  /home/op/bin/check-run.sh   run-7 # inform when ready")
    other = stray("c-99", "other")
    out = e.evaluate(fleet(host(t=time.time() + 5, schedules=(back, again, other))))
    got = {(a.rule, a.subject): a for a in out}
    assert ("stray-returned", "c-37") in got and ("stray-returned", "c-38") in got
    assert ("stray-returned", "c-99") not in got  # a refused removal removed nothing
    a = got[("stray-returned", "c-37")]
    assert a.severity == "warning" and "came back: removed" in a.text and "audit #1" in a.text
    assert e.alerts()[0].rule == "stray-returned"  # above every info line


def test_the_first_look_names_the_hourly_check_on_the_run_before_a_nightly_backup():
    """The first look names its most urgent schedule by a stated rule, and its command is never
    cut before the words that tell what it is."""
    from fleetdeck.backend.monitor.rules.strays import command_text

    def stray(sid: str, spec: str, command: str) -> Schedule:
        return Schedule(
            id=sid,
            host="h1",
            kind="crontab",
            user="op",
            spec=spec,
            command=command,
            source="crontab",
            stray=True,
            reasons=("unacknowledged",),
        )

    long_check = (
        "cd /home/op/projects/erp-tune/experiments/2026-11 && /usr/bin/python3 scripts/"
        "status_probe.py --run run-7 --quiet --no-color >> /tmp/probe.log 2>&1 # check on "
        "the run, inform when ready"
    )
    backup = stray("c-1", "0 3 * * *", "/usr/local/bin/nightly-backup.sh")
    check = stray("c-2", "37 * * * *", long_check)
    e = AlertEngine(AlertConfig())
    out = e.evaluate(fleet(host(schedules=(backup, check))))
    (a,) = [x for x in out if x.rule == "new-stray"]
    most = a.text.split("the most urgent", 1)[1]
    assert "speaks of waiting" in most and "inform when ready" in most, a.text
    assert "nightly-backup" not in most
    cut = command_text(long_check)
    assert len(cut) <= 120 and cut.startswith("cd /home/op") and cut.endswith("inform when ready")
