"""Runs are listed in one order everywhere: live runs first, then by host, then by name in
natural order (`run-3` before `run-10`): `fleetdeck runs` (JSON and table), the dashboard's Runs
view and the Fleet view's Live runs."""

from __future__ import annotations

import dataclasses
import json
import random
import time
from pathlib import Path

from fleetdeck.backend.fleet.models import Run
from fleetdeck.backend.fleet.run_order import RunOrder, natural_key, ordered_runs
from fleetdeck.tui.widgets.cell_sort import sort_key
from fleetdeck.tui.widgets.keyed_table import KeyedTable

from support.cli import local_fleet, run_cli
from support.probe import sleeper, write_progress
from support.recorded import app_over, cell_text, feed, recorded


def test_names_sort_by_the_numbers_in_them():
    names = [
        "run-10",
        "run-3",
        "Run-2",
        "run-03b",
        "run-1.10",
        "run-1.9",
        "run",
        "r" + "9" * 5000,
        "r10",
    ]
    assert sorted(names, key=natural_key) == [
        "r10",
        "r" + "9" * 5000,
        "run",
        "run-1.9",
        "run-1.10",
        "Run-2",
        "run-3",
        "run-03b",
        "run-10",
    ]
    # a column the operator sorts by name in the dashboard: the same order
    assert sorted(["run-10", "run-3", "run-2"], key=sort_key) == ["run-2", "run-3", "run-10"]


def test_runs_lists_live_runs_first_then_names_in_natural_order(tmp_path: Path, capsys, children):
    hosts = local_fleet(tmp_path)
    root = tmp_path / "runs"
    for n in ("run-10", "run-3", "run-2", "run-11", "run-1"):
        (root / n).mkdir()
        write_progress(root / n, range(1, 6))
    for n in ("run-11", "run-1"):  # a trainer at work in each
        sleeper(children, cwd=root / n)
    time.sleep(0.3)
    rc, out, err = run_cli(["--hosts", hosts, "runs", "--json"], capsys)
    assert rc == 0, err
    got = [(r["name"], r["state"]) for r in json.loads(out)["runs"]]
    assert [n for n, _ in got] == ["run-1", "run-11", "run-2", "run-3", "run-10"], got
    assert {s for n, s in got[:2]} == {"running"} and "running" not in {s for _, s in got[2:]}
    rc, out, err = run_cli(["--hosts", hosts, "runs"], capsys)
    assert rc == 0, err
    rows = [line.split()[1] for line in out.splitlines() if line.split()[:1] == ["local"]]
    assert rows == ["run-1", "run-11", "run-2", "run-3", "run-10"]


def _fleet_with(runs: dict[str, str]):
    """The recorded fleet with gx10's runs replaced by `runs` (name -> state), in that order."""
    snap = recorded("fleet.json")
    hosts = []
    for h in snap.hosts:
        if h.name == "gx10":
            base = h.runs[0]
            h = dataclasses.replace(
                h,
                runs=tuple(
                    dataclasses.replace(
                        base,
                        name=n,
                        path=f"/home/ops/runs/{n}",
                        state=s,
                        pid=base.pid if s in ("running", "stalled") else None,
                    )
                    for n, s in runs.items()
                ),
            )
        hosts.append(h)
    return dataclasses.replace(snap, hosts=tuple(hosts))


async def test_dashboard_runs_view_and_live_runs_cell_in_natural_order():
    snap = _fleet_with(
        {
            "run-10": "running",
            "run-3": "finished",
            "run-2": "running",
            "run-9": "stalled",
            "run-1": "failed",
        }
    )
    assert [r.name for r in ordered_runs(snap.runs, [h.name for h in snap.hosts])] == [
        "run-2",
        "run-9",
        "run-10",
        "run-1",
        "run-3",
    ]
    app = app_over(snap)
    async with app.run_test(size=(160, 50)) as pilot:
        await feed(app, pilot)
        fleet = app.screen.query_one("#fleet-table", KeyedTable)
        live = cell_text(fleet, "gx10", "runs")
        assert live.splitlines()[3:] == ["✖ 1 failed"] and live.index("run-2") < live.index(
            "run-9"
        ) < live.index("run-10"), live
        await pilot.press("2")
        await pilot.pause()
        table = app.screen.query_one("#runs-table", KeyedTable)
        assert [k.rsplit("/", 1)[1] for k in table.keys if k.startswith("gx10:")] == [
            "run-2",
            "run-9",
            "run-10",
            "run-1",
            "run-3",
        ]


