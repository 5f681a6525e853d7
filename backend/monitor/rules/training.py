"""The training rules, judged on each poll with the other rules (`alerts.AlertEngine`):
run-stalled, loss-nonfinite (a run whose reason names a NaN or infinite loss), loss-spike and
overfitting. A run's end seen live (run-finished, run-failed) is `runs.py`'s.
"""

from __future__ import annotations

import re
import statistics

from fleetdeck.backend.fleet.alert_rules import AlertConfig, Hold
from fleetdeck.backend.fleet.models import HostSnapshot
from fleetdeck.backend.host.lib.text import one_line, shown

NONFINITE = re.compile(r"\b(?:eval_)?loss is (?:nan|inf|-inf)\b")


def judge_training(h: HostSnapshot, hold: Hold, config: AlertConfig) -> None:
    """Hold each training rule that is true of `h`'s runs now: run-stalled, loss-nonfinite,
    loss-spike (the last loss over `loss_spike_factor` times the median before it), overfitting
    (eval loss rose at two consecutive evals)."""
    for r in h.runs:
        subj = r.path
        if r.state == "stalled":
            hold(
                "run-stalled",
                h.name,
                subj,
                r.last_update or h.time,
                f"run {shown(r.name)} on {h.name} is stalled: {one_line(r.reason) or 'no progress'}",
            )
        if r.reason and NONFINITE.search(r.reason):
            hold(
                "loss-nonfinite",
                h.name,
                subj,
                h.time,
                f"run {shown(r.name)} on {h.name}: {one_line(r.reason)}",
            )
        losses = [v for _, v in r.losses]
        if len(losses) >= 6:
            base = statistics.median(losses[-21:-1])
            if base > 0 and losses[-1] > config.loss_spike_factor * base:
                hold(
                    "loss-spike",
                    h.name,
                    subj,
                    h.time,
                    f"run {shown(r.name)} on {h.name}: loss {losses[-1]:.4g} at step {r.losses[-1][0]} is "
                    f"{losses[-1] / base:.1f}x the median {base:.4g} of the steps before",
                )
        ev = r.eval_losses
        if len(ev) >= 3 and ev[-3][1] < ev[-2][1] < ev[-1][1]:
            hold(
                "overfitting",
                h.name,
                subj,
                h.time,
                f"run {shown(r.name)} on {h.name}: eval loss rose at two consecutive evals "
                f"({ev[-3][1]:.4f} @{ev[-3][0]} -> {ev[-2][1]:.4f} @{ev[-2][0]} -> "
                f"{ev[-1][1]:.4f} @{ev[-1][0]}); the best so far is step "
                f"{min(ev, key=lambda x: x[1])[0]}",
            )


__all__ = ["NONFINITE", "judge_training"]
