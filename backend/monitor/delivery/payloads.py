"""What each sink receives for a transition, and the one rule per sink that makes a host's
values safe for it: the id of a transition (`transition_id`), the JSON document of a webhook
body and a hook's stdin (`payload`, `webhook_body`), a hook's argv and environment
(`hook_argv`, `hook_env`). An outbox entry keeps the `Alert` itself (`outbox.Pending`).

- argv and environment get `shown()` text (printable, one line, no NUL, undecodable bytes as
  `\\xNN`), by `arg_text`;
- JSON gets valid UTF-8 (a lone surrogate as `shown()` writes it, control characters
  JSON-escaped) and numbers that are finite and within +-2**53, anything else null, by
  `json_safe`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
from typing import Any

from fleetdeck.backend.fleet.alert_rules import SEVERITY_DEFAULTS
from fleetdeck.backend.host.lib.text import shown

PLACEHOLDERS = ("title", "text", "rule", "host", "subject", "state", "since", "id", "severity")
_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")
_SURROGATE = re.compile("[\ud800-\udfff]")
_INT_LIMIT = 2**53


def arg_text(v: Any) -> str:
    """What argv and the environment receive for a value: `shown()` text (printable, one line,
    no NUL, undecodable bytes as `\\xNN`); a number as its JSON rule gives it."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        n = json_safe(v)
        return "" if n is None else repr(n)
    return shown(v if isinstance(v, (str, bytes)) else str(v))


def json_safe(v: Any) -> Any:
    """`v` made fit for JSON that any receiver parses: strings valid UTF-8 (a lone surrogate, an
    undecodable byte, written `\\xNN` / `\\uNNNN` as `shown()` does); numbers finite and within
    +-2**53 (a double's exact integers), anything else null; containers item by item."""
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v if -_INT_LIMIT <= v <= _INT_LIMIT else None
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, str):
        return _SURROGATE.sub(lambda m: shown(m.group(0)), v)
    if isinstance(v, dict):
        return {str(json_safe(str(k))): json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    return json_safe(str(v))


def transition_id(alert: Any) -> str:
    """The id of one transition: the same for every retry and after a restart."""
    since = (
        alert.since if isinstance(alert.since, (int, float)) and math.isfinite(alert.since) else 0.0
    )
    key = "\0".join(
        [
            shown(alert.rule),
            shown(alert.host),
            shown(alert.subject),
            shown(alert.state),
            f"{since:.3f}",
        ]
    )
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def _since_text(since: Any) -> str:
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(since))
    except (TypeError, ValueError, OverflowError, OSError):
        return ""


def _severity(alert: Any) -> str:
    # an entry queued before severities (an outbox carried over) gets its rule's default
    return getattr(alert, "severity", "") or SEVERITY_DEFAULTS.get(
        str(getattr(alert, "rule", "")), "warning"
    )


def payload(alert: Any, tid: str | None = None) -> dict[str, Any]:
    """The JSON document of one transition (webhook body, hook stdin): the contract's alert
    object, its title and its id, made safe by `json_safe`."""
    d = {
        "id": tid or transition_id(alert),
        "rule": alert.rule,
        "host": alert.host,
        "subject": alert.subject,
        "state": alert.state,
        "since": alert.since,
        "text": alert.text,
        "title": alert.title,
        "severity": _severity(alert),
    }
    return json_safe(d)


def webhook_body(alert: Any, tid: str | None = None) -> bytes:
    """What the webhook receives (and a command hook on stdin)."""
    return json.dumps(payload(alert, tid), ensure_ascii=False, allow_nan=False).encode("utf-8")


def hook_values(alert: Any, tid: str | None = None) -> dict[str, str]:
    """Each placeholder's text, by the argv rule."""
    return {
        "title": arg_text(alert.title),
        "text": arg_text(alert.text),
        "rule": arg_text(alert.rule),
        "host": arg_text(alert.host),
        "subject": arg_text(alert.subject),
        "state": arg_text(alert.state),
        "since": _since_text(alert.since),
        "id": tid or transition_id(alert),
        "severity": arg_text(_severity(alert)),
    }


def hook_argv(argv: tuple[str, ...] | list[str], alert: Any, tid: str | None = None) -> list[str]:
    """The hook's argv for one alert: each placeholder replaced inside each argument, once,
    left to right, so text that itself holds `{title}` is never expanded again."""
    values = hook_values(alert, tid)
    return [_PLACEHOLDER.sub(lambda m: values[m.group(1)], a) for a in argv]


def hook_env(alert: Any, tid: str | None = None) -> dict[str, str]:
    """The hook's environment: ours plus `FLEETDECK_<PLACEHOLDER>` for each value."""
    env = dict(os.environ)
    env.update({f"FLEETDECK_{k.upper()}": v for k, v in hook_values(alert, tid).items()})
    return env


__all__ = [
    "PLACEHOLDERS",
    "arg_text",
    "hook_argv",
    "hook_env",
    "hook_values",
    "json_safe",
    "payload",
    "transition_id",
    "webhook_body",
]
