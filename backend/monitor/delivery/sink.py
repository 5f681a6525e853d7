"""What every alert sink promises, so the engines that feed them call nothing else: a `Sink`
has a `name` and `send(alerts) -> Outcome`, one attempt at one delivery.

Three implement it: the command hook (`attempts.CommandSink`) and the webhook
(`attempts.WebhookSink`), fed transitions from the outbox by `deliver.Deliverer`, each item a
`Delivery` (the transition and its id); and each Alertmanager (`alertmanager.post.AlertmanagerEndpoint`),
fed by `alertmanager.AlertmanagerSink` with alerts in the form of Alertmanager's v2 API (its
firing set and the resolves it has not taken). Whatever goes wrong inside `send` is its
`Outcome`, never an exception: the engine decides on retries from `retry` alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from fleetdeck.backend.monitor.rules.alerts import Alert

Item = TypeVar("Item", contravariant=True)


@dataclass(frozen=True)
class Outcome:
    """How one attempt went: ok, or a warning and whether trying again can help. An attempt
    that went through with something to say (Alertmanager refused some of a batch) is ok with a
    warning."""

    ok: bool
    warning: str = ""
    retry: bool = True


@dataclass(frozen=True)
class Delivery:
    """One transition as a sink sends it: the alert (as the outbox carries it) and the
    transition id that a receiver drops a repeat by."""

    alert: Alert
    id: str


class Sink(Protocol[Item]):
    """One destination of alerts (see the module docstring)."""

    @property
    def name(self) -> str:
        """What a warning calls it (`command`, `webhook`, an Alertmanager's URL)."""
        ...

    async def send(self, alerts: Sequence[Item]) -> Outcome:
        """One attempt at delivering `alerts` together, as one delivery."""
        ...


__all__ = ["Delivery", "Outcome", "Sink"]
