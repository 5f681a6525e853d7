"""The wire declared once: each action helper's records (`backend/host/*/wire.py`) drive the
controller's check of its answers (`backend/fleet/link/wire.py`), so every declared field is
checked, and a host answer missing one or holding another type is refused by name."""

from __future__ import annotations

import sys
import typing
from pathlib import Path

import pytest

from fleetdeck.backend.actions import fronts
from fleetdeck.backend.fleet.config import HostConfig
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.link.wire import fields_of, record_refusal
from fleetdeck.backend.fleet.logs import log_lines
from fleetdeck.backend.host import holders as holders_main
from fleetdeck.backend.host import holders_wire, logs_wire, process_wire
from fleetdeck.backend.host import logs as logs_main
from fleetdeck.backend.host import process as process_main
from fleetdeck.backend.host.launch import main as launch_main
from fleetdeck.backend.host.launch import wire as launch_wire
from fleetdeck.backend.host.mirror import wire as mirror_wire
from fleetdeck.backend.host.purge import main as purge_main
from fleetdeck.backend.host.purge import wire as purge_wire
from fleetdeck.backend.host.schedules import main as schedules_main
from fleetdeck.backend.host.schedules import wire as schedules_wire
from fleetdeck.backend.host.seat_check import wire as seat_wire

WIRES = (
    purge_wire,
    mirror_wire,
    launch_wire,
    schedules_wire,
    seat_wire,
    holders_wire,
    process_wire,
    logs_wire,
)
RECORDS = [
    getattr(w, n)
    for w in WIRES
    for n in dir(w)
    if not n.startswith("_") and typing.is_typeddict(getattr(w, n))
]
LOCAL = HostConfig(name="local", local=True, python=sys.executable, command_timeout=20)


def example(hint: object) -> object:
    """The smallest value of a declared type (a record: its required keys only)."""
    if typing.is_typeddict(hint):
        required, hints = fields_of(hint)  # type: ignore[arg-type]
        return {k: example(hints[k]) for k in required}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        return None if type(None) in args else example(args[0])
    if origin is typing.Literal:
        return args[0]
    return {str: "x", int: 1, float: 0.5, bool: True, list: [], dict: {}}.get(
        origin or hint,
        None,  # type: ignore[call-overload]
    )


def wrong(hint: object) -> object:
    """A JSON value the declared type does not take."""
    origin = typing.get_origin(hint) or hint
    if origin is typing.Union:
        return {"not": "this"} if dict not in map(typing.get_origin, typing.get_args(hint)) else 7
    return "text" if origin is not str else 7


@pytest.mark.parametrize(
    "record",
    RECORDS,
    ids=lambda r: f"{r.__module__.removeprefix('fleetdeck.backend.host.')}.{r.__name__}",
)
def test_every_declared_field_is_checked(record):
    """For each record: its smallest example passes; each required key taken away, and each
    declared key (required or not) given a value of another type, is refused naming that key.
    A field added to a declaration is covered here with nothing else to change."""
    required, hints = fields_of(record)
    good = example(record)
    assert record_refusal(good, record) is None
    for key in required:
        less = {k: v for k, v in good.items() if k != key}
        assert record_refusal(less, record) == f"the answer has no {key}"
    for key, hint in hints.items():
        if hint is typing.Any:
            continue
        why = record_refusal({**good, key: wrong(hint)}, record)
        assert why is not None and why.startswith(f"{key} is "), (key, why)


def test_a_nested_field_is_named_by_its_path():
    ans = {
        "facts": example(purge_wire.Facts),
        "verdict": {"paths": [], "warnings": []},
        "changed": [None],
        "results": [{"deleted": True, "error": None, "changed": None, "free_bytes_after": "1"}],
        "attempted": True,
    }
    assert record_refusal(ans, purge_wire.Executed) == (
        "results[0].free_bytes_after is a string, not an integer or null"
    )
    assert record_refusal(True, purge_wire.Executed) == "the answer is true or false, not an object"
    ans["results"][0]["free_bytes_after"] = 10
    assert record_refusal(ans, purge_wire.Executed) is None


