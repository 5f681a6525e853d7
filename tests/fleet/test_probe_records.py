"""Each snapshot model names what the probe declares of its item (`backend/host/probe/wire.py`)
and nothing else but what the controller adds: a field the probe gains is either read into the
model (and checked there, `backend/fleet/validate.py`) or named here as not kept, so none is
dropped without a test saying so. A GPU's figures are checked from the declaration itself
(tests/fleet/test_gpu_declared.py)."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from fleetdeck.backend.fleet import models
from fleetdeck.backend.fleet.seat_model import Seat
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
