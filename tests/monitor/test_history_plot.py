"""`fleetdeck history HOST --gpu N --plot`: one card's figure as a full-height plot, with the
host's events on the same time axis, from a real history database and audit log written by the
same recorder and audit writer `watch` and the actions use."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from fleetdeck.backend.actions.audit import audit
from fleetdeck.backend.fleet.models import FleetSnapshot, Gpu, HostSnapshot, Run
from fleetdeck.backend.fleet.seat_model import Seat
from fleetdeck.backend.monitor.history.store import History, history_path


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", "history", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TZ": "UTC"},
    )


def _incident(now: float, name: str = "gx") -> dict[str, float]:
    """Six hours of one poll a minute on host gx: GPU0 holds 93,257 MiB for a seat that is
    OOM-killed three hours in (its memory falls to 600 MiB for three minutes and comes back),
    the host does not answer for ten minutes at four hours, and GPU0 reports an Xid 79 at five.
    GPU1 has an Xid of its own, which is not GPU0's event."""
    h = History(history_path())
    start = now - 6 * 3600
    when = {"restart": start + 3 * 3600, "down": start + 4 * 3600, "xid": start + 5 * 3600}
    for i in range(6 * 60):
        t = start + i * 60
        if when["down"] <= t < when["down"] + 600:
            host = HostSnapshot(name=name, reachable=False, error="timeout", time=t)
        else:
            dip = when["restart"] <= t < when["restart"] + 180
            cards = tuple(
                Gpu(
                    index=k,
                    name="NVIDIA H200",
                    uuid=f"GPU-{k}",
                    unified_memory=False,
                    memory_total_mib=143771.0,
                    memory_used_mib=600.0 if dip and k == 0 else 93257.0,
                    utilization_pct=90.0,
                    temperature_c=61,
                    power_w=600.0,
                )
                for k in (0, 1)
            )
            runs = (
                (
                    Run(
                        host=name,
                        path="/runs/run-8",
                        name="run-8",
                        state="running",
                        step=i,
                        loss=2.0,
                    ),
                )
                if t >= when["xid"] + 1800
                else ()
            )  # a run starts half an hour after the Xid
            seat = Seat(
                host=name,
                kind="vllm",
                port=8000,
                restarts=3 if t >= when["restart"] else 2,
                memory_by_gpu={0: 600.0 if dip else 92000.0},
            )
            host = HostSnapshot(
                name=name,
                reachable=True,
                time=t,
                latency_ms=20.0,
                gpus=cards,
                runs=runs,
                seats=(seat,),
            )
        h.record(FleetSnapshot(hosts=(host,), time=t))
    h.event(
        when["restart"] + 5,
        name,
        "alert-firing",
        "seat-restart vllm:8000",
        "seat vllm:8000 was OOM-killed and restarted (restarts 3)",
    )
    h.event(
        when["xid"],
        name,
        "alert-firing",
        "gpu-xid GPU0 Xid 79",
        "GPU0 on gx reported Xid 79 (at 05:00:00): GPU has fallen off the bus (reboot the host)",
    )
    h.event(when["xid"], name, "alert-firing", "gpu-xid GPU1 Xid 13", "GPU1 on gx reported Xid 13")
    h.event(when["xid"] + 60, "other", "alert-firing", "host-down other", "another host's event")
    h.close()
    return when


def test_the_plot_draws_the_card_and_its_events_on_one_axis():
    now = time.time()
    _incident(now)
    audit(
        "purge", "gx", "done", paths=[{"path": "/runs/old-\x1b[2J", "deleted": True, "bytes": 10}]
    )
    out = _cli("gx", "--gpu", "0", "--plot", "--since", "6h", "--width", "72", "--height", "8")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("gx GPU0 memory, the last 6h") and "peak 91.1G" in lines[0], lines[0]
    plot = lines[1:9]
    assert plot[0].lstrip().startswith("91.1G ┤") and plot[-1].lstrip().startswith("0B ┤")
    # the card is full most of the window; the column of the restart is the peak of its cell
    # (memory folds by its peak), the ten minutes down are blank columns
    body = [row.split("┤" if "┤" in row else "│", 1)[1] for row in plot]
    top = body[0]
    assert top.count("█") >= 60 and top.count(" ") >= 1, top
    lane = next(line for line in lines if line.lstrip().startswith("events"))
    marks = lane.split("events", 1)[1].strip()
    assert "×" in marks and all(m in marks for m in "1234")
    # the lane's marks come in time order: the restart, the host down, the Xid, the run starting,
    # then the purge now
    assert (
        marks.index("1") < marks.index("×") < marks.index("2") < marks.index("3") < marks.index("4")
    )
    legend = "\n".join(lines)
    assert "seat restart  seat vllm:8000 was OOM-killed and restarted (restarts 3)" in legend
    assert "Xid 79  GPU0 on gx reported Xid 79" in legend and "GPU has fallen off the bus" in legend
    assert "run started  /runs/run-8" in legend
    assert "purge  done: /runs/old-\\x1b[2J; 1 of 1 deleted" in legend and "\x1b" not in out.stdout
    assert "Xid 13" not in legend and "another host" not in legend
    assert "× the host answered none of its polls" in legend


