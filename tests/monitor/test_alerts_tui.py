"""The dashboard's Alerts view (`5`) and badge, fed recorded polls through the FleetPolled path."""

from __future__ import annotations

import asyncio

from fleetdeck.tui.widgets.keyed_table import KeyedTable

from support.recorded import cell_text, feed, fixture_app
from support.seat_polls import _host, _seat, _seats_app


async def test_alerts_view_lists_what_fires_and_the_header_carries_a_badge():
    app = fixture_app()
    app.alert_watch.enabled = True  # a replay is not judged unless asked
    base = app.sub_title
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        firing = app.alert_watch.firing
        assert firing, "the recorded fleet has stray schedules and a stalled run"
        assert (
            app.sub_title
            == f"⚠ {len(firing)} alert{'' if len(firing) == 1 else 's'} (press 5) · {base}"
        )
        await pilot.press("5")
        await pilot.pause()
        # on the Alerts view the badge does not tell the user to press the key they just pressed
        assert app.sub_title == f"⚠ {len(firing)} alert{'' if len(firing) == 1 else 's'} · {base}"
        table = app.screen.query_one("#alerts-table", KeyedTable)
        assert len(table.keys) == len(firing)
        rules = {cell_text(table, k, "rule") for k in table.keys}
        assert rules == {a.rule for a in firing}
        assert all(cell_text(table, k, "state") == "firing" for k in table.keys)
        detail = str(app.screen.query_one("#alerts-detail").render())
        assert firing[0].text[:40] in detail.replace("\n", " ") or firing[0].title in detail
        await pilot.press("1")
        await pilot.pause()
        assert app.sub_title.endswith(f"(press 5) · {base}")


async def test_a_replay_is_not_judged_by_default():
    app = fixture_app()
    base = app.sub_title
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        assert app.alert_watch.firing == [] and app.sub_title == base
        await pilot.press("5")
        assert app.screen.query_one("#alerts-table", KeyedTable).keys == []
        assert "No alerts" in str(app.screen.query_one("#alerts-detail").render())


async def test_seats_headroom_bars_and_a_seat_check_from_the_dashboard(tmp_path):
    """A recorded poll with two seats on one card; `c` checks the highlighted seat for real
    (a tiny model served on this machine, the `local` host's helper asking 127.0.0.1)."""
    import sys

    import pytest

    from fleetdeck.backend.fleet.config import parse_fleet
    from fleetdeck.backend.fleet.models import FleetSnapshot, Gpu, GpuProcess, HostSnapshot
    from fleetdeck.backend.fleet.seat_model import Seat
    from fleetdeck.backend.monitor.seats import recorded_checks
    from fleetdeck.tui.app import FleetdeckApp
    from fleetdeck.tui.sources import RecordedSource

    from support.seats import start_server

    pytest.importorskip("transformers")
    server, port = start_server("--nan")
    try:
        card = Gpu(
            index=0,
            name="H100",
            uuid="GPU-0",
            unified_memory=False,
            memory_total_mib=81559,
            memory_used_mib=77000,
            utilization_pct=30,
            processes=(
                GpuProcess(pid=11, user="svc", used_mib=31000, command="vllm"),
                GpuProcess(pid=12, user="svc", used_mib=43000, command="vllm"),
            ),
        )
        seats = (
            Seat(host="local", kind="vllm", port=port, model="random:tiny", pid=11, pids=(11,)),
            Seat(
                host="local",
                kind="vllm",
                port=port + 1,
                model="big",
                pid=12,
                pids=(12,),
                container={"name": "seat-52"},
            ),
        )
        snap = FleetSnapshot(
            hosts=(
                HostSnapshot(name="local", reachable=True, time=1.0, gpus=(card,), seats=seats),
            ),
            time=1.0,
        )
        fleet = parse_fleet(
            f'[hosts.local]\nlocal = true\npython = "{sys.executable}"\n', "fixture"
        )
        app = FleetdeckApp(fleet, RecordedSource([snap]), autopoll=False, clock=lambda: 2.0)
        app.alert_watch.enabled = True
        async with app.run_test(size=(120, 40)) as pilot:
            await feed(app, pilot, 1)
            assert [a.rule for a in app.alert_watch.firing] == ["gpu-headroom"]  # 4.5 GiB free < 6
            await pilot.press("5")
            table = app.screen.query_one("#seats-table", KeyedTable)
            assert [cell_text(table, k, "seat") for k in table.keys] == [f"vllm:{port}", "seat-52"]
            bars = str(app.screen.query_one("#seats-headroom").render())
            # 81559 - 77000 MiB free; each seat's share named
            assert "local GPU0 " in bars and "4.5G free of 79.6G" in bars
            assert f"vllm:{port} 30.3G" in bars and "seat-52 42.0G" in bars
            await pilot.press("c")
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert cell_text(table, table.keys[0], "check") == "logprob-unserialisable"
        assert recorded_checks()[f"local:{port}"].signature == "logprob-unserialisable"
    finally:
        server.kill()
        server.wait()


