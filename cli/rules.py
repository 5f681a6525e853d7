"""`fleetdeck rules`: the built-in alert rules with the fleet file's severities and `for`
durations; `--prometheus` prints them as a Prometheus alerting-rules file
(`backend/monitor/metrics/rules.py`) over the families `watch --prometheus` serves."""

from __future__ import annotations

import argparse
import json

from fleetdeck.backend.fleet.alert_rules import RULES, AlertConfig
from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.monitor.metrics.rules import EXPRESSED, NOT_SAID, rules_file, wait_seconds
from fleetdeck.cli.args import add_hosts_option


def register(sub: argparse._SubParsersAction) -> None:
    """Add `rules [--prometheus] [--json]`."""
    p = sub.add_parser(
        "rules",
        help="the alert rules (--prometheus: as a Prometheus rules file)",
        description="List the built-in alert rules with the severities, for durations and "
        "thresholds of the fleet file's [alerts]; with --prometheus, print them as a "
        "Prometheus alerting-rules file over the /metrics families of `watch --prometheus`.",
    )
    add_hosts_option(p)
    how = p.add_mutually_exclusive_group()
    how.add_argument(
        "--prometheus", action="store_true", help="print a Prometheus alerting-rules file (YAML)"
    )
    how.add_argument("--json", action="store_true", help='print {"rules": [...]}')
    p.set_defaults(func=cmd_rules)


def prometheus_word(rule: str, config: AlertConfig) -> str:
    """How `rule` reads in the Prometheus file: disabled, expressed, approximated or absent."""
    if rule in config.disabled:
        return "disabled"
    if rule not in EXPRESSED:
        return "not expressed"
    return "approximated" if rule in NOT_SAID else "expressed"


def cmd_rules(args: argparse.Namespace) -> int:
    """Print the rules file, or the rules as lines or JSON; exit 0 (2 for a bad fleet file)."""
    fleet = load_fleet(args.hosts)
    # the fleet file's `[alerts]` (an `AlertConfig` once parsed), else every default
    config = fleet.alerts if isinstance(fleet.alerts, AlertConfig) else AlertConfig()
    if args.prometheus:
        print(rules_file(config, fleet.source), end="")
        return 0
    rows = [
        {
            "rule": r,
            "severity": config.severity_of(r),
            "for_seconds": wait_seconds(r, config),
            "disabled": r in config.disabled,
            "prometheus": prometheus_word(r, config),
            "prometheus_note": NOT_SAID.get(r),
        }
        for r in RULES
    ]
    if args.json:
        print(json.dumps({"rules": rows}, indent=1))
        return 0
    for d in rows:
        print(
            f"{d['rule']:<16} {d['severity']:<9} for {d['for_seconds']:>6g}s  prometheus: {d['prometheus']}"
        )
    return 0
