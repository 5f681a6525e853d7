"""The resident probe's side of deltas: a delta only on the answer it sent last, whole on any
other number, on `fresh`, and every FULL_EVERY answers; the sections left out are byte for byte
the ones it sent before. A real resident probe over a real run folder."""

from __future__ import annotations

import json
import subprocess
import sys

from fleetdeck.backend.host.probe.delta import FULL_EVERY, SECTIONS

from support.probe import PROBE, write_progress


def test_deltas_only_on_the_last_answer_and_whole_on_anything_else(tmp_path, children):
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    write_progress(run, range(1, 6))
    p = subprocess.Popen(
        [sys.executable, str(PROBE), "--resident"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    children.append(p)
    base = {"runs": [str(tmp_path / "runs")], "disk_paths": [str(tmp_path)]}

    def ask(**extra) -> dict:
        assert p.stdin and p.stdout
        p.stdin.write(json.dumps({**base, **extra}).encode() + b"\n")
        p.stdin.flush()
        return json.loads(p.stdout.readline())

    first = ask()
    assert first["seq"] == 1 and "base" not in first and "same" not in first
    held = {s: first[s] for s in SECTIONS}
    delta = ask(held=1)
    assert delta["seq"] == 2 and delta["base"] == 1 and "runs" in delta["same"]
    for s in SECTIONS:  # each section is either sent or the same as answer 1's
        assert (s in delta) != (s in delta["same"]), s
        held[s] = delta.get(s, held[s])
    # another number, a bool, a float, the answer before last: whole, never a delta
    for wrong in (1, 99, True, 2.0, "2", None):
        got = ask(held=wrong)
        assert "base" not in got and "same" not in got, wrong
    last = got["seq"]
    assert "base" in ask(held=last)
    assert "base" not in ask(held=last + 1, fresh=True)
    # whole every FULL_EVERY answers whatever the request holds
    kinds = []
    seq = last + 2
    for _ in range(FULL_EVERY + 1):
        got = ask(held=seq)
        seq = got["seq"]
        kinds.append("base" in got)
    # the fresh answer was the first of FULL_EVERY: FULL_EVERY - 1 deltas follow it, then whole
    assert kinds == [True] * (FULL_EVERY - 1) + [False, True], kinds


def test_an_unknown_or_malformed_op_is_answered_and_the_resident_probe_lives_on(children):
    """Its table also maps None (a request with no op is a snapshot): an unknown op is refused
    naming the known ones, a list or an object as op is refused, and the next request is
    answered by the same process."""
    p = subprocess.Popen(
        [sys.executable, str(PROBE), "--resident"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    children.append(p)

    def ask(req: dict) -> dict:
        assert p.stdin and p.stdout
        p.stdin.write(json.dumps(req).encode() + b"\n")
        p.stdin.flush()
        return json.loads(p.stdout.readline())

    for op in ("nope", ["snapshot"], {"x": 1}, 7):
        got = ask({"op": op})
        assert got["error"]["code"] == "bad-request", got
        assert "snapshot" in got["error"]["message"], got
    assert ask({"op": "ping"}).get("ok") is not False and p.poll() is None