def _stand_in(answer: dict) -> str:
    """A helper's source that answers `answer` whatever it is asked (run as `local` runs it)."""
    return f"import json, sys\nsys.stdin.read()\nprint(json.dumps({answer!r}))\n"


SOUND = {
    "ok": True,
    "port": 8000,
    "sound": True,
    "signature": None,
    "message": "m on port 8000 answered 3 completion tokens",
    "model": "m",
    "models": ["m"],
    "endpoint": "/v1/chat/completions",
    "requests": 2,
    "seconds": 0.2,
    "completion_tokens": 3,
    "logprobs": 3,
}


async def test_a_host_answer_of_another_shape_is_refused_by_the_front():
    """A real helper process (the `local` host's) answers `check` without `sound`, or with
    `requests` as a string: the front raises HostError `bad-answer` naming the field; the
    whole answer passes."""
    async with HostLink(LOCAL) as link:
        sure = await fronts.seat_check(link, {"port": 8000}, helper=_stand_in(SOUND))
        assert sure["sound"] is True and sure["completion_tokens"] == 3
        missing = {k: v for k, v in SOUND.items() if k != "sound"}
        with pytest.raises(HostError) as e:
            await fronts.seat_check(link, {"port": 8000}, helper=_stand_in(missing))
        assert e.value.code == "bad-answer"
        assert e.value.message == (
            "the seat check gave an answer the controller cannot read: the answer has no sound"
        )
        with pytest.raises(HostError) as e:
            await fronts.seat_check(
                link, {"port": 8000}, helper=_stand_in({**SOUND, "requests": "2"})
            )
        assert e.value.code == "bad-answer"
        assert e.value.message.endswith("requests is a string, not an integer")


async def test_a_real_purge_helper_answer_is_its_record(tmp_path):
    """The purge helper itself, run on the `local` host: its `check` answer passes the check
    its declaration drives."""
    run = tmp_path / "runs" / "r1" / "checkpoint-1"
    run.mkdir(parents=True)
    (run / "x.bin").write_bytes(b"x" * 10)
    async with HostLink(LOCAL) as link:
        facts = await fronts.purge_check(
            link, {"paths": [str(run)], "roots": [str(tmp_path / "runs")]}
        )
    assert [p["path"] for p in facts["paths"]] == [str(run)]


def test_each_op_a_front_asks_is_one_the_helper_answers():
    """The op strings live in the wire modules: the helpers' tables are keyed by them."""
    assert set(purge_main.OPS) == {purge_wire.CHECK, purge_wire.EXECUTE}
    assert set(schedules_main.OPS) == {schedules_wire.INSPECT, schedules_wire.APPLY}
    assert set(launch_main.OPS) == {
        launch_wire.PREFLIGHT,
        launch_wire.LAUNCH,
        launch_wire.SUPERVISE,
    }
    # the tools' helpers write their ops out, so that the wire's typing stays off the host
    assert set(holders_main.OPS) == {holders_wire.HOLDERS}
    assert set(process_main.OPS) == {process_wire.STOP}
    assert logs_main.OP == logs_wire.TAIL


REPO = Path(__file__).resolve().parents[2]
CONTROLLER = ("backend/actions", "backend/monitor", "cli", "tui")


def op_literals(root: Path, folders: tuple[str, ...] = CONTROLLER) -> list[str]:
    """Every `"op": ` written in a controller module other than the fronts: a request built
    by hand instead of through its front (`path:line`)."""
    found = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            if path.name == "fronts.py" or path.name == "outbox.py":  # the outbox's own journal
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if '"op":' in line:
                    found.append(f"{path.relative_to(root)}:{n}")
    return found


def test_the_controller_asks_the_helpers_through_their_fronts_only(tmp_path):
    assert op_literals(REPO) == []
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "x.py").write_text('req = {"op": "check", "port": 1}\n')
    assert op_literals(tmp_path, ("cli",)) == ["cli/x.py:1"]


def _python38() -> str | None:
    found = sorted(Path("/root/.pyenv/versions").glob("3.8*/bin/python"))
    return str(found[0]) if found else None


