"""The purge and mirror pop-ups show each sha256 whole (wrapped where the dialog is narrow),
as the CLI prints it; before, they cut it to 16 or 12 hex digits."""

from __future__ import annotations

import pytest

from fleetdeck.backend.actions.mirror.common import MirrorFile
from fleetdeck.backend.actions.mirror.report import MirrorReport
from fleetdeck.backend.actions.purge.plan import KeeperResult, PurgeReport
from fleetdeck.tui.modals.mirror import MirrorModal
from fleetdeck.tui.modals.purge import PurgeModal
from fleetdeck.tui.modals.purge_text import report_text

from support.modals import purge_plan
from support.recorded import feed, fixture_app

DIGEST = "9f2c1e0a7b3d5e8f" * 4


def _plain(widget) -> str:
    r = widget.render()
    return getattr(r, "plain", str(r))


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_the_purge_pop_up_shows_each_keepers_whole_sha256(size):
    plan = purge_plan()
    assert plan.keepers[0].sha256_before == DIGEST
    app = fixture_app()
    async with app.run_test(size=size) as pilot:
        await feed(app, pilot)
        app.push_screen(PurgeModal("gx10", [p.path for p in plan.paths], plan=plan))
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        keepers = _plain(app.screen.query_one("#purge-keepers"))
        assert f"sha256 {DIGEST}\n" in keepers and "…" not in keepers


def test_the_purge_report_shows_each_keepers_whole_sha256_escaped():
    rep = PurgeReport(
        host="gx10",
        deleted=True,
        paths=(),
        free_bytes_before=1,
        free_bytes_after=2,
        expected_bytes=1,
        warnings=(),
        confirmed=True,
        keepers=(
            KeeperResult("/r/adapter/a.safetensors", "/r", DIGEST, DIGEST),
            KeeperResult("/r/adapter/b.safetensors", "/r", DIGEST, "\x1b[2Jab" + "0" * 60),
        ),
    )
    text = report_text(rep).plain
    assert f"sha256 {DIGEST} re-verified" in text
    assert "sha256 \\x1b[2Jab" + "0" * 60 + " CHANGED" in text and "\x1b" not in text


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (140, 40), (250, 50)])
async def test_the_mirror_pop_up_shows_both_hosts_whole_sha256(size):
    other = "ab" * 32
    hostile = "\x1b]52;c;SGVsbG8=\x07" + "c" * 40
    files = (
        MirrorFile("adapter_model.safetensors", 167772160, DIGEST, DIGEST, "copied"),
        MirrorFile("adapter_config.json", 812, other, hostile, "mismatch"),
    )
    rep = MirrorReport(
        src="gx10:/home/ops/runs/run-6/adapter",
        dst="ana-ml2:/home/ops/runs/run-6/adapter",
        dry_run=False,
        verified=False,
        bytes_src=167772972,
        bytes_dst=167772972,
        files=files,
        result="mismatch",
        seconds=2.5,
        bytes_copied=167772972,
        rate=67109188.8,
    )
    app = fixture_app()
    async with app.run_test(size=size) as pilot:
        await feed(app, pilot)
        modal = MirrorModal("gx10", "/home/ops/runs/run-6/adapter")
        app.push_screen(modal)
        await pilot.pause()
        modal.show_report(rep, "ana-ml2", False)
        await pilot.pause()
        table = modal.query_one("#mirror-files")
        rows = [
            [c.plain if hasattr(c, "plain") else str(c) for c in table.get_row_at(i)]
            for i in range(2)
        ]
        assert rows[0][3].replace("\n", "") == DIGEST and rows[0][4].replace("\n", "") == DIGEST
        lines = rows[0][3].split("\n")
        assert len({len(line) for line in lines}) == 1 and len(lines[0]) % 8 == 0
        if size[0] >= 140:
            assert len(lines) <= 2  # the wider the dialog, the fewer lines
        assert rows[1][3].replace("\n", "") == other
        assert rows[1][4].replace("\n", "") == "\\x1b]52;c;SGVsbG8=\\x07" + "c" * 40
        assert "\x1b" not in rows[1][4]
        # the whole digest fits the dialog: the table does not scroll it off sideways (at 80
        # columns the long file name alone may; the verdict column comes first for that)
        if size[0] >= 100:
            assert table.virtual_size.width <= table.size.width, (table.virtual_size, table.size)
