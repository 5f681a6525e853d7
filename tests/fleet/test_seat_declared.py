"""A serving seat read from what the seat finder declares (`backend/host/probe/seat_wire.py`):
its figures held to their bounds, its texts cut and kept as the host wrote them (the views
escape them), its pids, flags and per-card memory item by item, and its container read whole
from its record, a nested port or mount that is wrong left out with a warning. The same check
runs on a probe answer's seats and on the seats helper's (`fetch_seats`)."""

from __future__ import annotations

import typing

from fleetdeck.backend.fleet.seat_model import seat_from_json
from fleetdeck.backend.fleet.validate import check_section, host_from_probe
from fleetdeck.backend.fleet.validate_records import MAX_LIST
from fleetdeck.backend.host.probe import seat_wire

GOOD_CONTAINER = {
    "id": "c0ffee",
    "name": "vllm-a",
    "image": "vllm/vllm-openai:latest",
    "status": "running",
    "started_at": "2026-12-08T00:00:00Z",
    "restart_policy": "unless-stopped",
    "gpus": ["0", "1"],
    "ports": [{"container_port": 8000, "host_port": 18000, "host_ip": "", "proto": "tcp"}],
    "mounts": [{"source": "/srv/models", "destination": "/models"}],
}
SEAT = {
    "kind": "vllm",
    "model": "qwen",
    "port": 18000,
    "listen_port": 8000,
    "pid": 4242,
    "start_ticks": 99,
    "pids": [4242, 4243],
    "flags": {"--gpu-memory-utilization": "0.9"},
    "command": "vllm serve qwen",
    "container": GOOD_CONTAINER,
    "restarts": 0,
    "oom_killed": False,
}


def test_a_good_seat_and_its_container_are_kept_as_declared():
    marks: list[str] = []
    s = seat_from_json("h", SEAT, marks)
    assert marks == []
    assert (s.kind, s.model, s.port, s.pid, s.pids) == ("vllm", "qwen", 18000, 4242, (4242, 4243))
    assert s.container == GOOD_CONTAINER
    assert set(s.container) == set(typing.get_type_hints(seat_wire.ContainerRecord))
    assert s.to_json()["container"] == GOOD_CONTAINER


def test_hostile_figures_pids_flags_and_cards_are_dropped_one_by_one():
    evil = "$(reboot)\x1b[2J\n" + "z" * 1000
    bad = dict(
        SEAT,
        port=70000,
        pid="4242",
        restarts=-1,
        oom_killed="yes",
        model=["not", "text"],
        command=evil,
        pids=[1, "2", -3, 2**40, 5],
        flags={"--ok": "1", "--list": ["a"], "--evil": evil},
        memory_by_gpu={"0": 10.5, "x": 1.0, "1": float("nan"), "9999": 1.0, "²": 1.0},
    )
    marks: list[str] = []
    s = seat_from_json("h", bad, marks)
    assert (s.port, s.pid, s.restarts, s.oom_killed, s.model) == (None, None, None, None, None)
    assert s.pids == (1, 5)
    assert s.flags == {"--ok": "1", "--evil": evil[:299] + "…"}
    assert s.command == evil[:299] + "…"  # raw, cut: the views escape it where they show it
    assert s.memory_by_gpu == {0: 10.5}
    for name in ("port", "pid", "restarts", "oom_killed", "model", "pids", "flags.--list"):
        assert any(m.startswith(name + ":") for m in marks), (name, marks)


def test_a_bad_container_part_is_left_out_and_a_bad_container_too():
    c = dict(
        GOOD_CONTAINER,
        status=7,  # optional: unknown
        gpus=["0", 1, "2"],
        ports=[
            {"container_port": 8000, "host_port": "18000", "host_ip": "", "proto": "tcp"},
            {"container_port": 8001, "host_port": 18001, "host_ip": "::", "proto": "tcp"},
        ],
        mounts="/etc",
        smuggled={"a": 1},
    )
    marks: list[str] = []
    s = seat_from_json("h", dict(SEAT, container=c), marks)
    assert s.container is not None and "smuggled" not in s.container
    assert s.container["status"] is None
    assert s.container["gpus"] == ["0", "2"]
    assert [p["host_port"] for p in s.container["ports"]] == [18001]
    assert s.container["mounts"] == []
    assert len(marks) == 4, marks  # status, one gpu, one port, the mounts
    many = dict(GOOD_CONTAINER, gpus=[str(i) for i in range(MAX_LIST + 5)])
    marks = []
    assert len(seat_from_json("h", dict(SEAT, container=many), marks).container["gpus"]) == MAX_LIST
    assert marks == [f"seat.container.gpus: 5 past {MAX_LIST} left out"]
    # what the container is known by is not text: the container is left out, the seat stays
    marks = []
    s = seat_from_json("h", dict(SEAT, container=dict(GOOD_CONTAINER, name=None)), marks)
    assert s.container is None and s.port == 18000
    assert marks and marks[0].endswith("container left out"), marks
    marks = []
    assert seat_from_json("h", dict(SEAT, container=[1]), marks).container is None and marks


def test_a_seat_whose_kind_is_not_text_is_left_out_with_a_warning_the_others_stay():
    seats, warnings = check_section("h", "seats", [dict(SEAT, kind=5), SEAT, "nonsense"])
    assert [s.port for s in seats] == [18000]
    assert len(warnings) == 2 and all("quarantined" in w for w in warnings), warnings
    h = host_from_probe("h", {"seats": [dict(SEAT, port=True)]}, 1.0, 1.0)
    assert h.seats[0].port is None and any("port: " in w for w in h.warnings)


def test_status_json_round_trip_keeps_a_checked_seat_as_it_was():
    """`to_json` and back (a recorded fleet, `status --json`) gives the same seat: nothing is
    escaped twice or lost, the controller's per-card memory included."""
    h = host_from_probe("h", {"seats": [dict(SEAT, command="a\\nb\x1b")]}, 1.0, 1.0)
    (s,) = h.seats
    s2 = seat_from_json("h", s.to_json())
    assert s2 == s