@pytest.mark.parametrize(
    "python",
    [
        pytest.param(sys.executable, id="this-python"),
        pytest.param(
            _python38(),
            id="python3.8",
            marks=pytest.mark.skipif(_python38() is None, reason="no Python 3.8 (pyenv 3.8)"),
        ),
    ],
)
async def test_a_real_holders_answer_is_its_record(tmp_path, python):
    """The holders helper itself on a `local` host under this Python and under the oldest a
    host runs (3.8, where its annotations are never evaluated): the answer passes the check
    `holders_wire.Holders` drives."""
    held = tmp_path / "held.bin"
    held.write_bytes(b"x")
    host = HostConfig(name="local", local=True, python=python, command_timeout=60)
    with held.open("rb"):
        async with HostLink(host) as link:
            ans = await fronts.holders(link, {"path": str(tmp_path)})
    assert ans["kind"] == "directory" and ans["resolved"] == str(tmp_path)
    assert ans["entries"] == 2 and ans["complete"] is True
    assert record_refusal(ans, holders_wire.Holders) is None


async def test_holders_and_process_answers_of_another_shape_are_refused_by_their_fronts():
    """A stand-in helper answers `holders` with a use of an unknown kind, and `stop` with
    `signals` as a string: each front raises HostError `bad-answer` naming the field."""
    use = {"how": "ptrace", "file": "/x"}
    holder = {"pid": 7, "start": 1, "user": "u", "command": "c", "comm": "c", "more_uses": 0}
    ans = {
        "ok": True,
        "path": "/x",
        "resolved": "/x",
        "kind": "file",
        "entries": 1,
        "complete": True,
        "processes": 3,
        "holders": [{**holder, "uses": [use]}],
        "unreadable": [],
    }
    async with HostLink(LOCAL) as link:
        with pytest.raises(HostError) as e:
            await fronts.holders(link, {"path": "/x"}, helper=_stand_in(ans))
        assert e.value.code == "bad-answer"
        assert e.value.message.endswith(
            "holders[0].uses[0].how is a string, not 'fd' or 'maps' or 'cwd' or 'root'"
        )
        use["how"] = "maps"
        sure = await fronts.holders(link, {"path": "/x"}, helper=_stand_in(ans))
        assert sure["holders"][0]["uses"] == [use]
        stopped = {"ok": True, "result": "stopped", "signals": "SIGTERM"}
        with pytest.raises(HostError) as e:
            await fronts.process_stop(link, {"pid": 7, "start": 1}, helper=_stand_in(stopped))
        assert e.value.code == "bad-answer"
        assert e.value.message == (
            "the process stop gave an answer the controller cannot read: "
            "signals is a string, not a list"
        )


def _reader(lines: list[dict]) -> str:
    """A log reader's stand-in source: reads the request line, answers `lines`, one a line."""
    return "import json, sys\nsys.stdin.readline()\n" + "".join(
        f"print(json.dumps({x!r}), flush=True)\n" for x in lines
    )


async def test_the_log_reader_is_held_to_its_records(tmp_path, monkeypatch):
    """The real log reader on a `local` host: its first answer is a `Tailed`. A stand-in whose
    first answer has no text, or whose follow line's offset is a string, is refused as
    `bad-answer` naming the field."""
    run = tmp_path / "run-1"
    run.mkdir()
    (run / "train.log").write_text("one\ntwo\n")
    async with HostLink(LOCAL) as link:
        assert [x async for x in log_lines(link, str(run), 1)] == ["two"]
        first = {"ok": True, "path": "p", "offset": 0}
        monkeypatch.setattr("fleetdeck.backend.fleet.logs.HELPER", _reader([first]))
        with pytest.raises(HostError) as e:
            [x async for x in log_lines(link, str(run), 1)]
        assert (e.value.code, e.value.message) == (
            "bad-answer",
            "the log reader gave an answer the controller cannot read: the answer has no text",
        )
        lines = [{**first, "text": "a"}, {"text": "b\n", "offset": "2"}]
        monkeypatch.setattr("fleetdeck.backend.fleet.logs.HELPER", _reader(lines))
        got = []
        with pytest.raises(HostError) as e:
            async for x in log_lines(link, str(run), 1, follow=True):
                got.append(x)
        assert got == ["a"] and e.value.code == "bad-answer"
        assert e.value.message.endswith("offset is a string, not an integer")
