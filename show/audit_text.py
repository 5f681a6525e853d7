"""The audit log's records in words: one summary line and detail lines per record, every string
escaped with `shown`, never JSON (what `fleetdeck audit`, the dashboard's Audit view and an
incident's events show). Purge records get their own reading; any other record its fields, one
per line."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fleetdeck.backend.actions.audit import COMMON
from fleetdeck.backend.host.lib import units
from fleetdeck.backend.host.lib.text import shown


def _text(v: Any) -> str:
    """Any value as one escaped line (no JSON)."""
    if v is None:
        return "-"
    if isinstance(v, str):
        return shown(v)
    if isinstance(v, dict):
        return ", ".join(f"{shown(str(k))} {_text(x)}" for k, x in v.items())
    if isinstance(v, list | tuple):
        return ", ".join(_text(x) for x in v)
    return shown(str(v))


def _purge_summary(r: Mapping[str, Any], size: Callable[[Any], str]) -> str:
    paths = [p for p in r.get("paths") or [] if isinstance(p, dict)]
    first = shown(str(paths[0].get("path"))) if paths else "no paths"
    parts = [first + (f" (+{len(paths) - 1} more)" if len(paths) > 1 else "")]
    codes = sorted(
        {c.get("code", "?") for p in paths for c in p.get("refusals") or [] if isinstance(c, dict)}
    )
    if codes:
        parts.append("refused: " + ", ".join(codes))
    if r.get("result") in ("done", "unverified", "failed"):
        gone = sum(1 for p in paths if p.get("deleted"))
        parts.append(f"{gone} of {len(paths)} deleted")
    if r.get("reclaimed_bytes") is not None:
        parts.append(f"{size(r['reclaimed_bytes'])} back")
    keepers = [k for k in r.get("keepers") or [] if isinstance(k, dict)]
    if keepers and r.get("result") in ("done", "unverified"):
        bad = [k for k in keepers if k.get("sha256_after") != k.get("sha256_before")]
        parts.append(
            f"{len(bad)} keeper(s) NOT verified" if bad else f"{len(keepers)} keeper(s) verified"
        )
    if r.get("error"):
        parts.append(shown(str(r["error"])))
    return "; ".join(parts)


def _purge_details(r: Mapping[str, Any], size: Callable[[Any], str]) -> list[str]:
    lines = []
    for p in r.get("paths") or []:
        if not isinstance(p, dict):
            continue
        state = "deleted" if p.get("deleted") else "kept"
        lines.append(f"path {shown(str(p.get('path')))}  {size(p.get('bytes'))}  {state}")
        for c in p.get("refusals") or []:
            if isinstance(c, dict):
                lines.append(f"  {shown(str(c.get('code')))}: {shown(str(c.get('message')))}")
    conf = r.get("confirmation")
    if isinstance(conf, dict):
        for c in conf.get("paths") or []:
            if isinstance(c, dict):
                typed = "nothing" if c.get("typed") is None else shown(str(c["typed"]))
                lines.append(
                    f"confirmation ({shown(str(conf.get('via')))}): typed {typed} for "
                    f"{shown(str(c.get('path')))}: {'matched' if c.get('matched') else 'did not match'}"
                )
    for k in r.get("keepers") or []:
        if isinstance(k, dict):
            after = k.get("sha256_after")
            verdict = (
                ""
                if after is None
                else (" verified" if after == k.get("sha256_before") else " CHANGED")
            )
            lines.append(
                f"keeper {shown(str(k.get('path')))}  sha256 {k.get('sha256_before') or '?'}{verdict}"
            )
    lines.append(
        f"free before {size(r.get('free_bytes_before'))}, after {size(r.get('free_bytes_after'))}, "
        f"expected back {size(r.get('expected_bytes'))}"
    )
    lines += [f"warning: {shown(str(w))}" for w in r.get("warnings") or []]
    if r.get("error"):
        lines.append(f"error: {shown(str(r['error']))}")
    return lines


def _generic_summary(r: Mapping[str, Any]) -> str:
    parts: list[str] = []
    sched = r.get("schedule")
    if isinstance(sched, dict):
        parts.append(" ".join(shown(str(sched[k])) for k in ("kind", "id") if sched.get(k)))
        if sched.get("command"):
            parts.append(shown(str(sched["command"]))[:60])
    for key in ("paths", "ids"):
        v = r.get(key)
        if isinstance(v, list) and v:
            items = [x.get("path", x) if isinstance(x, dict) else x for x in v]
            parts.append(
                ", ".join(shown(str(x)) for x in items[:3])
                + (f" (+{len(items) - 3})" if len(items) > 3 else "")
            )
    for key in ("src", "dst", "run", "path"):
        if isinstance(r.get(key), str):
            parts.append(f"{key} {shown(r[key])}")
    if r.get("reason_code"):
        parts.append(f"[{shown(str(r['reason_code']))}]")
    for key in ("message", "reason", "error"):
        if r.get(key):
            parts.append(_text(r[key]))
            break
    if r.get("backup"):
        parts.append(f"backup {_text(r['backup'])}")
    if not parts:
        parts = [f"{shown(str(k))} {_text(v)}" for k, v in r.items() if k not in COMMON][:4]
    return "; ".join(p for p in parts if p)


def describe(
    r: Mapping[str, Any], size: Callable[[Any], str] = units.size
) -> tuple[str, list[str]]:
    """A record as text: (one summary line, detail lines); every string escaped with `shown`,
    no JSON; `size` formats byte counts (purge records' sizes, and any field named `bytes`,
    `bytes_*` or `*_bytes`). Purge records get their own reading; any other record its fields
    one per line."""
    if (
        r.get("action") == "purge"
        and isinstance(r.get("paths"), list)
        and all(isinstance(p, dict) for p in r["paths"])
    ):
        return _purge_summary(r, size), _purge_details(r, size)
    details = [
        f"{shown(str(k))}: {size(v) if _is_size(k, v) else _text(v)}"
        for k, v in r.items()
        if k not in COMMON
    ]
    summary = _generic_summary(r)
    if _is_size("bytes", r.get("bytes")) and any(
        isinstance(r.get(k), str) for k in ("src", "dst", "path")
    ):
        summary += f"; {size(r['bytes'])}"
    return summary, details


def _is_size(key: Any, value: Any) -> bool:
    """Whether a record field is a byte count (`bytes`, `bytes_src`, `free_bytes_after`...)."""
    return (
        isinstance(key, str)
        and "bytes" in key.split("_")
        and isinstance(value, int)
        and not isinstance(value, bool)
        and abs(value) < 1 << 63
    )


__all__ = ["describe"]
