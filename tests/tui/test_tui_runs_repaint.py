"""The Runs view after a poll that moved only steps: the runs' keys are not made again (the
same listing is the same keys in the same order); a poll that lists another run makes them
again, and the new run is listed. Counted, never timed."""

from __future__ import annotations

from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot, Run
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.messages import FleetPolled
from fleetdeck.tui.sources import RecordedSource
from fleetdeck.tui.views.runs import RunsScreen
from fleetdeck.tui.widgets.keyed_table import KeyedTable

HOSTS = ("a", "b", "c")
PER_HOST = 100


def snap(i: int, extra: bool = False) -> FleetSnapshot:
    def runs(name: str) -> tuple[Run, ...]:
        n = PER_HOST + (extra and name == "a")
        return tuple(
            Run(host=name, path=f"/r/{name}/run-{k}", name=f"run-{k}", state="running", step=i + k)
            for k in range(n)
        )

    return FleetSnapshot(
        hosts=tuple(
            HostSnapshot(name=name, reachable=True, time=1000.0 + i, runs=runs(name))
            for name in HOSTS
        ),
        time=1000.0 + i,
    )


async def test_a_poll_that_moved_only_steps_makes_no_run_key_again(monkeypatch):
    fleet = parse_fleet("".join(f"[hosts.{n}]\nlocal = true\n" for n in HOSTS), "x")
    app = FleetdeckApp(fleet, RecordedSource([snap(0)]), autopoll=False, clock=lambda: 1000.0)
    made = [0]
    real = Run.key

    def key(self: Run) -> str:
        made[0] += 1
        return real.fget(self)

    async with app.run_test(size=(160, 48)) as pilot:
        app.post_message(FleetPolled(snap(0)))
        await pilot.pause()
        await pilot.press("2")
        await pilot.pause()
        assert isinstance(app.screen, RunsScreen)
        table = app.screen.query_one("#runs-table", KeyedTable)
        monkeypatch.setattr(Run, "key", property(key))
        app.post_message(FleetPolled(snap(1)))
        await pilot.pause()
        # the few the detail pane and the drawn rows ask for, not one per run
        assert made[0] < 50, f"{made[0]} run keys made for {len(HOSTS) * PER_HOST} runs"
        assert len(table.keys) == len(HOSTS) * PER_HOST
        made[0] = 0
        app.post_message(FleetPolled(snap(2, extra=True)))
        await pilot.pause()
        assert made[0] >= len(HOSTS) * PER_HOST  # another listing: its keys made again
        assert len(table.keys) == len(HOSTS) * PER_HOST + 1
        assert f"a:/r/a/run-{PER_HOST}" in table.keys
