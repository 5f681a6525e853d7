"""A run's progress as its files record it: progress.jsonl (read incrementally, its tail
only on first sight), else Hugging Face Trainer's trainer_state.json, with one rule for where
the listing and the `series` op read it (`series_source`), and a run's step times."""
# Runs on the host's Python 3.8 or newer, bundled with the probe.

from __future__ import annotations

import os
from collections.abc import Collection, Sequence

from fleetdeck.backend.host.lib import jsondepth, layout
from fleetdeck.backend.host.lib.serve import Refused
from fleetdeck.backend.host.probe.common import (
    CACHE,
    MAX_LOSS_POINTS,
    finite,
    open_file,
    read_text,
    stat_key,
)

# progress.jsonl may grow to hundreds of MB: one poll never reads more than this of it
PROGRESS_TAIL = 4 << 20
PROGRESS_CHUNK = 16 << 20
# a run's s/step is the median of its last this many logged step times (one slow step, a save
# or an eval, does not move it, nor the ETA reckoned from it)
MEDIAN_STEPS = 20


def progress(path: str) -> dict:
    """progress.jsonl, parsed incrementally: only bytes appended since the last poll are read."""
    st = os.stat(path)
    c = CACHE.get(("progress", path))
    if c is not None and c[0] == stat_key(st):
        return c[1]
    p = (
        c[1]
        if c is not None and c[1]["ino"] == st.st_ino and st.st_size >= c[1]["offset"]
        else None
    )
    if p is None:
        p = {
            "ino": st.st_ino,
            "offset": 0,
            "lineno": 0,
            "step": None,
            "max_steps": None,
            "loss": None,
            "eval_loss": None,
            "losses": [],
            "eval_losses": [],
            "sps": None,
            "times": [],
            "error": None,
            "nonfinite": None,
        }
    else:
        p = dict(
            p,
            losses=list(p["losses"]),
            eval_losses=list(p["eval_losses"]),
            times=list(p["times"]),
            sps_recent=list(p.get("sps_recent") or []),
        )
    with open_file(path) as f:
        if p["offset"] == 0 and st.st_size > PROGRESS_TAIL:
            # first sight of a large file: its tail is enough for the state and the recent series;
            # the offset is remembered, so later polls read only what was appended
            f.seek(st.st_size - PROGRESS_TAIL)
            f.readline()  # a partial line
            p["offset"] = f.tell()
            p["skipped_bytes"] = p["offset"]
        f.seek(p["offset"])
        data = f.read(PROGRESS_CHUNK)  # a burst of appends is caught up over several polls
    lines = data.split(b"\n")
    torn = lines.pop()  # bytes after the last newline: a line still being written
    for i, raw in enumerate(lines):
        try:
            obj = jsondepth.loads(raw.decode("utf-8"), what="the line") if raw.strip() else {}
            if not isinstance(obj, dict):
                raise ValueError("not an object")
        except ValueError:
            if i == len(lines) - 1 and not torn:
                break  # a torn last line: read it again next poll, when more may follow it
            p["error"] = p["error"] or f"progress.jsonl line {p['lineno'] + 1} is not a JSON object"
            obj = {}
        p["lineno"] += 1
        p["offset"] += len(raw) + 1
        _progress_line(p, obj)
    caught_up = p["offset"] + len(torn) >= st.st_size
    CACHE[("progress", path)] = (stat_key(st) if caught_up else None, p)
    return p


