"""Host text is made safe before it reaches a terminal, a clipboard or a page: the GPU health
words (escaped once, at the boundary: `validate_fields.as_label`), a run folder's name in the
Describe pop-up's headings and copy, the silence and holders pop-ups' prefilled fields, and every
alert sentence (so a newline in a run folder's name forges no line in a notification).

Hostile bytes used throughout: ESC sequences (clear screen, a window title), an OSC 52 clipboard
write, a C1 control (CSI as one byte), a newline, and a bidi override.
"""

from __future__ import annotations

from rich.console import Console

from fleetdeck.backend.fleet.validate import host_from_probe
from fleetdeck.backend.monitor.rules.runs import failed_text, finished_text
from fleetdeck.backend.monitor.silence_model import Silence
from fleetdeck.tui.rows.fleet import gpu_health_lines
from fleetdeck.tui.rows.host import gpu_health_row, gpu_rows

EVIL = "x\x1b[2J\x1b]0;owned\x07\x1b]52;c;cm0gLXJmIH4=\x07\x9b31m\n\u202eok"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")
T = 1_800_000_000.0


def _clean(text: str) -> None:
    for b in RAW:
        assert b not in text, (b, text)


def _render(*cells) -> str:
    c = Console(width=400, record=True, color_system=None)
    for cell in cells:
        c.print(cell)
    return c.export_text()


def _answer() -> dict:
    return {
        "gpus": [
            {
                "index": 0,
                "name": "H200" + EVIL,
                "uuid": "GPU-0" + EVIL,
                "unified_memory": False,
                "memory_total_mib": 1000.0,
                "memory_used_mib": 10.0,
                "utilization_pct": 1.0,
                "processes": [],
                "compute_mode": "Default" + EVIL,
                "throttle_reasons": ["sw_thermal", "weird" + EVIL],
                "ecc": {"mode": "on" + EVIL, "corrected": 0, "uncorrected": 0},
            }
        ],
        "runs": [
            {
                "path": "/r/run" + EVIL,
                "name": "run" + EVIL,
                "state": "failed",
                "step": 5,
                "reason": "it said" + EVIL,
                "adapter": "/r/run" + EVIL + "/adapter",
            }
        ],
    }


def test_gpu_health_words_are_escaped_at_the_boundary_and_in_every_view():
    h = host_from_probe("h1", _answer(), 1.0, T)
    g = h.gpus[0]
    for s in (g.name, g.uuid, g.compute_mode, g.ecc.mode, *(g.throttle_reasons or ())):
        _clean(s)
        assert "\n" not in s
    rows, health = gpu_rows(h)
    _clean(_render(*rows["gpu0"], *gpu_health_row(g)))
    for line, _style in gpu_health_lines(h):
        _clean(line)


def test_alert_sentences_hold_no_raw_control_and_no_line_break():
    h = host_from_probe("h1", _answer(), 1.0, T)
    (r,) = h.runs
    assert r.name == "run" + EVIL  # the model keeps the name an action needs
    for text in (failed_text(h, r), finished_text(h, r)):
        _clean(text)
        assert "\n" not in text, text


def test_describe_headings_and_what_y_copies_are_escaped():
    from fleetdeck.tui.modals.describe import DescribeModal

    m = DescribeModal("Describe", [("/r/run" + EVIL + "/run.json", "{}")])
    text = m.text()
    _clean(text)
    assert text.count("\n") == 2  # heading, body: the newline in the name forged none


def test_a_silence_typed_as_the_subject_is_shown_matches_the_raw_subject():
    subject = "/r/run" + EVIL
    from fleetdeck.backend.host.lib.text import shown

    s = Silence(
        id="s1",
        host=None,
        rule="run-failed",
        subject=shown(subject),
        starts=0,
        ends=T,
        comment="maintenance",
        by="op",
    )
    assert s.matches("run-failed", "h1", subject)
    assert not s.matches("run-failed", "h1", "/r/other")
    _clean(shown(subject))
