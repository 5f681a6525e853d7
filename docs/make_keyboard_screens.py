"""Regenerate the "by keyboard" screenshots in docs/: each pop-up at 80x24 over the recorded
fleet in tests/support/fixtures, driven by keys only, its focused control showing.

    python docs/make_keyboard_screens.py

kb-purge.svg (Tab pressed once: the second path's field, scrolled clear of the buttons),
kb-mirror.svg, kb-launch.svg, kb-remove.svg (the id typed: the button enabled),
kb-stop.svg, kb-silence.svg (the reason typed) and kb-holders.svg.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "tests"))

from fleetdeck.backend.fleet.models import Process  # noqa: E402
from fleetdeck.tui.modals.holders import HoldersModal  # noqa: E402
from fleetdeck.tui.modals.silence import SilenceModal  # noqa: E402
from fleetdeck.tui.modals.stop import StopProcessModal  # noqa: E402

from support.modals import MODALS  # noqa: E402
from support.recorded import feed, fixture_app  # noqa: E402

PROC = Process(pid=7, start=1, user="ops", command="python3 train.py --config run-7.toml")

#: name: (how the view opens it, the keys pressed in it)
SCREENS = {
    "purge": (MODALS["purge"][0], ["tab"]),
    "mirror": (MODALS["mirror"][0], ["tab"]),
    "launch": (MODALS["launch"][0], []),
    "remove": (MODALS["remove"][0], list("loop-9c1e55aa")),
    "stop": (lambda app: app.push_screen(StopProcessModal("gx10", PROC)), list("7 pyth")),
    "silence": (
        lambda app: app.push_screen(SilenceModal("gx10", "host-down", None)),
        [*"disk swap", "space", *"on", "space", *"gx10"],
    ),
    "holders": (lambda app: app.push_screen(HoldersModal("gx10", "/home/ops/runs/run-7")), []),
}


async def main() -> None:
    from textual.widgets import Input

    for name, (open_it, keys) in SCREENS.items():
        app = fixture_app()
        async with app.run_test(size=(80, 24)) as pilot:
            await feed(app, pilot)
            app.clear_notifications()
            open_it(app)
            await pilot.pause()
            if keys:
                await pilot.press(*keys)
            await pilot.pause()
            await pilot.pause()
            for inp in app.screen.query(Input):
                inp.cursor_blink = False
            app.save_screenshot(f"kb-{name}.svg", path=str(HERE))
            print(HERE / f"kb-{name}.svg")


if __name__ == "__main__":
    asyncio.run(main())
