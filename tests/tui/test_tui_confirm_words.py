"""A failed typed confirmation says which field and where it differs; a unit of the sentence,
and the purge pop-up driven by keys."""

from __future__ import annotations

from textual.widgets import Input

from fleetdeck.tui.modals.typed_confirm import mismatch

from support.local_app import local_app, make_run, open_purge


def test_the_sentence_names_the_field_and_the_first_differing_character():
    want = "/runs/run-7/checkpoints/checkpoint-50"
    said = mismatch(want[:-1] + "4", want, 2, 5)
    assert said.startswith("field 2 of 5 (for /runs/run-7/checkpoints/checkpoint-50)")
    assert f"differs at character {len(want)}: typed '4', expected '0'" in said
    assert "typed nothing more, expected '0'" in mismatch(want[:-1], want, 1, 1)
    assert "typed '\\x1b'" in mismatch("\x1b", "a", 1, 1)  # a control byte reads as itself


async def test_enter_on_a_wrong_path_says_where_it_differs(tmp_path):
    _run, ck = make_run(tmp_path, "run-7")
    app = local_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        modal = await open_purge(app, pilot, [ck])
        field = modal.query(Input).filter(".confirm").first()
        field.focus()
        field.value = str(ck)[:-1] + "6"
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        said = [n.message for n in app._notifications]
        assert any("field 1 of 1" in m and "differs at character" in m for m in said), said
        assert ck.is_dir()


def test_a_cut_eval_series_says_so():
    from fleetdeck.show.cells import eval_trend

    evals = [(25 * i, 3.2 - i / 100) for i in range(1, 10)]
    shown = eval_trend(evals).plain
    assert shown.startswith("eval loss: … 3 earlier") and "@225" in shown and "@75" not in shown
    assert "…" not in eval_trend(evals[:6]).plain


def test_a_long_disk_path_keeps_its_head_and_its_tail():
    """`…eet/h1/runs` said neither which mount nor much of which folder."""
    from fleetdeck.show.cells import middle

    p = "/home/ops/fleet/h1/runs"
    assert middle(p, 40) == p
    for width in range(6, len(p)):
        cut = middle(p, width)
        assert len(cut) == width and cut.startswith("/") and cut.endswith("runs") and "…" in cut
    assert middle(p, 20) == "/home/…fleet/h1/runs"


async def test_the_fleet_disks_cell_cuts_a_path_in_the_middle():
    from dataclasses import replace

    from fleetdeck.backend.fleet.models import Disk

    from support.recorded import app_over, plain, recorded

    snap = recorded("fleet.json")
    hosts = tuple(
        replace(h, disks=(Disk("/srv/tank/fleet/h1/runs", "/srv", "ext4", 100, 40, 60),))
        if h.name == "gx10"
        else h
        for h in snap.hosts
    )
    app = app_over(replace(snap, hosts=hosts))
    async with app.run_test(size=(120, 30)) as pilot:
        from support.recorded import feed

        await feed(app, pilot)
        table = app.screen.query_one("#fleet-table")
        cell = plain(table.get_cell("gx10", "disks"))
        assert "40%" in cell and "/sr" in cell and cell.rstrip().endswith("h1/runs"), cell
