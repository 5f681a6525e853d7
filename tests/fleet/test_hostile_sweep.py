"""Every byte from a host is hostile: a sweep over the whole probe answer.

A real probe answer (the probe's own `snapshot` of a run folder it read, with a GPU record
beside it) has one or more of its values, anywhere in it, replaced by something a broken or
hostile host could send: text with terminal escapes, C1 controls, lone surrogates, bidi
overrides and Rich markup, numbers past any range, NaN, the wrong type, a whole record
replaced. Whatever it becomes, the controller checks it without raising, and every place that
shows it (the CLI's tables, `status --json` read back, the dashboard's row cells and the
Prometheus text) shows it escaped and whole: no control character reaches a terminal, no text
fails to encode, the exposition parses. hypothesis draws the cases and shrinks a failure to the
smallest answer that shows it.
"""

from __future__ import annotations

import copy
import io
import json
import math
import re
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.text import Text

from fleetdeck.backend.fleet.models import FleetSnapshot
from fleetdeck.backend.fleet.validate import fleet_from_json, host_from_probe
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.probe.main import snapshot
from fleetdeck.backend.monitor.metrics.export import FleetCollector
from fleetdeck.cli.status import fleet_table, runs_table
from fleetdeck.show.fmt import said
from fleetdeck.tui.fleet_state import FleetState
from fleetdeck.tui.rows.fleet import gpu_health_lines, host_cells, host_detail
from fleetdeck.tui.rows.runs import checkpoint_cell, run_cells, run_title
from fleetdeck.tui.rows.schedules import schedule_cells, schedule_detail, short_why

from support.probe import write_progress

#: what may never reach a terminal: C0 controls but newline, DEL, C1 controls, lone surrogates
UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\ud800-\udfff]")

NASTY = [
    "\x1b]52;c;SGVsbG8=\x07",  # an OSC 52 clipboard write
    "\x1b[2J",  # clear the screen
    "\x1bc",  # reset the terminal
    "\x9b31m",  # a C1 CSI
    "[bold]x[/nope]",  # markup that makes Rich raise
    "[link=file:///etc/passwd]x[/link]",
    "\u202eevil",  # a right-to-left override
    "\udcff",  # a byte that was not UTF-8, as the host decoded it
    "\ud800",  # a lone surrogate, as a JSON escape decodes it
    "\x00",
    "a" * 5000,
    "",
    "-rf",
    "$(touch /tmp/pwned)",
    "line\nbreak",
]

texts = st.one_of(
    st.sampled_from(NASTY),
    st.text(max_size=40),
    st.lists(st.sampled_from(NASTY), min_size=1, max_size=4).map("".join),
)
hostile = st.one_of(
    texts,
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.lists(st.one_of(st.integers(), texts), max_size=3),
    st.dictionaries(texts, st.one_of(st.integers(), texts), max_size=2),
)


def base_answer(root: Path) -> dict[str, Any]:
    """The probe's own answer for a run folder with a live-looking run and a checkpoint, and
    a GPU record in the shape its declaration gives."""
    run = root / "runs" / "run-1"
    (run / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    (run / "checkpoints" / "checkpoint-2" / "adapter_model.safetensors").write_bytes(b"x" * 64)
    write_progress(run, range(1, 4))
    ans = snapshot({"runs": [str(root / "runs")], "disk_paths": [str(root / "runs")]})
    ans["gpus"] = [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "uuid": "GPU-0",
            "memory_total_mib": 143771.0,
            "memory_used_mib": 1000.0,
            "utilization_pct": 7.0,
            "temperature_c": 40.0,
            "power_w": 100.0,
            "processes": [{"pid": 12, "user": "op", "used_mib": 900.0, "command": "python"}],
        }
    ]
    # this machine's own processes and schedules are kept to a few, so a case stays small
    for section in ("processes", "schedules", "seats"):
        if isinstance(ans.get(section), list):
            ans[section] = ans[section][:3]
    return ans