def test_the_other_figures_and_what_is_refused():
    now = time.time()
    _incident(now)
    out = _cli(
        "gx", "--gpu", "0", "--plot", "--figure", "temperature", "--width", "40", "--height", "6"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("gx GPU0 temperature, the last 1d") and "peak 61°C" in out.stdout
    assert "100°C ┤" in out.stdout  # temperature's scale is at least 100 °C
    out = _cli("gx", "--gpu", "7", "--plot")
    assert (
        out.returncode == 0
        and out.stdout.strip() == "nothing recorded for GPU7 of gx in the last 1d00h"
    )
    for bad in (["--plot"], ["--gpu", "0"], ["--gpu", "0", "--seat", "8000", "--plot"]):
        out = _cli("gx", *bad)
        assert (
            out.returncode == 2 and "--plot goes with one of --gpu N or --seat PORT" in out.stderr
        )
    # a seat's own memory, by its port, with the host's events
    out = _cli("gx", "--seat", "8000", "--plot", "--since", "6h", "--width", "72", "--height", "6")
    assert out.returncode == 0, out.stderr
    assert (
        out.stdout.startswith("gx seat 8000:vllm memory, the last 6h00m")
        and "peak 89.8G" in out.stdout
    )
    assert "seat restart" in out.stdout and "Xid 13" not in out.stdout
    out = _cli("gx", "--seat", "9999", "--plot")
    assert (
        out.returncode == 0
        and out.stdout.strip() == "nothing recorded for seat 9999 of gx in the last 1d00h"
    )
    out = _cli("gx", "--gpu", "x", "--plot")
    assert out.returncode == 2 and "is not a GPU index" in out.stderr


async def test_the_history_view_shows_a_cards_incident_full_height_and_its_other_figures():
    """In the dashboard: `6`, then `c` picks the host's first card and the view is its incident
    plot with the events listed; `f` its temperature; `c` again the next card, then back to
    the sparklines."""
    from support.recorded import feed, fixture_app

    _incident(time.time(), name="gx10")
    app = fixture_app()
    async with app.run_test(size=(140, 44)) as pilot:
        await feed(app, pilot)
        await pilot.press("6")
        await pilot.pause()

        def shown_text() -> str:
            return str(app.screen.query_one("#history-chart").content)

        await pilot.press("c")
        await pilot.pause()
        text = shown_text()
        assert text.startswith("gx10 GPU0 memory, the last 1d00h"), text[:200]
        rows = [line for line in text.splitlines() if "┤" in line or "│" in line]
        assert len(rows) >= 44 - 16 - 1  # full height: the screen less its header, axis and events
        assert "seat restart" in text and "Xid 79" in text and "Xid 13" not in text
        await pilot.press("f")  # utilisation
        await pilot.press("f")  # temperature
        await pilot.pause()
        assert shown_text().startswith("gx10 GPU0 temperature") and "peak 61°C" in shown_text()
        await pilot.press("c")
        await pilot.pause()
        assert shown_text().startswith("gx10 GPU1 temperature") and "Xid 79" not in shown_text()
        await pilot.press("c")
        await pilot.pause()
        table = app.screen.query_one("#history-chart").content
        assert "gx10: the last 1d00h" in str(table.title)  # the sparklines again


def test_past_35_events_the_lane_shows_plus_and_the_list_counts_the_rest():
    from fleetdeck.backend.monitor.history.figures import Line
    from fleetdeck.backend.monitor.history.incident import Event, Incident
    from fleetdeck.show.incident_plot import incident_plot

    line = Line(cells=[1000.0] * 40, first=1000, first_t=0, last=1000, last_t=1, peak=1000, rows=40)
    inc = Incident(
        host="h",
        gpu=0,
        series="0:u",
        figure="memory",
        since=0,
        until=2400,
        step=60,
        line=line,
        events=tuple(Event(60 * k + 1, "seat restart", f"restart {k}") for k in range(40)),
    )
    text = incident_plot(inc, 4).plain
    lane = (
        next(x for x in text.splitlines() if x.lstrip().startswith("events"))
        .split("events", 1)[1]
        .strip()
    )
    assert lane == "123456789abcdefghijklmnopqrstuvwxyz+++++"
    assert "restart 34" in text and "restart 35" not in text
    assert text.rstrip().endswith("… 5 more, marked + on the lane (a shorter window lists them)")


def test_a_gpu_figure_asked_of_a_host_without_a_gpu_says_so():
    """A CPU-only host: not "nothing recorded" (which reads as a gap), but that it has no GPU."""
    now = time.time()
    h = History(history_path())
    for i in range(5):
        t = now - 600 + i * 60
        h.record(FleetSnapshot(hosts=(HostSnapshot(name="cpu", reachable=True, time=t),), time=t))
    h.close()
    out = _cli("cpu", "--gpu", "0", "--plot")
    assert out.returncode == 1 and "cpu has no GPU" in out.stderr, (out.stdout, out.stderr)
    assert "nothing recorded" not in out.stdout


def test_a_failed_seat_check_is_one_event_not_two():
    """`watch` writes a failed check twice over: the check's own event (`seat-check`, its
    verdict) and the seat-check alert it fires (`alert-firing`); the plot lists it once."""
    now = time.time()
    when = _incident(now)
    h = History(history_path())
    t = when["xid"] + 900
    h.event(t, "gx", "seat-check", "port 8000", "logprob-nan: NaN logprobs in 3 of 3 tokens")
    h.event(
        t,
        "gx",
        "alert-firing",
        "seat-check port 8000",
        "seat vllm:8000 on gx failed its check: NaN logprobs in 3 of 3 tokens",
    )
    h.event(t + 300, "gx", "seat-check", "port 8000", "sound")
    h.close()
    out = _cli("gx", "--seat", "8000", "--plot", "--since", "6h", "--width", "72", "--height", "6")
    assert out.returncode == 0, out.stderr
    checks = [x for x in out.stdout.splitlines() if "seat check" in x]
    assert len(checks) == 2, out.stdout  # the failed one once, then the sound one
    assert "logprob-nan" in checks[0] and "sound" in checks[1]
