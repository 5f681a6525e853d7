"""The probe's runs section: every run folder under the configured roots, its facts read here,
the process working in it found by `run_evidence` and its state decided by `run_state`."""
# Runs on the host's Python 3.8 or newer, bundled with the probe.

from __future__ import annotations

import json
import os
import time
from statistics import median

from fleetdeck.backend.host.lib import jsondepth, layout
from fleetdeck.backend.host.probe import run_evidence, run_state
from fleetdeck.backend.host.probe.common import (
    CACHE,
    MAX_LOSS_POINTS,
    SERIES_POINTS,
    cached,
    finite,
    open_file,
    read_text,
    stat_key,
)

# -- runs ---------------------------------------------------------------------------------------
# progress.jsonl may grow to hundreds of MB: one poll never reads more than this of it
PROGRESS_TAIL = 4 << 20
PROGRESS_CHUNK = 16 << 20
# the runs section of one answer stays under this much JSON (docs/probe.md), and a run that is
# not live keeps this many points of each series once it is over it
RUNS_BUDGET = 3 << 20
IDLE_POINTS = 16
# a run's s/step is the median of its last this many logged step times (one slow step, a save
# or an eval, does not move it, nor the ETA reckoned from it)
MEDIAN_STEPS = 20


def _progress(path):
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


