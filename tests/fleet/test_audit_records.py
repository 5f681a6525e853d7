"""Typed audit records against the real log file: each declared kind writes the very line the
keyword form wrote (same keys, same order, same values), and reads back into its own type; a
kind not declared, and a key a kind does not know, still read."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fleetdeck.backend.actions import audit
from fleetdeck.backend.actions.audit_records import (
    AckRecord,
    LaunchOutcomeRecord,
    LaunchRecord,
    MirrorRecord,
    OtherRecord,
    PurgeRecord,
    RemoveRecord,
    SilenceAddRecord,
    SilenceExpireRecord,
    StopRecord,
    parse,
    write,
)

STAMP = ("time", "ts", "user", "controller")

#: (record type, the keyword form's action/host/result, its keys, the keys the record leaves out)
CASES = [
    (
        MirrorRecord,
        ("mirror", "h2", "done"),
        dict(
            src="h1:/r/run-1/adapter",
            dst="/m/run-1/adapter",
            bytes=10,
            bytes_src=10,
            bytes_dst=10,
            files=2,
            verified=True,
            witnesses=2,
            reason=None,
            error=None,
            seconds=0.5,
            outside_links=[],
            free_bytes_before=100,
            free_bytes_after=90,
            replace=False,
            kept_as=None,
            confirmation=None,
        ),
        frozenset({"dirs"}),
    ),
    (
        LaunchRecord,
        ("launch", "gx10", "started"),
        dict(
            run="/r/run-8",
            pid=77,
            state="running",
            after=None,
            force=False,
            resume=False,
            waiter_pid=None,
            preflight=[{"name": "disk", "ok": True}],
            error=None,
            reason=None,
        ),
        frozenset({"warning"}),
    ),
    (
        LaunchRecord,
        ("launch", "gx10", "started"),
        dict(
            run="/r/run-8",
            pid=77,
            state="running",
            after=None,
            force=False,
            resume=True,
            error=None,
            warning="the answer was lost; the probe saw the run",
        ),
        frozenset({"waiter_pid", "preflight", "reason"}),
    ),
    (
        PurgeRecord,
        ("purge", "h1", "done"),
        dict(
            paths=[{"path": "/r/run-1/checkpoints/checkpoint-25", "bytes": 7, "deleted": True}],
            keepers=[{"path": "/r/run-1/adapter", "sha256_before": "ab", "sha256_after": "ab"}],
            confirmation={"via": "cli", "paths": []},
            keep_newest=None,
            witnesses=1,
            allow_best=[],
            evals=[],
            bytes=7,
            expected_bytes=7,
            free_bytes_before=100,
            free_bytes_after=107,
            reclaimed_bytes=7,
            warnings=[],
            error=None,
        ),
    ),
    (
        StopRecord,
        ("process-stop", "h1", "done"),
        dict(
            pid=4242,
            start=99,
            command="python train.py --x 'y z'",
            signal="TERM",
            outcome="stopped",
            reason=None,
            message="stopped",
            via="dashboard",
        ),
    ),
    (
        AckRecord,
        ("schedule-ack", "h1, h2", "done"),
        dict(
            ids=["cron:abc"], hosts={"cron:abc": ["h1", "h2"]}, all_hosts=False, via="cli", note="x"
        ),
    ),
    (
        AckRecord,
        ("schedule-ack", None, "refused"),
        dict(ids=["nope"], reason_code="unknown-id", message="no such schedule", via="dashboard"),
    ),
    (
        RemoveRecord,
        ("schedule-remove", "h1", "started"),
        dict(
            schedule={"id": "c-37", "kind": "crontab", "command": "sleep 1"},
            confirmation="c-37",
            reason_code=None,
            message="removing",
            backup=None,
            host_backup="/tmp/b",
            signals=[],
            plan="comment out line 3",
        ),
    ),
    (
        SilenceAddRecord,
        ("silence-add", "h1", "done"),
        dict(
            id="s-1",
            rule=None,
            subject="gpu\udcff",
            for_s=3600.0,
            ends=1.8e9,
            comment="maintenance",
            scope="h1",
        ),
    ),
    (
        SilenceExpireRecord,
        ("silence-expire", None, "failed"),
        dict(error="disk full", id="s-2", scope="all", ends_was=1.0),
    ),
    (
        LaunchOutcomeRecord,
        ("launch-outcome", "h2", "finished"),
        dict(
            run="/r/run-3",
            name="run-3",
            reason=None,
            step=159,
            max_steps=159,
            adapter="/r/run-3/adapter",
        ),
    ),
]


def _lines() -> list[dict]:
    return [json.loads(x) for x in audit.audit_path().read_text().splitlines()]


def _record(cls, head, fields, absent=frozenset()):
    """The typed record of `cls` holding `fields`: its declared keys as themselves, the rest in
    `extra` (as the keyword form writes them, flat)."""
    names = {f.name for f in dataclasses.fields(cls)}
    extra = {k: v for k, v in fields.items() if k not in names}
    kw = {k: v for k, v in fields.items() if k in names}
    return cls(
        host=head[1], result=head[2], absent=absent, **kw, **({"extra": extra} if extra else {})
    )


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0].ACTION)
def test_a_typed_record_writes_the_keyword_forms_line_and_reads_back_as_itself(case):
    cls, head, fields = case[:3]
    rec = _record(*case)
    assert rec.ACTION == head[0]
    audit.audit(*head, **fields)
    written = write(rec)
    old, new = _lines()
    assert list(new) == list(old)  # the same keys, in the same order
    assert {k: v for k, v in new.items() if k not in STAMP} == {
        k: v for k, v in old.items() if k not in STAMP
    }
    back = parse(new)
    assert type(back) is type(rec) and back == written
    assert back.stamp is not None and back.stamp.ts == new["ts"] and back.stamp.user == new["user"]
    assert back.fields() == fields


def test_an_undeclared_kind_and_an_unknown_key_still_read():
    audit.audit("rename", "h3", "done", src="h1:/a", dst="/b", bytes=10)
    audit.audit("process-stop", "h1", "done", pid=1, shiny="new")
    mirror, stop = (parse(d) for d in _lines())
    assert isinstance(mirror, OtherRecord) and mirror.action == "rename"
    assert mirror.fields() == {"src": "h1:/a", "dst": "/b", "bytes": 10}
    assert isinstance(stop, StopRecord) and stop.pid == 1 and stop.command is None
    assert stop.extra == {"shiny": "new"}


def test_a_launch_that_failed_before_the_host_answered_keeps_its_keys_in_the_kinds_order():
    # deliberate: one order per kind (the keyword form wrote error before force and resume)
    write(
        LaunchRecord(
            host="gx10",
            result="failed",
            run="/r/run-9",
            after=None,
            error="no answer",
            force=False,
            resume=False,
            absent=frozenset({"pid", "state", "waiter_pid", "preflight", "reason", "warning"}),
        )
    )
    (line,) = _lines()
    assert [k for k in line if k not in STAMP] == [
        "host", "action", "result", "run", "after", "force", "resume", "error"
    ]  # fmt: skip
    back = parse(line)
    assert isinstance(back, LaunchRecord) and back.pid is None and "pid" in back.absent
    assert list(back.fields()) == ["run", "after", "force", "resume", "error"]
