"""One request loop for every helper: `serve({op: fn})`, one answer shape, one error shape.

A request is a JSON object with `op`; the answer is the handler's dict plus `"ok": true`, or
`{"ok": false, "error": {"code": CODE, "message": SENTENCE, ...}}`. One-shot helpers read one
request (the rest of stdin); resident helpers read one JSON line at a time until EOF.
"""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Mapping

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import BinaryIO


class Refused(Exception):
    """An expected refusal: a reason code and one sentence (plus any extra fields)."""

    def __init__(self, code: str, message: str, **extra: object) -> None:
        Exception.__init__(self, message)
        self.code = code
        self.message = message
        self.extra = extra

    def as_error(self) -> dict[str, object]:
        """The error object of the answer."""
        out: dict[str, object] = {"code": self.code, "message": self.message}
        out.update(self.extra)
        return out


def error_answer(code: str, message: str, **extra: object) -> dict[str, object]:
    """The one error shape."""
    err: dict[str, object] = {"code": code, "message": message}
    err.update(extra)
    return {"ok": False, "error": err}


def dispatch(ops: Mapping, req: object) -> dict:
    """Run the handler `req["op"]` names; always an answer dict, never an exception."""
    if not isinstance(req, dict):
        return error_answer("bad-request", "the request is not a JSON object")
    op = req.get("op")
    fn = ops.get(op) if op is None or isinstance(op, str) else None  # a list is unhashable
    if fn is None:
        return error_answer(
            # only the named ops: the resident probe's table also maps None (a request with no
            # op), which sorted() cannot order beside strings
            "bad-request",
            "unknown op %r (known: %s)"
            % (op, ", ".join(sorted(k for k in ops if isinstance(k, str)))),
        )
    try:
        out = fn(req)
    except Refused as e:
        return {"ok": False, "error": e.as_error()}
    except Exception as e:  # the helper answers, whatever broke: the controller shows it
        tb = traceback.format_exc().strip().splitlines()
        return error_answer("internal", "%s: %s" % (type(e).__name__, e), traceback=tb[-12:])
    out = dict(out or {})
    out.setdefault("ok", True)
    return out


def dumps(obj: object) -> str:
    """JSON text for an answer: undecodable path bytes (surrogates) travel as-is, escaped."""
    return json.dumps(obj, ensure_ascii=True, allow_nan=False, default=str)


def scrub(obj: object, where: str = "", found: list[str] | None = None) -> object:
    """`obj` with every non-finite float (NaN, +-inf) replaced by None; `found` collects where
    each one was (`runs[3].eta_seconds`), so one bad value costs one field, never the answer."""
    if isinstance(obj, float):
        if obj != obj or obj in (float("inf"), float("-inf")):
            if found is not None:
                found.append(where or "(answer)")
            return None
        return obj
    if isinstance(obj, dict):
        return dict(
            (k, scrub(v, "%s.%s" % (where, k) if where else str(k), found)) for k, v in obj.items()
        )
    if isinstance(obj, (list, tuple)):
        return [scrub(v, "%s[%d]" % (where, i), found) for i, v in enumerate(obj)]
    return obj


def _send(out: BinaryIO, obj: object) -> None:
    try:
        data = dumps(obj)
    except ValueError:
        # a non-finite number slipped into an answer: that field becomes null and the answer
        # names it in its warnings, rather than emitting invalid JSON or losing the whole answer
        found = []  # type: list
        obj = scrub(obj, "", found)
        if isinstance(obj, dict):
            w = obj.get("warnings")
            if not isinstance(w, list):
                w = []
            obj["warnings"] = w + ["non-finite number dropped at %s" % p for p in found[:20]]
        data = dumps(obj)
    out.write(data.encode("utf-8", "surrogateescape") + b"\n")
    out.flush()


def serve(
    ops: Mapping,
    resident: bool | None = None,
    inp: BinaryIO | None = None,
    out: BinaryIO | None = None,
) -> int:
    """Answer requests from stdin on stdout. `resident` None: resident when argv says
    `--resident`. Returns the exit status for `sys.exit`."""
    inp = inp or sys.stdin.buffer
    out = out or sys.stdout.buffer
    if resident is None:
        resident = "--resident" in sys.argv[1:]
    if not resident:
        raw = inp.read()
        try:
            req = json.loads(raw.decode("utf-8", "surrogateescape")) if raw.strip() else {}
        except ValueError as e:
            _send(out, error_answer("bad-request", "the request is not JSON: %s" % e))
            return 2
        _send(out, dispatch(ops, req))
        return 0
    while True:
        line = inp.readline()
        if not line:
            return 0
        if not line.strip():
            continue
        try:
            req = json.loads(line.decode("utf-8", "surrogateescape"))
        except ValueError as e:
            _send(out, error_answer("bad-request", "the request is not JSON: %s" % e))
            continue
        _send(out, dispatch(ops, req))
