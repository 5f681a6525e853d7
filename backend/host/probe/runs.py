"""The probe's runs section: every run folder under the configured roots, its facts read here
(its progress by `run_progress`), the process working in it found by `run_evidence` and its
state decided by `run_state`."""
# Runs on the host's Python 3.8 or newer, bundled with the probe.

from __future__ import annotations

import json
import os
import time
from collections.abc import Collection
from statistics import median

from fleetdeck.backend.host.lib import jsondepth, layout
from fleetdeck.backend.host.probe import run_evidence, run_log, run_progress, run_state
from fleetdeck.backend.host.probe.common import CACHE, SERIES_POINTS, Procs, cached, read_text

# -- runs ---------------------------------------------------------------------------------------
# the runs section of one answer stays under this much JSON (docs/probe.md), and a run that is
# not live keeps this many points of each series once it is over it
RUNS_BUDGET = 3 << 20
IDLE_POINTS = 16


def _dir_bytes(path: str) -> int:
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


def _ckpt_bytes(path: str, now: float) -> int:
    st = os.lstat(path)
    hit = CACHE.get(("ckpt", path))
    if hit is not None and hit[0] == st.st_mtime_ns:
        return hit[1]
    b = _dir_bytes(path)
    if now - st.st_mtime > 120:  # a checkpoint still being written is summed again next poll
        CACHE[("ckpt", path)] = (st.st_mtime_ns, b)
    return b


def _ckpt_problem(path: str) -> str | None:
    """The layout's one rule for a complete checkpoint, asked again when the folder changes."""
    st = os.lstat(path)
    hit = CACHE.get(("ckpt-complete", path))
    if hit is not None and hit[0] == st.st_mtime_ns:
        return hit[1]
    why = layout.checkpoint_problem(path)
    if time.time() - st.st_mtime > 120:  # a save in progress is judged again next poll
        CACHE[("ckpt-complete", path)] = (st.st_mtime_ns, why)
    return why


def _run_facts(path: str, names: Collection[str], now: float) -> tuple[dict, dict, list, float]:
    """Everything about one run that its files say (the processes come later): the run's
    record (`wire.RunRecord` once its state is decided), run.json, the problems found, the
    steps between two saves."""
    r: dict = {
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
                rj = {}
                problems.append("run.json is not a JSON object")
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
        problems.append(f"no usable final adapter: {layout.final_adapter_problem(path)}")
    prog = None
    kind, src, states = run_progress.series_source(path, names, cks)
    if src is not None and kind == "progress":
        prog = run_progress.progress(src)
    elif src is not None:
        prog = cached("trainer_state", src, run_progress.trainer_state)
        (s1, f1), (s2, f2) = states[-2:] if len(states) >= 2 else ((None, ""), (None, ""))
        if s1 is not None and s2 is not None:
            dt = os.stat(f2).st_mtime - os.stat(f1).st_mtime
            interval = s2 - s1
            if dt > 0 and interval > 0 and not prog.get("sps"):
                prog = dict(prog, sps=dt / interval)  # HF logs no step time: saves are the clock
        if prog.get("save_steps"):
            interval = int(prog["save_steps"])
    if prog is not None and src is not None:
        r["last_update"] = os.stat(src).st_mtime
        if prog.get("error"):
            problems.append(prog["error"])
        for k in ("step", "max_steps", "loss", "eval_loss"):
            r[k] = prog.get(k)
        for series in ("losses", "eval_losses"):
            full = prog.get(series) or []
            r[series] = run_progress.thin(full, SERIES_POINTS)
            if len(r[series]) < len(full):
                r.setdefault("series_thinned", {})[series] = len(full)
        _step_time(r, prog)
        if prog.get("nonfinite"):
            problems.append(prog["nonfinite"])
        if len(r["losses"]) >= 2 and "progress.jsonl" in names:
            interval = max(1, r["losses"][-1][0] - r["losses"][-2][0])
    return r, rj, problems, interval


def _step_time(r: dict, prog: dict) -> None:
    """The run's s/step: the median of its last MEDIAN_STEPS step times (`step_times` says how
    many), the last one's beside it; the ETA is reckoned from the median."""
    last, recent = run_progress.step_times(prog)
    sps = median(recent) if recent else last
    r["seconds_per_step"] = round(sps, 4) if sps else None
    r["last_seconds_per_step"] = round(last, 4) if last else None
    r["step_times"] = len(recent) or None


def _heard(path: str, names: Collection[str]) -> float | None:
    """When the log in a run's folder (train.log, nohup.out, *.log) was last written, or None."""
    log = run_log.find(path, names, None)
    try:
        return os.stat(log).st_mtime if log else None
    except OSError:
        return None


def runs(req: dict, procs: Procs, warnings: list[str], now: float) -> list[dict]:
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
                if layout.is_run(names, logs=True):
                    facts.append((path, names) + _run_facts(path, names, now))
            except Exception as e:  # noqa: BLE001 - one broken run must not hide the others
                warnings.append(f"run {path}: {type(e).__name__}: {e}")
    wanted, settled = set(), set()
    factor = float(req.get("stall_factor") or 10)
    for path, names, r, rj, _problems, interval in facts:
        # the last step reached with no adapter is not decided while its files move: its
        # trainer may still be saving; once they are silent past the stall window it is done
        undecided = rj.get("state") not in run_state.OWN_WORD and not r["adapter"]
        heard = _heard(path, names) if undecided and run_state.at_last_step(r) else None
        if undecided and run_state.settled(r, factor, interval, now, heard):
            settled.add(path)
        elif undecided and not run_state.recorded_alive(procs, rj):
            wanted.add(path)
    live = (
        run_evidence.evidence(procs, [f[0] for f in facts], wanted, bool(req.get("fresh")), now)
        if wanted
        else {}
    )
    out = []
    for path, names, r, rj, problems, interval in facts:
        pid = live.get(path)
        if pid is None:
            pid = run_state.recorded_alive(procs, rj)
        if pid is None and path in settled:
            pid = run_state.worker_alive(path, procs)
        lg = None
        if r["adapter"] is None and rj.get("state") not in run_state.OWN_WORD:
            # what the trainer says between saves (run_log): read only while it may matter
            log = run_log.find(path, names, pid)
            lg = run_log.read(log) if log else None
            interval = run_log.apply(r, lg, interval)
        run_state.decide(
            r,
            rj,
            problems,
            interval,
            pid,
            procs,
            factor,
            now,
            lg,
        )
        out.append(r)
    return within_budget(out, int(req.get("runs_budget") or RUNS_BUDGET), warnings)


def _size(obj: object) -> int:
    return len(json.dumps(obj, default=str))


def within_budget(out: list[dict], budget: int, warnings: list[str]) -> list[dict]:
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
                r[series] = run_progress.thin(r[series], IDLE_POINTS)
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
