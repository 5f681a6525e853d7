"""One delivery attempt at each sink, within one deadline for all of it, and how it went
(`Outcome`: delivered, or a warning and whether trying again can help).

- **Command hook** (`run_hook`): run in a session of its own; at the deadline its whole process
  group is killed, children it backgrounded included; when it exits before, whatever it left
  running in its group is killed too. A hook that cannot start fails for good.
- **Webhook** (`post_json`): through the monitor's one HTTP client (`http_client.py`: proxies
  from the environment, TLS verified, 307 and 308 followed as POST up to five hops and never
  from https down to http), everything within the deadline. 2xx is delivered; any other
  redirect, and a 4xx other than 408/425/429, fail for good.

Both are `Sink`s (`sink.py`): `CommandSink` and `WebhookSink` send one transition, or a group of
them (`grouping.py`) as one delivery.

The retries of a failed attempt are the outbox's (`deliver.Deliverer`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from typing import Any

from fleetdeck.backend.fleet.link.localproc import spawn
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.monitor.delivery.grouping import Group, group_payload
from fleetdeck.backend.monitor.delivery.http_client import HttpFailed, request
from fleetdeck.backend.monitor.delivery.payloads import (
    arg_text,
    hook_argv,
    hook_env,
    json_safe,
    payload,
    webhook_body,
)
from fleetdeck.backend.monitor.delivery.sink import Delivery, Outcome


async def run_hook(argv: list[str], env: dict[str, str], stdin: bytes, deadline: float) -> Outcome:
    """Run a command hook in a session of its own; its whole process group ends when it exits
    or at `deadline` seconds, whichever comes first (and when the caller is cancelled)."""
    name = arg_text(argv[0]) if argv else "?"
    # stderr goes to a file, not a pipe: a child the hook backgrounds keeps a pipe open, and the
    # hook's end would wait for it
    with tempfile.TemporaryFile() as err:
        try:
            # localproc: cancelled while it starts, the child is killed before the
            # cancellation goes on (asyncio's own create_subprocess_exec can leave it running)
            proc = await spawn(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)
        except (OSError, ValueError) as e:
            return Outcome(
                False,
                f"alert hook {name} could not start: {getattr(e, 'strerror', None) or e}",
                False,
            )

        async def feed_and_wait() -> int:
            assert proc.stdin is not None
            with contextlib.suppress(OSError):  # a hook that ignores stdin may close it
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            with contextlib.suppress(OSError):
                proc.stdin.close()
            return await proc.wait()

        try:
            async with asyncio.timeout(deadline):
                rc = await feed_and_wait()
        except TimeoutError:
            return Outcome(
                False,
                f"alert hook {name} did not finish within {deadline:g}s; its process group "
                "was killed",
            )
        finally:
            _kill_group(proc.pid)  # what it left running in its group goes with it
            try:
                await asyncio.shield(proc.reap())
            finally:
                proc.close()
        if rc:
            err.seek(max(0, err.seek(0, os.SEEK_END) - 2048))
            last = err.read().decode("utf-8", "surrogateescape").strip().splitlines()
            return Outcome(
                False,
                f"alert hook {name} exited {rc}" + (f": {shown(last[-1])[:200]}" if last else ""),
            )
    return Outcome(True)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def post_json(url: str, body: bytes, headers: dict[str, str], deadline: float) -> Outcome:
    """POST `body` to `url` through the monitor's HTTP client (`http_client.request`: proxies,
    TLS, its redirect policy), all of it within `deadline` seconds. 2xx is delivered; a 3xx
    the policy does not follow, and a 4xx other than 408/425/429, fail for good."""
    try:
        got = await request(
            "POST", url, body=body, headers=headers, deadline=deadline, body_limit=0
        )
    except HttpFailed as e:
        if e.deadline is not None:
            return Outcome(False, f"alert webhook {shown(url)} did not answer within {deadline:g}s")
        if not e.retry:
            return Outcome(False, f"alert webhook {shown(url)}: {e.why}", False)
        return Outcome(False, f"alert webhook {shown(url)} failed: {e.why}")
    if got.ok:
        return Outcome(True)
    if 300 <= got.status < 400:
        return Outcome(
            False,
            f"alert webhook {shown(got.url)} answered {got.status} (redirect to "
            f"{shown(got.location or '?')}); only 307 and 308 keep a POST a POST, so the "
            "alert was not delivered: point `webhook` at the final URL",
            False,
        )
    permanent = 400 <= got.status < 500 and got.status not in (408, 425, 429)
    return Outcome(
        False, f"alert webhook {shown(got.url)} answered HTTP {got.status}", not permanent
    )


def _document(items: Sequence[Delivery]) -> tuple[Any, str, bytes]:
    """What a delivery of `items` is: the alert-like fields (one alert, or their `Group`), its
    id, and its JSON body (made safe by `json_safe`)."""
    if len(items) == 1:
        return items[0].alert, items[0].id, webhook_body(items[0].alert, items[0].id)
    g = Group([(d.alert, d.id) for d in items])
    doc = json_safe(group_payload(g, payload))
    return g, g.id, json.dumps(doc, ensure_ascii=False, allow_nan=False).encode("utf-8")


class CommandSink:
    """The `[alerts] on_alert` command: its argv with each placeholder filled, the values in
    `FLEETDECK_*`, the JSON document on stdin; one run within `deadline` seconds."""

    name = "command"

    def __init__(self, argv: tuple[str, ...], deadline: float) -> None:
        self.argv = argv
        self.deadline = deadline

    async def send(self, alerts: Sequence[Delivery]) -> Outcome:
        """Run the hook once for `alerts` (one transition, or a group of them)."""
        what, tid, body = _document(alerts)
        env = hook_env(what, tid)
        if isinstance(what, Group):
            env.update(FLEETDECK_IDS=" ".join(what.ids), FLEETDECK_COUNT=str(len(what.ids)))
        return await run_hook(hook_argv(self.argv, what, tid), env, body, self.deadline)


class WebhookSink:
    """The `[alerts] webhook` URL: one POST of the JSON document, its id in `Idempotency-Key`
    and `X-Fleetdeck-Delivery`, within `deadline` seconds."""

    name = "webhook"

    def __init__(self, url: str, deadline: float) -> None:
        self.url = url
        self.deadline = deadline

    async def send(self, alerts: Sequence[Delivery]) -> Outcome:
        """POST `alerts` (one transition, or a group of them) once."""
        _what, tid, body = _document(alerts)
        headers = {"Idempotency-Key": tid, "X-Fleetdeck-Delivery": tid}
        return await post_json(self.url, body, headers, self.deadline)


__all__ = ["CommandSink", "Outcome", "WebhookSink", "post_json", "run_hook"]
