"""What a host says, as a Prometheus label or sample (docs/probe.md, "Sinks").

Every label value passes through `label`, every sample value through `sample`. A family is
built as a `Family`, which applies both, so no series can skip them. The alert sink
(`alertmanager/sink.py`) labels its alerts with the same `label`.
"""

from __future__ import annotations

import hashlib
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from fleetdeck.backend.host.lib.text import shown

#: the longest label value, in characters
LABEL_MAX = 512


def label(v: Any) -> str:
    """Any host string as a label value: `shown` (printable UTF-8: a non-UTF-8 byte as `\\xNN`,
    a control character as `\\x1b`, a backslash doubled), at most `LABEL_MAX` characters (a
    longer one keeps its head and a hash of the whole, so two series stay two)."""
    s = shown("" if v is None else v if isinstance(v, str) else str(v))
    if len(s) > LABEL_MAX:
        s = s[: LABEL_MAX - 17] + "..." + hashlib.sha256(s.encode()).hexdigest()[:14]
    return s


def sample(v: Any) -> float | None:
    """Any host number as a sample value, or None (no sample): a float, NaN and the infinities
    included (Prometheus carries them as `NaN`, `+Inf`, `-Inf`: a loss that went NaN is shown as
    NaN); an integer past a float's range as the infinity of its sign; a non-number (None, a
    string, a boolean) is no sample."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        return float(v)
    except OverflowError:
        return float("inf") if v > 0 else float("-inf")


class Family(GaugeMetricFamily):
    """A gauge whose every label value and sample value pass through `label` and `sample`."""

    def add_metric(self, labels: Any, value: Any, timestamp: Any = None) -> None:
        v = sample(value)
        if v is not None:
            super().add_metric([label(x) for x in labels], v, timestamp)

    def add_labelled(self, labels: list[str], value: Any) -> None:
        """As `add_metric`, the labels already passed through `label` (a card's, once for all
        its families)."""
        v = sample(value)
        if v is not None:
            GaugeMetricFamily.add_metric(self, labels, v)


def gauge(name: str, doc: str, labels: list[str]) -> Family:
    """A `Family` named `fleetdeck_NAME`."""
    return Family(f"fleetdeck_{name}", doc, labels=labels)


__all__ = ["LABEL_MAX", "Family", "gauge", "label", "sample"]