def places(d: Any, at: tuple = ()) -> list[tuple]:
    """The path of every value in `d`, records and lists included."""
    out = [at] if at else []
    if isinstance(d, dict):
        for k, v in d.items():
            out += places(v, (*at, k))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            out += places(v, (*at, i))
    return out


def put(d: Any, at: tuple, value: Any) -> None:
    for k in at[:-1]:
        d = d[k]
    d[at[-1]] = value


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[dict[str, Any], list[tuple]]:
    ans = base_answer(tmp_path_factory.mktemp("sweep"))
    assert ans["runs"] and ans["gpus"] and ans["disks"], ans.get("warnings")
    return ans, places(ans)


def plain(cell: Any) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


def safe(what: str, text: str) -> None:
    bad = UNSAFE.search(text)
    assert bad is None, f"{what}: {bad.group()!r} reached the screen in {text[:200]!r}"
    text.encode("utf-8")  # every character encodes: a terminal gets all of it or nothing fails


def rendered(table: Any) -> str:
    out = io.StringIO()
    Console(file=out, width=160, color_system=None, force_terminal=False).print(table)
    return out.getvalue()


@settings(
    max_examples=250,
    deadline=None,  # a busy machine is slow, never wrong
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_any_value_anywhere_in_an_answer_is_checked_and_shown_escaped(base, data):
    template, spots = base
    ans = copy.deepcopy(template)
    for at in data.draw(st.lists(st.sampled_from(spots), min_size=1, max_size=4), label="at"):
        try:
            put(ans, at, data.draw(hostile, label=repr(at)))
        except (KeyError, IndexError, TypeError):
            pass  # a place inside a value replaced by an earlier draw
    now = time.time()
    host = host_from_probe("h1", ans, 12.5, now)
    assert host.reachable
    snap = FleetSnapshot(hosts=(host,), time=now)

    # status --json, and read back as `runs`/`status` consumers read it
    doc = json.dumps(snap.to_json(), indent=1)
    assert all(ord(c) < 128 for c in doc)
    back = fleet_from_json(json.loads(doc))
    assert [h.name for h in back.hosts] == ["h1"]

    # the CLI's tables, and the warnings status prints under them
    safe("status", rendered(fleet_table(snap, 160)))
    safe("runs", rendered(runs_table(snap)))
    for w in host.warnings:  # kept as the host said them, escaped where shown
        safe("warning", said(w))

    # the dashboard's cells
    state = FleetState(["h1"], 5.0, clock=lambda: now + 1)
    state.apply(snap)
    fleet_widths = {"host": 8, "status": 13, "lat": 5, "gpus": 24, "disks": 16, "runs": 14}
    for cell in host_cells(state, "h1", {**fleet_widths, "stray": 5})[0]:
        safe("fleet cell", plain(cell))
    safe("host detail", host_detail(state, "h1").plain)
    for line in gpu_health_lines(host):
        safe("gpu health", " ".join(line))
    widths = {k: 20 for k in ("host", "name", "state", "prog", "sps", "eta", "loss", "eval")}
    for r in host.runs:
        for cell in run_cells(r, widths, "h1", shown(r.name)):
            safe("run cell", plain(cell))
        safe("run title", run_title(r).plain)
        for c in r.checkpoints:
            safe("checkpoint", checkpoint_cell(c).plain)
    columns = ("flag", "host", "kind", "why", "user", "spec", "cmd")
    for s in host.schedules:
        why = short_why(s)
        for cell in schedule_cells(s, why, "h1", columns):
            safe("schedule cell", plain(cell))
        safe("schedule detail", schedule_detail(s, why).plain)

    # /metrics: the exposition parses, and no sample is NaN where the host sent garbage
    collector = FleetCollector()
    collector.update(snap, [], {})
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode("utf-8")
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert not math.isinf(sample.value) or family.name.startswith("fleetdeck_silence")
