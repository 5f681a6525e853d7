"""`status --json` read back (`fleet_from_json`, as recorded fleets and the screenshots read it)
and printed again is the same document, byte for byte, however hostile the host's text: a
text the controller escaped when it first read the probe's answer is not escaped twice."""

from __future__ import annotations

import json

from fleetdeck.backend.fleet.models import FleetSnapshot
from fleetdeck.backend.fleet.validate import fleet_from_json, host_from_probe
from fleetdeck.backend.fleet.validate_fields import unshown
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.probe import wire

#: control characters, an escape sequence, a backslash that reads like an escape, markup, an
#: undecodable byte, a right-to-left override
EVIL = "a\x1b[2J\x07\\x1b\\n[bold red]x[/]\udc9b\u202e\t\\\\z"


class _Planted(wire.GpuRecord, total=False):
    """The declaration with a text the `Gpu` model does not name (kept in `Gpu.extra`)."""

    board_part: str | None


def _answer() -> dict:
    card = {
        "index": 0,
        "name": "H200 " + EVIL,
        "uuid": "GPU-" + EVIL,
        "unified_memory": False,
        "memory_total_mib": 1000.0,
        "memory_used_mib": 10.0,
        "utilization_pct": 1.0,
        "compute_mode": EVIL,
        "throttle_reasons": [EVIL, "sw_power_cap"],
        "ecc": {"mode": EVIL},
        "lost": EVIL * 400,  # past its limit: cut, then escaped
        "board_part": EVIL,
        "processes": [{"pid": 7, "user": EVIL, "command": EVIL, "used_mib": 1.0}],
    }
    return {
        "gpus": [card],
        "disks": [{"path": "/d" + EVIL, "mount": EVIL, "fstype": "ext4", "error": EVIL}],
        "runs": [{"path": "/r/" + EVIL, "name": EVIL, "state": "running", "reason": EVIL}],
        "schedules": [
            {"id": "c-1", "kind": "crontab", "user": EVIL, "spec": "* * * * *", "command": EVIL}
        ],
        "processes": [{"pid": 9, "start": 1, "user": EVIL, "command": EVIL, "why": ["cpu"]}],
        "warnings": [EVIL],
        "gpu_source": "nvml",
    }


def _printed(snap: FleetSnapshot) -> str:
    return json.dumps(snap.to_json(), indent=1)  # as `status --json` prints it


def test_status_json_read_back_prints_the_same_bytes(monkeypatch):
    monkeypatch.setattr(wire, "GpuRecord", _Planted)
    host = host_from_probe("h", _answer(), 1.0, 1000.0)
    (g,) = host.gpus
    assert g.name == "H200 " + shown(EVIL) and g.figure("board_part") == shown(EVIL)
    first = _printed(FleetSnapshot(hosts=(host,), time=1000.0))
    again = fleet_from_json(json.loads(first))
    assert _printed(again) == first
    assert _printed(fleet_from_json(json.loads(_printed(again)))) == first


def test_a_raw_control_character_in_a_read_back_document_is_still_escaped():
    doc = json.loads(_printed(FleetSnapshot(hosts=(host_from_probe("h", _answer(), 1.0, 1.0),))))
    doc["hosts"][0]["gpus"][0]["name"] = "H200\x1b[2J"
    (g,) = fleet_from_json(doc).hosts[0].gpus
    assert g.name == "H200\\x1b[2J"


def test_unshown_undoes_what_shown_writes():
    for t in (EVIL, "plain", "é\udce9\x85\ud800\U000e0001\\\\n", "\\x41 \\u00e9 \\q"):
        assert shown(unshown(shown(t))) == shown(t), t
