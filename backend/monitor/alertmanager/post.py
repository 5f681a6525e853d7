"""Each Alertmanager as a `Sink` (`delivery/sink.py`): `AlertmanagerEndpoint.send(alerts)` is one
`POST /api/v2/alerts` of alerts in Alertmanager's form (`am_format.am_alert`), through the
monitor's one HTTP client (`delivery/http_client.py`: proxies, TLS, redirects by its policy, the URL's
query string kept), within one deadline, reading at most `BODY_LIMIT` bytes of the answer.

`post_json` is that request alone: (status, a sentence); status 0 when no answer came.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Sequence
from typing import Any

from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.monitor.alertmanager.payload import sentence
from fleetdeck.backend.monitor.delivery.http_client import HttpFailed, request
from fleetdeck.backend.monitor.delivery.sink import Outcome

BODY_LIMIT = 4096


def api_url(base: str, path: str) -> str:
    """`path` of Alertmanager's API under `base`, keeping `base`'s query string (a proxy in
    front of Alertmanager may need one: a token, a tenant)."""
    u = urllib.parse.urlsplit(base)
    return urllib.parse.urlunsplit(u._replace(path=u.path.rstrip("/") + path))


async def post_json(url: str, body: bytes, deadline: float) -> tuple[int, str]:
    """POST `body` to `url` within `deadline` seconds: (HTTP status, a sentence saying what
    came back); status 0 when no answer came (the sentence says why)."""
    try:
        got = await request(
            "POST", url, body=body, deadline=deadline, body_limit=BODY_LIMIT, read_ok=False
        )
    except HttpFailed as e:
        return 0, e.why
    text = "" if got.ok else got.body.decode("utf-8", "replace").strip()
    return got.status, f"HTTP {got.status}" + (f": {sentence(text, 300)}" if text else "")


class AlertmanagerEndpoint:
    """One Alertmanager's `POST /api/v2/alerts` as a `Sink` of alerts in its form: ok when it
    took them (a 400 is ok with a warning: it kept the valid ones, as its API does)."""

    def __init__(self, url: str, deadline: float) -> None:
        self.url = url
        self.deadline = deadline

    @property
    def name(self) -> str:
        return f"Alertmanager {shown(self.url)}"

    @property
    def endpoint(self) -> str:
        return api_url(self.url, "/api/v2/alerts")

    async def send(self, alerts: Sequence[dict[str, Any]]) -> Outcome:
        """One request carrying `alerts`."""
        body = json.dumps(list(alerts), ensure_ascii=False, allow_nan=False).encode("utf-8")
        status, said = await post_json(self.endpoint, body, self.deadline)
        if status == 400:  # it kept the valid ones: sending them again changes nothing
            return Outcome(True, f"{self.name} refused some alerts: {said}")
        if not 200 <= status < 300:
            return Outcome(False, said)
        return Outcome(True)


__all__ = ["BODY_LIMIT", "AlertmanagerEndpoint", "api_url", "post_json"]
