"""Purge's eval facts: each checkpoint's eval loss from its own trainer_state.json, a run's
best one, and whether that best survives the purge (kept by the keep rule, or the same weights
as the final adapter), for the `best-eval` refusal."""
# Runs on the host's Python 3.8 or newer.

from __future__ import annotations

import math

from fleetdeck.backend.host.lib import files, fsinfo, jsondepth, layout
from fleetdeck.backend.host.purge.paths import WalkError, sha256_file

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, Dict, List, Optional, Sequence

    from fleetdeck.backend.host.purge.wire import KeepRule

STATE_LIMIT = 1 << 26


def _eval_at(path: str, step: int) -> Optional[float]:
    """The finite eval loss a checkpoint's own trainer_state.json records at its step, or None
    (no file, unreadable, larger than STATE_LIMIT, no such entry)."""
    try:
        raw = files.read_regular(path.rstrip("/") + "/trainer_state.json", STATE_LIMIT)[0]
        state = jsondepth.loads(raw.decode("utf-8"), what="it")
        best = None
        for e in state.get("log_history") or []:
            if isinstance(e, dict) and e.get("step") == step and "eval_loss" in e:
                v = e["eval_loss"]
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    best = float(v)
        return best
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def _trainer_best(rows: List[List[Any]]) -> Optional[str]:
    """The checkpoint path (of `rows`) that the newest trainer_state.json names as its
    `best_model_checkpoint` (matched by its folder name: the trainer may have recorded it from
    another cwd or machine), or None."""
    for _step, path, _loss in sorted(rows, key=lambda r: -r[0]):
        try:
            raw = files.read_regular(path.rstrip("/") + "/trainer_state.json", STATE_LIMIT)[0]
            named = jsondepth.loads(raw.decode("utf-8"), what="it").get("best_model_checkpoint")
        except (OSError, ValueError, AttributeError, TypeError):
            continue
        if not isinstance(named, str) or not named:
            return None
        base = named.rstrip("/").rsplit("/", 1)[-1]
        hits = [r[1] for r in rows if r[1].rstrip("/").rsplit("/", 1)[-1] == base]
        return hits[0] if len(hits) == 1 else None
    return None


def _weights_sha(folder: str, known: Dict[str, Optional[str]]) -> Optional[str]:
    """sha256 of the folder's adapter weights: the keeper's hash when the plan already took it."""
    path = folder.rstrip("/") + "/" + layout.WEIGHTS
    if known.get(path):
        return known[path]
    try:
        return sha256_file(path)
    except (OSError, WalkError):
        return None


def eval_facts(
    run: str,
    keep: Optional[KeepRule],
    tops: Sequence[Optional[str]],
    known: Dict[str, Optional[str]],
) -> Dict[str, Any]:
    """The eval loss of each of the run's checkpoints (from its own trainer_state.json), its
    best one, and whether that best survives the purge: kept by the keep rule, or the final
    adapter holds the same weights (sha256). {"run", "checkpoints": [[step, path, loss]],
    "best": path|None, "best_loss", "best_kept": bool|None, "best_in": [path number...],
    "trainer_best": path|None}. On a tie the trainer's own `best_model_checkpoint` is the best
    (named in `trainer_best`); otherwise the lowest eval loss, the later on a tie."""
    rows: List[List[Any]] = [
        [step, path, _eval_at(path, step)] for step, path in layout.checkpoints(run)
    ]
    scored = [r for r in rows if r[2] is not None]
    out: Dict[str, Any] = {
        "run": run,
        "checkpoints": rows,
        "best": None,
        "best_loss": None,
        "best_kept": None,
        "best_in": [],
        "trainer_best": None,
    }
    if not scored:
        return out
    step, best, loss = min(scored, key=lambda r: (r[2], -r[0]))
    named = _trainer_best(rows)
    out["trainer_best"] = named
    tied = [r for r in scored if r[2] == loss]
    if named is not None and any(r[1] == named for r in tied):
        step, best, loss = next(r for r in tied if r[1] == named)
    out["best"], out["best_loss"] = best, loss
    out["best_in"] = [n for n, t in enumerate(tops) if t and fsinfo.under(best, t)]
    if not out["best_in"]:
        out["best_kept"] = True
    elif keep and best in keep.get("kept", []):
        out["best_kept"] = True
    else:
        adapter = layout.final_adapter(run)
        mine = _weights_sha(best, known) if adapter else None
        out["best_kept"] = bool(mine and adapter and _weights_sha(adapter, known) == mine)
    return out
