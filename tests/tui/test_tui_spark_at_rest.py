"""A card's sparkline at rest: a poll whose memory figure is the one before appends the last
character again; only a card whose figure moved is quantised (`spark_char`) again. Counted,
never timed."""

from __future__ import annotations

from fleetdeck.backend.fleet.models import FleetSnapshot
from fleetdeck.show.cells import spark_char
from fleetdeck.tui import fleet_state
from fleetdeck.tui.fleet_state import FleetState

from support.at_rest import polled_host

HOSTS = ("a", "b", "c", "d")
CARDS = 8


def snap(now: float, used: dict[tuple[str, int], float]) -> FleetSnapshot:
    return FleetSnapshot(
        hosts=tuple(
            polled_host(
                name,
                now,
                None,
                {g: mib for (h, g), mib in used.items() if h == name},
                CARDS,
                80000,
                disk_and_run=False,
            )
            for name in HOSTS
        ),
        time=now,
    )


def test_an_unchanged_card_is_not_quantised_again_and_a_moved_one_is(monkeypatch):
    calls = []
    monkeypatch.setattr(fleet_state, "spark_char", lambda f: calls.append(f) or spark_char(f))
    state = FleetState(list(HOSTS), 0.5, clock=lambda: 1000.0)
    state.apply(snap(1000.0, {}))
    assert len(calls) == len(HOSTS) * CARDS  # the first sample of each card
    calls.clear()
    for i in range(20):
        state.apply(snap(1000.5 + i / 2, {}))
    assert calls == [], "polls of unchanged cards quantised their memory again"
    state.apply(snap(1020.0, {("b", 3): 60000.0}))
    assert calls == [0.75]
    for key, chars in state.spark.items():
        assert list(chars) == [spark_char(f) for f in state.history[key]], key
    assert state.spark[("b", 3)][-1] == spark_char(0.75) != state.spark[("b", 3)][-2]
