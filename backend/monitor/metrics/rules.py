"""`fleetdeck rules --prometheus`: the built-in alert rules as a Prometheus alerting-rules file
over the families `watch --prometheus` publishes (`export.py`), so a Prometheus scraping one
watcher or many judges the same rules: the same names (`alertname`), severities (a `severity`
label), `for` durations and thresholds, taken from the fleet file's `[alerts]`, and each alert
labelled `host` and `subject` as the Alertmanager sink labels it (`alertmanager/sink.py`).

Where a family carries only the last figure, the verdict the rule needs is published as a
figure of its own (`run_figures`: a non-finite loss, consecutive eval rises, the loss spike
ratio; a seat's memory per card; whether a card has memory of its own), so those rules read as
the engine judges them. What cannot be said over the families is said in the file, as a
comment on the rule (`NOT_SAID`), and in docs/seats-alerts.md.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from typing import Any

from fleetdeck.backend.fleet.alert_rules import RULES, AlertConfig
from fleetdeck.backend.fleet.gpu_health import SLOWDOWN
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.monitor.rules.disk import DISK_RECENT_PART
from fleetdeck.backend.monitor.rules.runs import LIVE
from fleetdeck.backend.monitor.rules.training import NONFINITE

GIB = 2**30


def run_figures(r: Any) -> tuple[float, float, float | None]:
    """The figures of one run that loss-nonfinite, overfitting and loss-spike read, as the
    engine judges them (`training_alerts.judge_training`): 1.0 when its reason names a NaN or infinite
    loss; how many consecutive evals, newest back, the eval loss rose at (two is overfitting);
    the last loss over the median of the up to 20 before it (None under 6 losses or a median
    that is not above 0)."""
    nonfinite = 1.0 if r.reason and NONFINITE.search(r.reason) else 0.0
    ev = [v for _, v in r.eval_losses]
    rises = 0
    while rises + 1 < len(ev) and ev[-1 - rises] > ev[-2 - rises]:
        rises += 1
    losses = [v for _, v in r.losses]
    ratio = None
    if len(losses) >= 6:
        base = statistics.median(losses[-21:-1])
        ratio = losses[-1] / base if base > 0 else None
    return nonfinite, float(rises), ratio


def _secs(s: float) -> str:
    """A duration as Prometheus writes one."""
    ms = round(s * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def _num(v: float) -> str:
    return repr(float(v)) if v != int(v) else str(int(v))


def _subject(expr: str, src: str, fmt: str = "$1") -> str:
    return f'label_replace({expr}, "subject", "{fmt}", "{src}", "(.*)")'


def _disk(c: AlertConfig) -> str:
    w, h, third = c.disk_rate_window, c.disk_full_hours * 3600, c.disk_rate_window / 3
    f = "fleetdeck_disk_free_bytes"

    def at(s: float) -> str:
        return f if not s else f"{f} offset {_secs(s)}"

    # seconds until full at the rate over the window, while free space fell in each third of it
    # and within its last tenth (writing that stopped, free space flat since, is no rate)
    eta = f"{f} / (({at(w)} - {f}) / {_num(w)}) < {_num(h)}"
    steady = " and ".join(
        f"{at(a)} < {at(b)}"
        for a, b in ((0, w / DISK_RECENT_PART), (0, third), (third, 2 * third), (2 * third, w))
    )
    return _subject(f"({eta} and {steady})", "path")


def _run_end(state: str, before: tuple[str, ...]) -> Callable[[AlertConfig], str]:
    """A one-shot notice as an event: the run shows `state` now and showed one of `before`
    within `event_hold_minutes` (seen live, then ended), so it fires once, on the change, and
    resolves `event_hold_minutes` after the run was last seen live, as the engine's event does
    (`rules/runs.py`); a run first seen already ended never fires."""

    def expr(c: AlertConfig) -> str:
        live = f'fleetdeck_run_state{{state=~"{"|".join(before)}"}}'
        hold = _secs(c.event_hold_minutes * 60)
        return _subject(
            f'fleetdeck_run_state{{state="{state}"}} == 1 '
            f"and on(host, path) max_over_time({live}[{hold}])",
            "path",
        )

    return expr


#: the states a run's end pages from, as the probe publishes them (`run_alerts.LIVE` without the
#: engine's own `finishing`; a run at its last step shows `finished` before its adapter is whole)
SEEN_LIVE = tuple(s for s in LIVE if s in ("running", "stalled", "queued"))


#: rule -> (the expression over the families for a fleet file's [alerts], summary, description)
EXPRESSED: dict[str, tuple[Callable[[AlertConfig], str], str, str]] = {
    "host-down": (
        lambda c: _subject("fleetdeck_host_up == 0", "host"),
        "host {{ $labels.host }} is down",
        "{{ $labels.host }} has not answered fleetdeck's polls",
    ),
    "run-stalled": (
        lambda c: _subject('fleetdeck_run_state{state="stalled"} == 1', "path"),
        "run {{ $labels.run }} on {{ $labels.host }} is stalled",
        "run {{ $labels.run }} on {{ $labels.host }} ({{ $labels.path }}) makes no progress",
    ),
    "loss-nonfinite": (
        lambda c: _subject("fleetdeck_run_loss_nonfinite == 1", "path"),
        "run {{ $labels.run }} on {{ $labels.host }} logged a non-finite loss",
        "run {{ $labels.run }} on {{ $labels.host }} logged a NaN or infinite loss or eval loss",
    ),
    "loss-spike": (
        lambda c: _subject(f"fleetdeck_run_loss_spike_ratio > {_num(c.loss_spike_factor)}", "path"),
        "run {{ $labels.run }} on {{ $labels.host }}: loss spike",
        'run {{ $labels.run }} on {{ $labels.host }}: the last loss is {{ $value | printf "%.1f" }}x '
        "the median of the steps before",
    ),
    "overfitting": (
        lambda c: _subject("fleetdeck_run_eval_loss_rises >= 2", "path"),
        "run {{ $labels.run }} on {{ $labels.host }} is overfitting",
        "run {{ $labels.run }} on {{ $labels.host }}: eval loss rose at {{ $value }} consecutive evals",
    ),
    "disk-full-eta": (
        _disk,
        "{{ $labels.path }} on {{ $labels.host }} fills soon",
        "{{ $labels.path }} on {{ $labels.host }} ({{ $labels.mount }}) fills in about "
        "{{ $value | humanizeDuration }} at the current rate",
    ),
    "gpu-headroom": (
        lambda c: _subject(
            f"(fleetdeck_gpu_headroom_bytes < {_num(c.gpu_headroom_floor_gib * GIB)}) "
            "and on(host, gpu) (fleetdeck_gpu_unified_memory == 0) "
            "and on(host, gpu) (sum by (host, gpu) (fleetdeck_seat_gpu_memory_bytes) > 0)",
            "gpu",
            "GPU$1",
        ),
        "GPU{{ $labels.gpu }} on {{ $labels.host }} is short of memory for its seats",
        "GPU{{ $labels.gpu }} on {{ $labels.host }} has {{ $value | humanize1024 }}B free, under the floor",
    ),
    "new-stray": (
        lambda c: _subject("fleetdeck_schedules_stray > 0", "host"),
        "stray schedules on {{ $labels.host }}",
        "{{ $labels.host }} holds {{ $value }} stray schedule(s): `fleetdeck schedules --stray-only`",
    ),
    "seat-check": (
        lambda c: _subject("fleetdeck_seat_check_ok == 0", "port", "port $1"),
        "the seat on {{ $labels.host }}:{{ $labels.port }} failed its check",
        "the seat on {{ $labels.host }}:{{ $labels.port }} failed its check: {{ $labels.signature }}",
    ),
    "seat-restart": (
        lambda c: (
            "label_join(fleetdeck_seat_restarts > min_over_time(fleetdeck_seat_restarts"
            f'[{_secs(c.event_hold_minutes * 60)}]), "subject", ":", "kind", "port")'
        ),
        "seat {{ $labels.kind }}:{{ $labels.port }} on {{ $labels.host }} restarted",
        "seat {{ $labels.kind }}:{{ $labels.port }} on {{ $labels.host }} restarted "
        "(RestartCount {{ $value }})",
    ),
    "gpu-throttled": (
        lambda c: _subject(
            'max by (host, gpu, uuid) (fleetdeck_gpu_throttle_reason{reason=~"'
            + "|".join(SLOWDOWN)
            + '"}) == 1',
            "gpu",
            "GPU$1",
        ),
        "GPU{{ $labels.gpu }} on {{ $labels.host }} is slowed down",
        "GPU{{ $labels.gpu }} on {{ $labels.host }} is held back by a hardware or thermal slowdown",
    ),
    "gpu-hot": (
        lambda c: _subject(
            "fleetdeck_gpu_slowdown_temperature_celsius - fleetdeck_gpu_temperature_celsius"
            f" <= {_num(c.gpu_hot_margin_c)}",
            "gpu",
            "GPU$1",
        ),
        "GPU{{ $labels.gpu }} on {{ $labels.host }} runs hot",
        "GPU{{ $labels.gpu }} on {{ $labels.host }} is {{ $value }} °C from its slowdown threshold",
    ),
    "gpu-ecc": (
        lambda c: _subject(
            'max by (host, gpu, uuid) (fleetdeck_gpu_ecc_uncorrected_errors{counter="volatile"}'
            " > 0 or fleetdeck_gpu_ecc_pending_retirement == 1 "
            "or fleetdeck_gpu_row_remap_failure == 1)",
            "gpu",
            "GPU$1",
        ),
        "GPU{{ $labels.gpu }} on {{ $labels.host }} has memory errors",
        "GPU{{ $labels.gpu }} on {{ $labels.host }}: an uncorrected ECC error, a remap waiting for a "
        "reset, or a failed remap",
    ),
    "gpu-xid": (
        lambda c: _subject(
            'label_join(fleetdeck_gpu_xid_errors > 0, "subject", " Xid ", "gpu", "code")',
            "subject",
            "GPU$1",
        ),
        "GPU{{ $labels.gpu }} on {{ $labels.host }} reported Xid {{ $labels.code }}",
        "GPU{{ $labels.gpu }} on {{ $labels.host }} reported Xid {{ $labels.code }} "
        "({{ $value }} time(s) in the probe's last hour)",
    ),
    "gpu-lost": (
        lambda c: _subject("fleetdeck_gpu_lost == 1", "gpu", "GPU$1"),
        "GPU{{ $labels.gpu }} on {{ $labels.host }} is lost",
        "the driver lost GPU{{ $labels.gpu }} on {{ $labels.host }}: reset the card or reboot the host",
    ),
    "run-failed": (
        _run_end("failed", (*SEEN_LIVE, "finished")),
        "run {{ $labels.run }} on {{ $labels.host }} failed",
        "run {{ $labels.run }} on {{ $labels.host }} ({{ $labels.path }}) failed",
    ),
    "run-finished": (
        _run_end("finished", SEEN_LIVE),
        "run {{ $labels.run }} on {{ $labels.host }} finished",
        "run {{ $labels.run }} on {{ $labels.host }} ({{ $labels.path }}) finished",
    ),
}

#: what a rule cannot say over the families, or says otherwise than the engine (the file's
#: comments; a rule named here without an expression is left out of the file)
NOT_SAID = {
    "idle-holder": "not expressed: which process holds a card's memory (and whether it is a seat or a run) "
    "is not in /metrics",
    "new-stray": "per host (the count of stray schedules), not per schedule; severity is the rule's, never "
    "the engine's warning for a schedule naming a missing path; a loop's 60 s settling is not kept",
    "seat-restart": "a restart count that grew within event_hold_minutes; an OOM kill is not in /metrics, and "
    "the subject is kind:port, not the container's name",
    "gpu-xid": "holds while the probe's last hour of Xids holds the code, not event_hold_minutes from it",
    "stray-returned": "not expressed: which schedules were removed is in the audit log, not in /metrics",
    "disk-full-eta": "free space over the window, its thirds and its last tenth, for each configured path (the "
    "engine judges used space, once per mount)",
    "run-finished": "an event: fires when a run seen running, stalled or queued within event_hold_minutes "
    "shows finished, and resolves event_hold_minutes after it was last seen so; whether its final adapter "
    "is whole is not in /metrics (the engine waits for it)",
    "run-failed": "an event: fires when a run seen running, stalled, queued or finished (its last step "
    "before its adapter) within event_hold_minutes shows failed, and resolves event_hold_minutes after "
    "it was last seen so",
}


def wait_seconds(rule: str, c: AlertConfig) -> float:
    """How long `rule`'s condition holds before it fires (host-down's `host_down_after` with it)."""
    return c.for_seconds(rule) + (c.host_down_after if rule == "host-down" else 0.0)


def rules_file(config: AlertConfig | None = None, source: str = "") -> str:
    """The alerting-rules file (YAML) for `config`'s thresholds, severities and `for` durations."""
    c = config or AlertConfig()
    out = [
        "# Prometheus alerting rules equivalent to fleetdeck's built-in alert rules, over the",
        "# families `fleetdeck watch --prometheus ADDR:PORT` serves at /metrics.",
        f"# Written by `fleetdeck rules --prometheus`{f' from {shown(source)}' if source else ''}; check it with",
        "# `promtool check rules FILE`. Each alert is labelled alertname, host, subject and severity",
        "# as `[alerts] alertmanager` labels it (Prometheus adds its own job and instance).",
        "groups:",
        "  - name: fleetdeck",
        "    rules:",
    ]
    for rule in RULES:
        note = NOT_SAID.get(rule)
        if rule in c.disabled:
            out.append(f"      # {rule}: disabled in the fleet file's [alerts]")
            continue
        if rule not in EXPRESSED:
            out.append(f"      # {rule}: {note or 'not expressed over /metrics'}")
            continue
        expr, summary, description = EXPRESSED[rule]
        wait = wait_seconds(rule, c)
        severity = c.severity_of(rule)
        if note:
            out.append(f"      # {rule}: {note}")
        # a block scalar: the expression holds fixed names and numbers only, never a host's text
        out += [f"      - alert: {rule}", "        expr: |-", f"          {expr(c)}"]
        if wait:
            out.append(f"        for: {_secs(wait)}")
        out += [
            "        labels:",
            f"          severity: {severity}",
            "        annotations:",
            f"          summary: {json.dumps(summary)}",
            f"          description: {json.dumps(description, ensure_ascii=False)}",
        ]
    return "\n".join(out) + "\n"


def expressed(config: AlertConfig | None = None) -> list[str]:
    """The rules the file holds for `config` (those neither disabled nor left out)."""
    c = config or AlertConfig()
    return [r for r in RULES if r in EXPRESSED and r not in c.disabled]


__all__ = ["EXPRESSED", "NOT_SAID", "expressed", "rules_file", "run_figures", "wait_seconds"]
