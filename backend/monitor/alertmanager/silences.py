"""One maintenance window everywhere: each fleetdeck silence in force is also a silence in every
Alertmanager of `[alerts] alertmanager` (its v2 API, `POST /api/v2/silences`), and is expired
there with it (`DELETE /api/v2/silence/{id}`), so the pager agrees with the dashboard.

- **Matchers.** A silence's host is the label `host`, its rule `alertname`, its subject
  `subject`, each as the alerts fleetdeck posts carry them (`metrics.values.label`): an exact value,
  or, for a subject written as a shell pattern (`*`, `?`, `[...]`), the regular expression that
  pattern stands for, anchored as Alertmanager anchors its regexes.
- **Its times and words.** startsAt and endsAt are the silence's own; createdBy its author;
  the comment its comment, with the fleetdeck silence's id.
- **Checked.** What Alertmanager answers is read: an answer without a `silenceID` is a failure,
  said once per Alertmanager in a warning naming it, and tried again on the next round; the id
  it gave is kept (`alertmanager-silences.json` in the state folder) so that a restart of
  `watch` neither doubles a silence nor forgets to expire one.

The requests go through the monitor's one HTTP client (`delivery/http_client.py`: proxies from the
environment, TLS, redirects by its policy, the URL's query string kept), each bounded by TIMEOUT
and its answer by BODY_LIMIT.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleetdeck.backend.fleet import statedir
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.monitor.alertmanager.post import api_url
from fleetdeck.backend.monitor.delivery.http_client import HttpFailed, request
from fleetdeck.backend.monitor.metrics.values import label
from fleetdeck.backend.monitor.silence_model import PATTERN_CHARS, Silence
from fleetdeck.backend.monitor.silences import SilenceStore

TIMEOUT = 10.0
BODY_LIMIT = 1 << 20


def state_path() -> Path:
    return statedir.state_dir() / "alertmanager-silences.json"


def glob_regex(pattern: str) -> str:
    """A shell pattern (`fnmatch`'s: `*`, `?`, `[...]`, `[!...]`) as an RE2 regular expression
    matching the same whole strings (Alertmanager anchors a matcher's regex at both ends)."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out.append("\\[")
            else:
                body = pattern[i:j].replace("\\", "\\\\")
                i = j + 1
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
        else:
            out.append(re.escape(c))
    return "".join(out)


def matchers(s: Silence) -> list[dict[str, Any]]:
    """Alertmanager's matchers for fleetdeck silence `s`."""
    out = []
    if s.host:
        out.append({"name": "host", "value": label(s.host), "isRegex": False, "isEqual": True})
    if s.rule:
        out.append({"name": "alertname", "value": s.rule, "isRegex": False, "isEqual": True})
    if s.subject:
        if PATTERN_CHARS & set(s.subject):
            out.append(
                {
                    "name": "subject",
                    "value": glob_regex(s.subject),
                    "isRegex": True,
                    "isEqual": True,
                }
            )
        else:
            out.append(
                {"name": "subject", "value": label(s.subject), "isRegex": False, "isEqual": True}
            )
    return out


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def silence_doc(s: Silence) -> dict[str, Any]:
    return {
        "matchers": matchers(s),
        "startsAt": _iso(s.starts),
        "endsAt": _iso(s.ends),
        "createdBy": s.by or "fleetdeck",
        "comment": f"{s.comment} (fleetdeck silence {s.id})",
    }


async def _request(url: str, method: str, body: bytes | None) -> tuple[int, bytes]:
    try:
        got = await request(method, url, body=body, deadline=TIMEOUT, body_limit=BODY_LIMIT)
    except HttpFailed as e:
        raise OSError(e.why) from None
    return got.status, got.body


class SilenceSync:
    """Mirrors fleetdeck's silences into each Alertmanager (see the module docstring)."""

    def __init__(
        self,
        urls: tuple[str, ...] | list[str],
        warn: Callable[[str], None] | None = None,
        path: Path | None = None,
    ) -> None:
        self.urls = list(dict.fromkeys(urls))
        self.warn = warn or (lambda _w: None)
        self.path = path or state_path()
        #: url -> {fleetdeck silence id: Alertmanager silence id}
        self.made: dict[str, dict[str, str]] = {u: {} for u in self.urls}
        self._failing: dict[str, str] = {}
        self._store = SilenceStore(warn=self.warn)
        self._task: asyncio.Future | None = None
        self._load()

    def kick(self) -> None:
        """After a poll: read silences.json if it changed and start a round in the background
        (one at a time; an Alertmanager that does not answer never holds a poll back)."""
        if self._task is not None and not self._task.done():
            return
        self._store.refresh()
        with contextlib.suppress(RuntimeError):  # no running loop: nothing to start it in
            self._task = asyncio.ensure_future(self.sync(list(self._store.silences)))

    async def sync(self, silences: list[Silence], now: float | None = None) -> None:
        """Create in each Alertmanager the silences in force it lacks, expire there the ones that
        ended here; a failure is a warning (once per Alertmanager) and is tried again next time."""
        now = time.time() if now is None else now
        active = {s.id: s for s in silences if s.active(now)}
        changed = False
        for url in self.urls:
            made = self.made.setdefault(url, {})
            try:
                for sid, s in active.items():
                    if sid in made:
                        continue
                    body = json.dumps(silence_doc(s), ensure_ascii=False).encode("utf-8")
                    status, raw = await _request(api_url(url, "/api/v2/silences"), "POST", body)
                    am_id = None
                    with contextlib.suppress(ValueError, AttributeError):
                        am_id = json.loads(raw.decode("utf-8")).get("silenceID")
                    if not (200 <= status < 300) or not isinstance(am_id, str) or not am_id:
                        what = raw.decode("utf-8", "replace").strip()[:200] or f"HTTP {status}"
                        raise OSError(f"silence {sid} was not taken: HTTP {status}: {what}")
                    made[sid] = am_id
                    changed = True
                for sid in [x for x in made if x not in active]:
                    where = api_url(
                        url, f"/api/v2/silence/{urllib.parse.quote(made[sid], safe='')}"
                    )
                    status, raw = await _request(where, "DELETE", None)
                    # 404: Alertmanager forgot it (restarted without storage): nothing to expire
                    if not (200 <= status < 300) and status != 404:
                        what = raw.decode("utf-8", "replace").strip()[:200] or f"HTTP {status}"
                        raise OSError(f"silence {sid} was not expired: HTTP {status}: {what}")
                    del made[sid]
                    changed = True
            except (OSError, ValueError) as e:
                why = shown(str(getattr(e, "reason", None) or e))[:300]
                if self._failing.get(url) is None:
                    self.warn(
                        f"Alertmanager {shown(url)}: its silences do not follow fleetdeck's ({why}); "
                        "tried again on the next poll"
                    )
                self._failing[url] = why
                continue
            if self._failing.pop(url, None) is not None:
                self.warn(f"Alertmanager {shown(url)}: its silences follow fleetdeck's again")
        if changed:
            self._save()

    def _save(self) -> None:
        data = json.dumps({"made": self.made}, ensure_ascii=True)
        try:
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(data)
            os.replace(tmp, self.path)
        except OSError as e:
            self.warn(f"{shown(str(self.path))} not saved: {shown(str(e))}")

    def _load(self) -> None:
        try:
            doc = json.loads(statedir.read_file(self.path, BODY_LIMIT).decode("utf-8"))
            made = doc["made"] if isinstance(doc, dict) else None
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError):
            self.warn(f"{shown(str(self.path))} could not be read: its silences are made again")
            return
        for url in self.urls:
            got = made.get(url) if isinstance(made, dict) else None
            if isinstance(got, dict):
                self.made[url] = {
                    k: v for k, v in got.items() if isinstance(k, str) and isinstance(v, str)
                }


__all__ = ["SilenceSync", "glob_regex", "matchers", "silence_doc"]
