"""A run's whole loss and eval-loss series, on demand (a snapshot carries at most 256 points of
each: `run_progress.thin`). The probe's `series` op, asked once over the run's host link, its
answer through the same per-point checks as a snapshot's."""

from __future__ import annotations

from typing import Any

from fleetdeck.backend.fleet.errors import HelperError, HostError
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.validate_fields import checked_series

PROBE_MODULE = "fleetdeck.backend.host.probe.main"


async def fetch_series(link: HostLink, path: str, timeout: float | None = None) -> dict[str, Any]:
    """{"host", "path", "losses": [[step, value]...], "eval_losses": [...], "warnings": [...]}
    for the run folder `path` on `link`'s host. HostError when the host cannot be asked or the
    run has no series (code `no-series`)."""
    try:
        # a name or a path under a runs root resolves there (`layout.resolve_run`, the one rule)
        answer = await link.call(
            PROBE_MODULE,
            "series",
            path=path,
            roots=list(link.host.all_roots),
            within=timeout,
            what="series",
        )
    except HelperError as e:
        if not isinstance(e.answer, dict):
            raise HostError(link.name, "the series answer is not an object", "helper") from None
        raise HostError(
            link.name,
            str(e.error.get("message") or "the series could not be read"),
            str(e.error.get("code") or "helper"),
        ) from None
    marks: list[str] = []
    losses = checked_series(answer.get("losses"), "losses", marks)
    evals = checked_series(answer.get("eval_losses"), "eval_losses", marks)
    return {
        "host": link.name,
        "path": answer["path"] if isinstance(answer.get("path"), str) else path,
        "losses": [list(p) for p in losses],
        "eval_losses": [list(p) for p in evals],
        "warnings": marks,
    }