def thin(series, n):
    """At most `n` points of a [step, value] series: the newest n/2 as they are, and n/2 spread
    evenly over the older part, its first point included (the shape of a long run stays
    visible; a run's full series is the `series` op)."""
    if len(series) <= n:
        return list(series)
    keep = n // 2
    old, new = series[:-keep], series[-keep:]
    k = n - keep
    picked = [old[(i * (len(old) - 1)) // max(1, k - 1)] for i in range(k)] if k > 1 else old[:1]
    return picked + list(new)


FULL_SERIES_POINTS = 100000  # a `series` answer: at most this many points per series
FULL_SERIES_READ = 256 << 20  # and at most this much of progress.jsonl read for it


def series_source(path, names, cks=None):
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
    states = [(s, os.path.join(p, "trainer_state.json")) for s, p in cks]
    states = [x for x in states if os.path.isfile(x[1])]
    top = os.path.join(path, "trainer_state.json")
    if "trainer_state.json" in names and (
        not states or os.stat(top).st_mtime >= os.stat(states[-1][1]).st_mtime
    ):
        states.append((None, top))
    if not states:
        return None, None, []
    return "trainer_state", states[-1][1], states


def full_series(path):
    """A run's whole series, read where the listing reads it (`series_source`): progress.jsonl,
    else the newest trainer_state.json; thinned only past FULL_SERIES_POINTS; bad lines and
    non-finite values are skipped, as in a snapshot."""
    from fleetdeck.backend.host.lib.serve import Refused

    try:
        names = set(os.listdir(path))
    except OSError:
        names = set()
    kind, src, _states = series_source(path, names)
    p = {
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
    if kind == "progress":
        prog = src
        read = 0
        with open_file(prog) as f:
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
    elif kind == "trainer_state":
        p = _trainer_state(src, cap=False)
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


def _progress_line(p, obj, cap=True):
    step = obj.get("step")
    step = int(step) if finite(step) else None
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


def _trainer_state(path, cap=True):
    """Hugging Face Trainer's trainer_state.json: step, max_steps and the loss series (`cap`:
    its newest MAX_LOSS_POINTS, as a snapshot keeps them)."""
    try:
        d = jsondepth.loads(read_text(path), what="it")
        if not isinstance(d, dict) or not isinstance(d.get("log_history", []), list):
            raise ValueError("not a trainer state object")
    except ValueError as e:
        return {"error": f"{path} is not valid JSON (truncated?): {str(e)[:80]}"}
    p = {
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


def _dir_bytes(path):
    total = 0
    stack = [path]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    else:
                        total += e.stat(follow_symlinks=False).st_size
        except OSError:
            pass
    return total


def _ckpt_bytes(path, now):
    st = os.lstat(path)
    hit = CACHE.get(("ckpt", path))
    if hit is not None and hit[0] == st.st_mtime_ns:
        return hit[1]
    b = _dir_bytes(path)
    if now - st.st_mtime > 120:  # a checkpoint still being written is summed again next poll
        CACHE[("ckpt", path)] = (st.st_mtime_ns, b)
    return b


def _ckpt_problem(path):
    """The layout's one rule for a complete checkpoint, asked again when the folder changes."""
    st = os.lstat(path)
    hit = CACHE.get(("ckpt-complete", path))
    if hit is not None and hit[0] == st.st_mtime_ns:
        return hit[1]
    why = layout.checkpoint_problem(path)
    if time.time() - st.st_mtime > 120:  # a save in progress is judged again next poll
        CACHE[("ckpt-complete", path)] = (st.st_mtime_ns, why)
    return why


def _run_facts(path, names, now):
    """Everything about one run that its files say (the processes come later)."""
    r = {
        "path": path,
        "name": os.path.basename(path),
        "state": "unknown",
        "pid": None,
        "step": None,
        "max_steps": None,
        "loss": None,
        "eval_loss": None,
        "losses": [],
        "eval_losses": [],
        "seconds_per_step": None,
        "last_seconds_per_step": None,
        "step_times": None,
        "eta_seconds": None,
        "adapter": None,
        "checkpoints": [],
        "reason": None,
        "last_update": None,
    }
    rj, problems, interval = {}, [], 1
    if "run.json" in names:
        try:
            rj = cached(
                "json",
                os.path.join(path, "run.json"),
                lambda p: jsondepth.loads(read_text(p), what="it"),
            )
            if not isinstance(rj, dict):
                rj, _ = {}, problems.append("run.json is not a JSON object")
        except (ValueError, OSError) as e:
            problems.append(f"run.json unreadable: {str(e)[:80]}")
    cks = layout.checkpoints(path, names)
    r["checkpoints"] = [
        dict(path=p, step=s, bytes=_ckpt_bytes(p, now), problem=_ckpt_problem(p)) for s, p in cks
    ]
    for c in r["checkpoints"]:
        c["complete"] = c["problem"] is None
    r["adapter"] = layout.final_adapter(path)
    if r["adapter"] is None and ("adapter" in names or layout.CONFIG in names):
        problems.append("no usable final adapter: " + layout.final_adapter_problem(path))
    prog = None
    kind, src, states = series_source(path, names, cks)
    if kind == "progress":
        prog = _progress(src)
    elif kind == "trainer_state":
        prog = cached("trainer_state", src, _trainer_state)
        if len(states) >= 2 and states[-2][0] is not None and states[-1][0] is not None:
            (s1, f1), (s2, f2) = states[-2], states[-1]
            dt = os.stat(f2).st_mtime - os.stat(f1).st_mtime
            interval = s2 - s1
            if dt > 0 and interval > 0 and not prog.get("sps"):
                prog = dict(prog, sps=dt / interval)  # HF logs no step time: saves are the clock
        if prog.get("save_steps"):
            interval = int(prog["save_steps"])
    if prog is not None:
        r["last_update"] = os.stat(src).st_mtime
        if prog.get("error"):
            problems.append(prog["error"])
        for k in ("step", "max_steps", "loss", "eval_loss"):
            r[k] = prog.get(k)
        for series in ("losses", "eval_losses"):
            full = prog.get(series) or []
            r[series] = thin(full, SERIES_POINTS)
            if len(r[series]) < len(full):
                r.setdefault("series_thinned", {})[series] = len(full)
        _step_time(r, prog)
        if prog.get("nonfinite"):
            problems.append(prog["nonfinite"])
        if len(r["losses"]) >= 2 and "progress.jsonl" in names:
            interval = max(1, r["losses"][-1][0] - r["losses"][-2][0])
    return r, rj, problems, interval


def step_times(prog):
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


def _step_time(r, prog):
    """The run's s/step: the median of its last MEDIAN_STEPS step times (`step_times` says how
    many), the last one's beside it; the ETA is reckoned from the median."""
    last, recent = step_times(prog)
    sps = median(recent) if recent else last
    r["seconds_per_step"] = round(sps, 4) if sps else None
    r["last_seconds_per_step"] = round(last, 4) if last else None
    r["step_times"] = len(recent) or None


def runs(req, procs, warnings, now):
    """Every run folder under the configured roots, with its state decided."""
    facts, seen = [], set()
    for root in req.get("runs") or []:
        base = os.path.abspath(os.path.expanduser(root))
        if base in seen:
            continue
        seen.add(base)
        try:
            entries = sorted(e.path for e in os.scandir(base) if e.is_dir())
        except FileNotFoundError:
            continue
        except OSError as e:
            warnings.append(f"runs root {root}: {e.strerror or e}")
            continue
        for path in entries:
            try:
                names = set(os.listdir(path))
                if layout.is_run(names):
                    facts.append((path, names) + _run_facts(path, names, now))
            except Exception as e:  # noqa: BLE001 - one broken run must not hide the others
                warnings.append(f"run {path}: {type(e).__name__}: {e}")
    wanted = set()
    for path, _names, r, rj, _problems, _interval in facts:
        undecided = rj.get("state") not in run_state.OWN_WORD and not (
            r["adapter"]
            or (r["step"] is not None and r["max_steps"] and r["step"] >= r["max_steps"])
        )
        if undecided and not run_state.recorded_alive(procs, rj):
            wanted.add(path)
    live = (
        run_evidence.evidence(procs, [f[0] for f in facts], wanted, bool(req.get("fresh")), now)
        if wanted
        else {}
    )
    out = []
    for path, _names, r, rj, problems, interval in facts:
        pid = live.get(path)
        if pid is None:
            pid = run_state.recorded_alive(procs, rj)
        run_state.decide(
            r, rj, problems, interval, pid, procs, float(req.get("stall_factor") or 10), now
        )
        out.append(r)
    return within_budget(out, int(req.get("runs_budget") or RUNS_BUDGET), warnings)


def _size(obj):
    return len(json.dumps(obj, default=str))


def within_budget(out, budget, warnings):
    """The runs section kept under `budget` bytes of JSON, so that a host with hundreds of runs
    and long series still answers well inside ANSWER_LIMIT: first the series of runs that are
    not live are cut to their last few points, then their checkpoint lists go, and last the
    runs updated longest ago are left out, each step named in `warnings`."""
    if _size(out) <= budget:
        return out
    idle = [r for r in out if r.get("state") not in ("running", "stalled")]
    for r in idle:
        for series in ("losses", "eval_losses"):
            if len(r[series]) > IDLE_POINTS:
                r.setdefault("series_thinned", {}).setdefault(series, len(r[series]))
                r[series] = thin(r[series], IDLE_POINTS)
    warnings.append(
        f"runs: the series of {len(idle)} runs that are not live were cut to {IDLE_POINTS} "
        f"points to keep the answer under {budget >> 10} KiB (a run's whole series: "
        "`fleetdeck runs --series HOST:PATH`)"
    )
    if _size(out) <= budget:
        return out
    for r in idle:
        if r.get("checkpoints"):
            r["checkpoints_left_out"] = len(r["checkpoints"])
            r["checkpoints"] = []
    if _size(out) <= budget:
        return out
    order = sorted(
        range(len(out)),
        key=lambda i: (
            out[i].get("state") in ("running", "stalled"),
            out[i].get("last_update") or 0,
        ),
        reverse=True,
    )
    kept, total = [], 2
    for i in order:
        n = _size(out[i]) + 2
        if total + n > budget:
            continue
        kept.append(i)
        total += n
    left = len(out) - len(kept)
    warnings.append(
        f"runs: {left} runs updated longest ago were left out of this answer "
        f"({budget >> 10} KiB budget)"
    )
    return [out[i] for i in sorted(kept)]
