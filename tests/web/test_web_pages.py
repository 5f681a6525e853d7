"""The web view's pages drawn from one poll, without a server: every string a host can send is
text in the HTML (element and attribute), the chart survives non-finite and long series, the
Alerts page shows severity, silences and held notices, Schedules lists stray first, and a page
is drawn once per poll however many readers ask."""

from __future__ import annotations

import html.parser
import time

from fleetdeck.backend.fleet.models import Disk, FleetSnapshot, Gpu, HostSnapshot, Run, Schedule
from fleetdeck.backend.monitor.rules.alerts import Alert
from fleetdeck.backend.monitor.silence_model import Silence
from fleetdeck.backend.web.chart import POINTS_MAX, loss_chart
from fleetdeck.backend.web.lists import alerts_body, schedules_body
from fleetdeck.backend.web.pages import fleet_body, run_body
from fleetdeck.backend.web.view_state import Seen, ViewState

EVIL = "<script>alert(1)</script>\"' onmouseover=x() \x1b[31m\n&amp;"


class Tags(html.parser.HTMLParser):
    """Every tag and attribute the markup holds, and its text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [k for k, _v in attrs]

    def handle_data(self, data):
        self.text.append(data)


def parsed(markup: str) -> Tags:
    t = Tags()
    t.feed(markup)
    return t


def _snap() -> FleetSnapshot:
    run = Run(
        host="h1",
        path=f"/runs/{EVIL}",
        name=EVIL,
        state="running",
        step=40,
        max_steps=100,
        loss=1.5,
        losses=tuple((s, 2.0 - s / 100) for s in range(1, 41)),
        eval_losses=((20, 1.9), (40, float("nan"))),
        reason=EVIL,
    )
    gpu = Gpu(0, EVIL, "GPU-1", False, 80000.0, 1000.0, 5.0, temperature_c=50)
    sched = [
        Schedule("a", "h1", "crontab", "op", "* * * * *", "echo fine", "crontab", stray=False),
        Schedule(
            "b",
            "h1",
            "crontab",
            EVIL,
            EVIL,
            EVIL,
            "crontab",
            stray=True,
            reasons=("unacknowledged",),
        ),
    ]
    h1 = HostSnapshot(
        "h1",
        True,
        latency_ms=3.0,
        gpus=(gpu,),
        disks=(Disk(EVIL, EVIL, "ext4", 100, 40, 60),),
        runs=(run,),
        schedules=tuple(sched),
    )
    h2 = HostSnapshot("h2", False, error=EVIL, error_code="timeout")
    return FleetSnapshot((h1, h2), time.time())


def _seen() -> Seen:
    now = time.time()
    firing = Alert("run-stalled", "h1", EVIL, "firing", now - 60, EVIL, "critical")
    silence = Silence("s1", "h1", None, None, now - 10, now + 3600, EVIL, EVIL)
    held = ({"rule": "run-finished", "host": "h1", "subject": EVIL, "text": EVIL}, now + 3600)
    return Seen(1, _snap(), (firing,), (held,), (silence,), {firing.key: silence}, now)


def test_every_host_string_is_text_in_every_page():
    seen = _seen()
    for body in (
        fleet_body(seen),
        run_body(seen, "h1", f"/runs/{EVIL}"),
        alerts_body(seen),
        schedules_body(seen),
    ):
        t = parsed(body)
        assert "script" not in t.tags and "onmouseover" not in t.attrs, body
        assert "\x1b" not in body and "<script>" not in body
        # what the host sent reads as itself (its control bytes escaped for display)
        assert any("<script>alert(1)</script>" in x for x in t.text), body


def test_the_run_page_has_its_chart_and_the_fleet_links_to_it():
    seen = _seen()
    fleet = fleet_body(seen)
    assert 'href="/run?host=h1&amp;path=%2Fruns%2F%3Cscript%3E' in fleet
    body = run_body(seen, "h1", f"/runs/{EVIL}")
    t = parsed(body)
    assert {"svg", "polyline", "circle"} <= set(t.tags)
    assert "no run" in run_body(seen, "h1", "/elsewhere")


def test_the_chart_skips_what_is_not_finite_and_thins_a_long_series():
    assert loss_chart([(1, float("nan")), (2, float("inf"))], [], "t") == ""
    svg = loss_chart([(s, 1.0 / s) for s in range(1, 100_000)], [(5, 0.5)], "t")
    points = svg.split('class="loss" points="')[1].split('"')[0].split()
    assert len(points) == POINTS_MAX
    assert "nan" not in svg and "inf" not in svg
    flat = loss_chart([(1, 2.0), (1, 2.0)], [], "t")  # one step, one value: still a drawing
    assert "<polyline" in flat


def test_alerts_show_severity_silences_and_held_notices():
    body = alerts_body(_seen())
    assert '<span class="sev critical">critical</span>' in body
    assert "Silences in force (1)" in body and "s1 until" in body
    assert "Notices held by a silence (1)" in body and "run-finished" in body


def test_schedules_stray_first():
    body = schedules_body(_seen())
    assert body.index('class="stray"') < body.index('class="known"')
    assert "1 stray" in body


def test_a_page_is_drawn_once_per_poll_whoever_asks():
    view = ViewState()
    view.update(_snap(), [], {})
    seen = view.latest()
    bodies = {view.drawn(seen, "fleet", lambda s: fleet_body(s).encode()) for _ in range(10)}
    assert len(bodies) == 1 and view.drawings == 1
    view.update(_snap(), [], {})
    assert view.wait_newer(seen.version, 0).version == seen.version + 1
    view.drawn(view.latest(), "fleet", lambda s: fleet_body(s).encode())
    assert view.drawings == 2