def thin(series: Sequence, n: int) -> list:
    """At most `n` points of a [step, value] series: the newest n/2 as they are, and n/2 spread
    evenly over the older part, its first point included (the shape of a long run stays
    visible; a run's full series is the `series` op)."""
    if len(series) <= n:
        return list(series)
    keep = n // 2
    old, new = series[:-keep], series[-keep:]
    k = n - keep
    picked = [old[(i * (len(old) - 1)) // max(1, k - 1)] for i in range(k)] if k > 1 else old[:1]
    return list(picked) + list(new)


FULL_SERIES_POINTS = 100000  # a `series` answer: at most this many points per series
FULL_SERIES_READ = 256 << 20  # and at most this much of progress.jsonl read for it


def series_source(
    path: str, names: Collection[str], cks: list[tuple[int, str]] | None = None
) -> tuple[str | None, str | None, list[tuple[int | None, str]]]:
    """Where a run's progress and series are read from, one rule for the listing and the
    `series` op: (kind, path, states). ("progress", `<run>/progress.jsonl`) when the run has
    one; else ("trainer_state", the newest `trainer_state.json`): that of the newest checkpoint,
    in `<run>/checkpoints/` or in `<run>/` as Hugging Face's Trainer saves them, or the run
    root's when it is at least as new; else (None, None, []). `states`: [(step, path)] of every
    checkpoint's trainer_state.json, oldest first, and the run root's last (step None) when it
    is the one read. `names`: the run folder's listing; `cks`: its checkpoints
    (`layout.checkpoints`), looked up when not given."""
    if "progress.jsonl" in names:
        return "progress", os.path.join(path, "progress.jsonl"), []
    if cks is None:
        cks = layout.checkpoints(path, names)
    states = []  # type: list[tuple[int | None, str]]
    states += [(s, os.path.join(p, "trainer_state.json")) for s, p in cks]
    states = [x for x in states if os.path.isfile(x[1])]
    top = os.path.join(path, "trainer_state.json")
    if "trainer_state.json" in names and (
        not states or os.stat(top).st_mtime >= os.stat(states[-1][1]).st_mtime
    ):
        states.append((None, top))
    if not states:
        return None, None, []
    return "trainer_state", states[-1][1], states


def full_series(path: str) -> dict:
    """A run's whole series, read where the listing reads it (`series_source`): progress.jsonl,
    else the newest trainer_state.json; thinned only past FULL_SERIES_POINTS; bad lines and
    non-finite values are skipped, as in a snapshot."""
    try:
        names = set(os.listdir(path))
    except OSError:
        names = set()
    kind, src, _states = series_source(path, names)
    p = {  # type: dict
        "step": None,
        "max_steps": None,
        "loss": None,
        "eval_loss": None,
        "losses": [],
        "eval_losses": [],
        "sps": None,
        "times": [],
        "nonfinite": None,
    }
    if src is not None and kind == "progress":
        read = 0
        with open_file(src) as f:
            for raw in f:
                read += len(raw)
                if read > FULL_SERIES_READ:
                    break
                try:
                    obj = jsondepth.loads(raw.decode("utf-8"))
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    _progress_line(p, obj, cap=False)
                    for s in ("losses", "eval_losses"):
                        if len(p[s]) > 4 * FULL_SERIES_POINTS:
                            p[s] = thin(p[s], 2 * FULL_SERIES_POINTS)
    elif src is not None:
        p = trainer_state(src, cap=False)
        if p.get("error"):
            raise Refused("unreadable", p["error"])
    else:
        raise Refused(
            "no-series",
            f"{path} holds neither progress.jsonl nor trainer_state.json (at its "
            "root, or in a checkpoint-N folder under it or under its checkpoints/)",
        )
    return {
        "path": path,
        "losses": thin(p["losses"], FULL_SERIES_POINTS),
        "eval_losses": thin(p["eval_losses"], FULL_SERIES_POINTS),
    }


def _progress_line(p: dict, obj: dict, cap: bool = True) -> None:
    step = int(obj["step"]) if finite(obj.get("step")) else None
    if step is not None:
        p["step"] = step if p["step"] is None else max(p["step"], step)
    if finite(obj.get("max_steps")):
        p["max_steps"] = int(obj["max_steps"])
    for key, series in (("loss", "losses"), ("eval_loss", "eval_losses")):
        v = obj.get(key)
        if v is None or isinstance(v, bool):
            continue
        if finite(v):
            p[key] = float(v)
            if step is not None:
                p[series].append([step, float(v)])
        elif isinstance(v, float):
            p["nonfinite"] = f"{key} is {v} at step {step}"
    if finite(obj.get("seconds_per_step")) and obj["seconds_per_step"] > 0:
        p["sps"] = float(obj["seconds_per_step"])
        p["sps_recent"] = (p.get("sps_recent") or [])[-(MEDIAN_STEPS - 1) :] + [p["sps"]]
    if step is not None and finite(obj.get("time")):
        p["times"] = (p["times"] + [[step, float(obj["time"])]])[-(MEDIAN_STEPS + 1) :]
    for series in ("losses", "eval_losses"):
        if cap and len(p[series]) > 2 * MAX_LOSS_POINTS:
            p[series] = p[series][-MAX_LOSS_POINTS:]


def trainer_state(path: str, cap: bool = True) -> dict:
    """Hugging Face Trainer's trainer_state.json: step, max_steps and the loss series (`cap`:
    its newest MAX_LOSS_POINTS, as a snapshot keeps them)."""
    try:
        d = jsondepth.loads(read_text(path), what="it")
        if not isinstance(d, dict) or not isinstance(d.get("log_history", []), list):
            raise ValueError("not a trainer state object")
    except ValueError as e:
        return {"error": f"{path} is not valid JSON (truncated?): {str(e)[:80]}"}
    p = {  # type: dict
        "step": None,
        "max_steps": None,
        "loss": None,
        "eval_loss": None,
        "losses": [],
        "eval_losses": [],
        "sps": None,
        "error": None,
        "nonfinite": None,
        "save_steps": d.get("save_steps") if finite(d.get("save_steps")) else None,
    }
    for entry in d.get("log_history") or []:
        if isinstance(entry, dict):
            _progress_line(p, {k: entry.get(k) for k in ("step", "loss", "eval_loss")}, cap=cap)
    if finite(d.get("global_step")):
        p["step"] = int(d["global_step"])
    if finite(d.get("max_steps")):
        p["max_steps"] = int(d["max_steps"])
    return p


def step_times(prog: dict) -> tuple[float | None, list[float]]:
    """(the last step's time, the recent step times) of a run's progress: the trainer's own
    per-line `seconds_per_step`, else the time between logged lines over the steps between
    them, else the one figure Hugging Face's saves give."""
    recent = list(prog.get("sps_recent") or [])
    if recent:
        return recent[-1], recent
    t = prog.get("times") or []
    pairs = [(t[i - 1], t[i]) for i in range(1, len(t))]  # (zip's strict= is not in 3.8)
    rates = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in pairs if b[0] > a[0] and b[1] >= a[1]]
    rates = [x for x in rates if x > 0][-MEDIAN_STEPS:]
    if rates:
        return rates[-1], rates
    sps = prog.get("sps")
    return (sps, []) if sps else (None, [])
