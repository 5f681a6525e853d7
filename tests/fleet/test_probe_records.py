"""Each snapshot model names what the probe declares of its item (`backend/host/probe/wire.py`)
and nothing else but what the controller adds: a field the probe gains is either read into the
model (and checked there, `backend/fleet/validate.py`) or named here as not kept, so none is
dropped without a test saying so. A GPU's figures are checked from the declaration itself
(tests/fleet/test_gpu_declared.py)."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from fleetdeck.backend.fleet import models, validate, validate_records
from fleetdeck.backend.fleet.seat_model import Seat
from fleetdeck.backend.fleet.validate import host_from_probe
from fleetdeck.backend.host.probe import wire

#: (model, declared record, the declared keys the model does not keep, the model's own fields)
PAIRS = [
    (models.Disk, wire.DiskRecord, set(), set()),
    (models.Process, wire.ProcessRecord, set(), set()),
    (models.Checkpoint, wire.CheckpointRecord, set(), set()),
    # how long a series was before it was thinned, the checkpoints a budget left out: the
    # probe's notes for a reader of its raw answer; the controller asks `series` for the whole
    (models.Run, wire.RunRecord, {"series_thinned", "checkpoints_left_out"}, {"host"}),
    # the package that owns a system cron file: `system` is what the stray verdict reads
    (models.Schedule, wire.ScheduleRecord, {"package"}, {"host"}),
    # the port inside a container: `port` is the one published, the one to check
    (Seat, wire.SeatRecord, {"listen_port"}, {"host", "memory_by_gpu"}),
]


@pytest.mark.parametrize(
    "model,record,not_kept,own", PAIRS, ids=lambda x: getattr(x, "__name__", "")
)
def test_a_model_names_what_the_probe_declares(model, record, not_kept, own):
    fields = {f.name for f in dataclasses.fields(model)}
    declared = set(typing.get_type_hints(record))
    assert declared - fields == not_kept, "declared, neither kept nor named as not kept"
    assert fields - declared == own, "kept, not declared by the probe"


def test_the_answer_fields_a_host_snapshot_keeps():
    """The answer's top level: the sections and figures a HostSnapshot keeps, and the rest
    (the delta's frame is read by fleet/held.py; hostname, pid and the children's CPU are the
    probe's own notes)."""
    declared = set(typing.get_type_hints(wire.Answer))
    kept = {f.name for f in dataclasses.fields(models.HostSnapshot)} | {"memory"}
    frame = {"seq", "base", "same"}
    notes = {"hostname", "pid", "probe_children_cpu_s"}
    assert declared - kept == frame | notes


#: (record, model, name in validate_records, a good item, how the answer holds it)
ITEMS = [
    (
        wire.DiskRecord,
        models.Disk,
        "disk",
        {"path": "/d", "mount": "/", "fstype": "ext4", "total_bytes": 9, "used_bytes": 1},
        "disks",
    ),
    (
        wire.ProcessRecord,
        models.Process,
        "process",
        {"pid": 9, "start": 1, "user": "u", "command": "c", "why": ["cpu"]},
        "processes",
    ),
    (wire.RunRecord, models.Run, "run", {"path": "/r", "name": "r", "state": "running"}, "runs"),
    (
        wire.ScheduleRecord,
        models.Schedule,
        "schedule",
        {"id": "c-1", "kind": "crontab", "user": "u", "spec": "* * * * *", "command": "c"},
        "schedules",
    ),
    (
        wire.SeatRecord,
        Seat,
        "seat",
        {"kind": "vllm", "model": "m", "port": 8000, "pid": 9, "command": "vllm serve m"},
        "seats",
    ),
]


def _bad(declared: object) -> list[object]:
    """Values a field declared of that type must not pass as: another type, past any bound."""
    base = validate_records.unwrapped(declared)
    if base is bool:
        return ["true", 1]
    if base is int:
        return ["7", 1.5, 10**30, True, -1]
    if base is float:
        return ["7", float("inf"), 1e300, False]
    return [7, {"a": 1}]  # text


@pytest.mark.parametrize("record,model,name,item,section", ITEMS, ids=[i[2] for i in ITEMS])
def test_every_declared_field_a_model_keeps_is_checked_from_the_declaration(
    record, model, name, item, section
):
    """Each field the plan reads, given a value of another type or past its bounds: the item
    stays with the field unknown (None, or the model's stand-in) or, for what it is known by,
    is left out; a warning names the field either way."""
    steps = validate_records.plan(record, model, name)
    assert {s[0] for s in steps} == set(typing.get_type_hints(record)) & {
        f.name for f in dataclasses.fields(model)
    } - set(validate_records.BY_HAND.get(name, ()))
    hints = typing.get_type_hints(record)
    for key, _path, _fn, _args, hard, _missing, default, *_fast in steps:
        for v in _bad(hints[key]):
            h = host_from_probe("h", {section: [dict(item, **{key: v})]}, 1.0, 1.0)
            got = getattr(h, section)
            named = [w for w in h.warnings if f"{key}: " in w]
            assert named, (name, key, v, h.warnings)
            if hard:
                assert got == () and "quarantined" in named[0], (name, key, v)
            else:
                assert getattr(got[0], key) in (None, default), (name, key, v)


class _Disk(wire.DiskRecord, total=False):
    inodes_used_pct: float | None
    label: str | None


@dataclasses.dataclass(frozen=True)
class _DiskModel(models.Disk):
    inodes_used_pct: float | None = None
    label: str | None = None


def test_a_field_declared_and_named_by_the_model_is_checked_escaped_and_cut(monkeypatch):
    """A disk field added to the declaration (with its bounds) and to the model: held to its
    type and bounds, and a text escaped and cut, with nothing else edited."""
    monkeypatch.setattr(wire, "DiskRecord", _Disk)
    monkeypatch.setattr(validate, "Disk", _DiskModel)
    monkeypatch.setitem(wire.RECORD_BOUNDS["disk"], "inodes_used_pct", (0.0, 100.0))
    disk = {"path": "/d", "mount": "/", "fstype": "ext4"}
    evil = "x\x1b[2J\n" + "y" * 5000
    h = host_from_probe("h", {"disks": [dict(disk, inodes_used_pct=50.0, label=evil)]}, 1.0, 1.0)
    (d,) = h.disks
    assert d.inodes_used_pct == 50.0 and d.label.startswith("x\\x1b[2J\\ny")
    assert len(d.label) == 4096 + 4 and d.label.endswith("…")
    h = host_from_probe("h", {"disks": [dict(disk, inodes_used_pct=101.0)]}, 1.0, 1.0)
    assert h.disks[0].inodes_used_pct is None
    assert "disk #0 /d: inodes_used_pct: out of range (float 101.0)" in h.warnings
