"""Acknowledging schedules, the one action behind `fleetdeck schedules ack` and the Schedules
view's `a`: the ids are stored (`acks.acknowledge`, under its lock) and the act is audited as
`schedule-ack`, with one record shape whoever asks:

    {"ids": [...], "hosts": {id: [host, ...]}, "all_hosts": bool, "via": "cli" | "dashboard",
     ...what the front end adds ("all": true for `ack --host H --all`)}

A refusal (an id unknown or ambiguous, a host that cannot be asked) stores nothing and is
audited as `refused` with its reason code and sentence."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fleetdeck.backend.actions.audit_records import AckRecord, write
from fleetdeck.backend.fleet import acks
from fleetdeck.backend.host.lib.text import shown


def acknowledge(
    on_host: Iterable[tuple[str, str]] = (),
    everywhere: Iterable[str] = (),
    *,
    via: str,
    host: str | None = None,
    **extra: Any,
) -> list[str]:
    """Acknowledge each (host, id) of `on_host` on its host and each id of `everywhere` on
    every host, then audit it (`host`: the record's host, else the hosts named, `*` for
    every host). Returns the ids acknowledged, in order. OSError as the store raises it."""
    pairs = list(dict.fromkeys(on_host))
    every = list(dict.fromkeys(everywhere))
    if pairs or every:
        acks.acknowledge(on_host=pairs, everywhere=every)
    hosts: dict[str, list[str]] = {}
    for h, i in pairs:
        hosts.setdefault(i, []).append(h)
    ids = list(dict.fromkeys([*every, *(i for _, i in pairs)]))
    if host is None:
        host = "*" if every else ", ".join(sorted({h for h, _ in pairs}))
    write(
        AckRecord(
            host=host,
            result="done",
            ids=[shown(i) for i in ids],
            hosts={shown(i): hs for i, hs in hosts.items()},
            all_hosts=bool(every),
            via=via,
            extra=extra,
        )
    )
    return ids


def refused(ids: Iterable[str], code: str, message: str, *, via: str, **extra: Any) -> None:
    """Audit an acknowledgement refused (nothing was stored): its reason code and sentence."""
    write(
        AckRecord(
            host=None,
            result="refused",
            ids=[shown(i) for i in ids],
            reason_code=code,
            message=message,
            via=via,
            extra=extra,
        )
    )


__all__ = ["acknowledge", "refused"]
