"""The monitor's saved state: `alerts.json` (the alert engine's state, naming the last outbox
journal entry it covers; `engine_path`) written atomically after every cycle and delivery
(`SavedState`), and the outbox read back from the journal and that file when `watch` starts
(`open_outbox`). `load_engine` and `save_engine` read and write the engine's state alone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleetdeck.backend.fleet import statedir
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.monitor import alert_state as st
from fleetdeck.backend.monitor.delivery.deliver import Deliverer
from fleetdeck.backend.monitor.delivery.deliver import options as deliver_options
from fleetdeck.backend.monitor.delivery.outbox import Journal, outbox_path
from fleetdeck.backend.monitor.rules.alerts import AlertConfig, AlertEngine


def engine_path() -> Path:
    """Where `watch` keeps the engine's state between polls and restarts."""
    return statedir.state_dir() / "alerts.json"


def load_engine(config: AlertConfig | None = None) -> AlertEngine:
    """An engine carrying on from the saved state (a fresh one when there is none; entries that
    do not load are skipped, the file is left as it is)."""
    e = AlertEngine(config)
    doc, _warnings = st.read_doc(engine_path(), move=False)
    e.load_state(doc)
    return e


def save_engine(engine: AlertEngine) -> None:
    """Save the engine's state atomically (write, then rename)."""
    path = engine_path()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(engine.to_state()), encoding="utf-8")
    os.replace(tmp, path)


def open_outbox(
    config: AlertConfig, saved: dict[str, Any], warn: Callable[[str], None], opts: dict[str, Any]
) -> tuple[Deliverer | None, Journal | None, list[st.Reject], list[str], bool]:
    """The deliverer and its journal when `[alerts]` names a sink (else None, None), carrying on
    with the outbox the journal and `saved` hold; what did not load, the warnings, and whether
    `saved` holds an outbox of its own (written before the journal: the file is to be rewritten)."""
    if not (config.on_alert or config.webhook):
        return None, None, [], [], False
    rejects: list[st.Reject] = []
    journal = Journal(outbox_path(), warn=warn)
    deliverer = Deliverer(
        config.on_alert,
        config.webhook,
        journal=journal,
        warn=warn,
        **{**deliver_options(config), **opts},
    )
    committed = saved.get("outbox_seq")
    if committed is not None and (
        isinstance(committed, bool) or not isinstance(committed, int) or committed < 0
    ):
        rejects.append(st.Reject("outbox_seq", "is not a whole number", committed))
        committed = None
    bad, said = deliverer.load_journal(committed)
    said += st.report_rejects(outbox_path().name, bad, move=True)
    # an alerts.json written before the journal holds its outbox as a list: carried over
    migrate = "outbox" in saved
    rejects += deliverer.load_state(saved.get("outbox"))
    return deliverer, journal, rejects, said, migrate


class SavedState:
    """`alerts.json`, written whole and renamed over the old one; a failure is a warning."""

    def __init__(self, journal: Journal | None, warn: Callable[[str], None]) -> None:
        self.journal = journal
        self.warn = warn
        self._saved: bytes | None = None
        #: bytes written to alerts.json (benchmarks)
        self.bytes_saved = 0

    def save(self, doc: dict[str, Any]) -> bool:
        """Write `doc` with the outbox journal's last entry it covers. When the journal cannot be
        written the state is not either, so the two never disagree: a transition is saved with
        its entry."""
        if self.journal is not None:
            if not self.journal.flush():
                self.warn(
                    "alert state not saved: its outbox entries could not be written first "
                    f"({self.journal.error}); alerts and the outbox live in memory until they can be"
                )
                return False
            doc["outbox_seq"] = self.journal.seq
        try:
            # ensure_ascii keeps a host's undecodable bytes (lone surrogates) through the file
            data = json.dumps(doc, ensure_ascii=True).encode()
            if data == self._saved:
                return True
            path = engine_path()
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            # written whole and renamed over the old one, so a crash leaves one or the other;
            # not fsynced: on a busy disk an fsync per poll held the loop for seconds (a
            # power cut may cost the last seconds of state, a crash of the process nothing)
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
            self._saved = data
            self.bytes_saved += len(data)
        except (OSError, ValueError, TypeError) as e:
            self.warn(
                f"alert state not saved ({type(e).__name__}: {shown(str(e))}); alerts and the outbox "
                "live in memory until it can be"
            )
            return False
        return True


__all__ = ["SavedState", "engine_path", "load_engine", "open_outbox", "save_engine"]