def test_spans_of_time_sort_by_the_time_they_stand_for():
    from fleetdeck.backend.host.lib import units

    cells = [
        "2.3 days",
        "41ms",
        "11.5s",
        "9m00s ago",
        "2h01m",
        "5s",
        "10 min",
        "1d01h",
        "in 1m05s",
        "2.5 h",
        "999ms",
    ]
    want = [
        "41ms",
        "999ms",
        "5s",
        "11.5s",
        "in 1m05s",
        "9m00s ago",
        "10 min",
        "2h01m",
        "2.5 h",
        "1d01h",
        "2.3 days",
    ]
    assert sorted(cells, key=sort_key) == want
    spans = [units.duration_short(s) for s in (3, 59, 61, 3599, 3601, 86399, 86401, 10**6)]
    assert sorted(reversed(spans), key=sort_key) == spans
    # sizes keep their order and are not read as spans: 5M is five mebibytes, not five minutes
    assert sorted(["5M", "900K", "1.5G"], key=sort_key) == ["900K", "5M", "1.5G"]


def test_the_order_kept_between_polls_is_the_order_worked_out_afresh():
    """RunOrder keeps each host's order between polls and redoes only a host whose runs changed:
    over polls that add, drop, rename and finish runs, start one, and list one under another
    host, it gives exactly what `ordered_runs` gives on the same runs each time, and its version
    (what the Runs view relays its columns and labels by) moves whenever the listing does and
    stays when the same runs come again."""
    rng = random.Random(4919)
    hosts = ["gx10", "ana-ml2", "nh3-dev", "irv-ml1"]
    fleet = {
        h: [Run(host=h, path=f"/r/run-{k}", name=f"run-{k}", state="finished") for k in range(12)]
        for h in hosts
    }
    order = RunOrder()
    last: list = []
    for poll in range(40):
        h = rng.choice(hosts)
        runs = fleet[h]
        move = poll % 5
        if move == 0:
            runs.append(Run(host=h, path=f"/r/run-{poll}b", name=f"run-{poll}b", state="running"))
        elif move == 1 and runs:
            runs.pop(rng.randrange(len(runs)))
        elif move == 2 and runs:
            i = rng.randrange(len(runs))
            runs[i] = dataclasses.replace(runs[i], state=rng.choice(["running", "finished"]))
        elif move == 3 and runs:
            i = rng.randrange(len(runs))
            runs[i] = dataclasses.replace(runs[i], name=f"run-{rng.randrange(100)}")
        rng.shuffle(runs)
        # every poll brings new objects, equal or not
        groups = [(n, [dataclasses.replace(r) for r in fleet[n]]) for n in hosts]
        if poll == 30:
            groups[1][1].append(Run(host="elsewhere", path="/r/x", name="x", state="running"))
        before = order.version
        got = order.order(groups, hosts)
        want = ordered_runs((r for _n, rs in groups for r in rs), hosts)
        assert [(r.host, r.path, r.state) for r in got] == [
            (r.host, r.path, r.state) for r in want
        ], poll
        listing = [(r.host, r.name, r.path) for r in got]
        if poll and listing != last:
            assert order.version != before, f"poll {poll}: another listing, the same version"
        last = listing
        if poll != 30:  # (a run under another host: worked out afresh, a new version each time)
            again = order.version
            order.order([(n, [dataclasses.replace(r) for r in rs]) for n, rs in groups], hosts)
            assert order.version == again, "the same runs again (new objects) keep the version"