async def test_the_dashboard_opens_with_the_last_hour_of_sparklines_from_history():
    from fleetdeck.backend.fleet.config import parse_fleet
    from fleetdeck.backend.fleet.models import FleetSnapshot, Gpu, HostSnapshot
    from fleetdeck.backend.monitor.history.store import History
    from fleetdeck.tui.app import FleetdeckApp
    from fleetdeck.tui.sources import RecordedSource

    t = 1_800_000_000.0

    def poll(at: float, used: float) -> FleetSnapshot:
        g = Gpu(
            index=0,
            name="GB10",
            uuid="GPU-0",
            unified_memory=False,
            memory_total_mib=1000,
            memory_used_mib=used,
            utilization_pct=0,
        )
        return FleetSnapshot(
            hosts=(HostSnapshot(name="local", reachable=True, time=at, gpus=(g,)),), time=at
        )

    h = History()
    for m in range(90, 0, -1):  # an hour and a half of minutes before now: the last hour is kept
        h.record(poll(t - 60 * m, 10 * m))
    h.close()
    fleet = parse_fleet("[hosts.local]\nlocal = true\n", "fixture")
    app = FleetdeckApp(fleet, RecordedSource([poll(t, 500)]), autopoll=False, clock=lambda: t)
    app.alert_watch.enabled = True
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot, 1)
        series = list(app.state.history[("local", 0)])
        assert len(series) == 60  # 59 minutes of history (the sparkline holds 60), then now
        assert series[0] == 0.59 and series[-2] == 0.01 and series[-1] == 0.5
        assert len(app.state.spark[("local", 0)]) == len(series)


async def test_seats_whose_memory_no_card_lists_are_named_not_called_unseen():
    """Eight seats on a unified-memory box and two in containers on a discrete card: before,
    "No serving seats seen." under the table of ten."""
    from fleetdeck.backend.fleet.models import Gpu, GpuProcess

    spark = Gpu(
        index=0,
        name="GB10",
        uuid="GPU-0",
        unified_memory=True,
        memory_total_mib=120000,
        memory_used_mib=90000,
        utilization_pct=40,
    )
    card = Gpu(
        index=0,
        name="H100",
        uuid="GPU-1",
        unified_memory=False,
        memory_total_mib=81559,
        memory_used_mib=60000,
        utilization_pct=30,
        processes=(GpuProcess(pid=4242, user="root", used_mib=59000, command="python3 other"),),
    )
    hosts = [
        _host("spark", (spark,), tuple(_seat("spark", 8000 + i, 100 + i) for i in range(8))),
        _host("box", (card,), (_seat("box", 9000, 700), _seat("box", 9001, 701))),
    ]
    app = _seats_app(hosts)
    async with app.run_test(size=(160, 50)) as pilot:
        await feed(app, pilot, 1)
        await pilot.press("5")
        await pilot.pause()
        assert len(app.screen.query_one("#seats-table", KeyedTable).keys) == 10
        said = str(app.screen.query_one("#seats-headroom").render()).replace("\n", " ")
        assert "No serving seats seen" not in said
        assert (
            "8 seats on spark hold no memory the cards list, so no headroom bar: its memory is unified"
            in said
        )
        assert "2 seats on box hold no memory the cards list" in said and "pid namespace" in said
    app = _seats_app([_host("bare", (card,), ())])
    async with app.run_test(size=(160, 50)) as pilot:
        await feed(app, pilot, 1)
        await pilot.press("5")
        await pilot.pause()
        said = str(app.screen.query_one("#seats-headroom").render())
        assert said.strip() == "No serving seats seen: no host's probe reported one."


async def test_c_shows_checking_then_the_verdict_even_when_it_cannot_be_kept():
    """`c` on a seat where nothing listens (the `local` host's helper asks for real): its row
    reads `checking…` at once, then the signature, and the line under the table says it in
    full, though the verdict file cannot be written (before, the row stayed `-`)."""
    from fleetdeck.backend.monitor.seats import checks_path

    from support.sshfleet import free_port

    checks_path().mkdir()  # the verdict file cannot be replaced: record_check fails
    port = free_port()
    app = _seats_app([_host("local", (), (_seat("local", port, 11),))])
    app.alert_watch.enabled = True
    # the real check, held until the row has been read while it runs
    go = asyncio.Event()
    real = app.alert_watch.monitor.check_seat

    async def held(host, port):
        await go.wait()
        return await real(host, port)

    app.alert_watch.monitor.check_seat = held
    async with app.run_test(size=(140, 40)) as pilot:
        await feed(app, pilot, 1)
        await pilot.press("5")
        table = app.screen.query_one("#seats-table", KeyedTable)
        await pilot.press("c")
        await pilot.pause()
        assert cell_text(table, table.keys[0], "check") == "checking…"
        assert "checking vllm:" in str(app.screen.query_one("#seats-check").render())
        go.set()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert cell_text(table, table.keys[0], "check") == "unreachable"
        line = str(app.screen.query_one("#seats-check").render())
        assert line.startswith(
            f"local:{port} FAILED unreachable: nothing listens on http://127.0.0.1:{port}"
        )
        assert any("not saved" in n.message for n in app._notifications), (
            "the unsaved verdict is a warning"
        )


async def test_c_on_a_sound_seat_shows_the_witness_it_rests_on():
    import pytest

    from support.seats import start_server

    pytest.importorskip("transformers")
    server, port = start_server()
    try:
        app = _seats_app([_host("local", (), (_seat("local", port, 11),))])
        app.alert_watch.enabled = True
        async with app.run_test(size=(160, 40)) as pilot:
            await feed(app, pilot, 1)
            await pilot.press("5")
            await pilot.press("c")
            await app.workers.wait_for_complete()
            await pilot.pause()
            table = app.screen.query_one("#seats-table", KeyedTable)
            assert cell_text(table, table.keys[0], "check") == "sound · 8 tok"
            line = str(app.screen.query_one("#seats-check").render()).replace("\n", " ")
            assert line.startswith(f"local:{port} sound (8 tokens, 16 logprobs finite): ")
            assert "answered 8 completion tokens" in line
    finally:
        server.kill()
        server.wait()
