"""The web view's pages, drawn from one poll (`view_state.Seen`): the frame every page shares,
the Fleet (hosts, GPUs with memory and health, live runs, disks) and one run with its series.
The Alerts and Schedules pages are in `lists`.

Every string a host sent passes `esc` once: `shown` (no control byte, no undecodable byte
disguised) and then HTML escaping, quotes included, so a run folder named `<script>` is text in
an element or an attribute alike. Links carry host strings only percent-encoded (`link`).
"""

from __future__ import annotations

import html
import time
from typing import Any
from urllib.parse import quote

from fleetdeck.backend.fleet.gpu_health import reason_words, throttle_mark
from fleetdeck.backend.fleet.models import HostSnapshot, Run
from fleetdeck.backend.fleet.run_order import LIVE, ordered_runs
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.lib.units import duration_short, size_short
from fleetdeck.backend.web.chart import loss_chart
from fleetdeck.backend.web.view_state import Seen

#: seconds between reloads for a browser without script (the live pages use server-sent events)
NOSCRIPT_REFRESH = 15
#: the views, in the order the navigation names them
VIEWS = (
    ("fleet", "/", "Fleet"),
    ("alerts", "/alerts", "Alerts"),
    ("schedules", "/schedules", "Schedules"),
)
MIB = 2**20


def esc(x: Any) -> str:
    """A host's value as HTML text or attribute value: escaped for display, then for HTML."""
    return html.escape(shown("" if x is None else str(x)), quote=True)


def url(where: str, /, **query: str) -> str:
    """A same-origin URL, its query values percent-encoded (any byte a host sent included)."""
    q = "&".join(f"{k}={quote(v, safe='', errors='surrogateescape')}" for k, v in query.items())
    return f"{where}?{q}" if q else where


def link(where: str, /, **query: str) -> str:
    """`url(where, **query)` escaped for an attribute."""
    return html.escape(url(where, **query), quote=True)


def clock(t: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) if t else "-"


def num(v: Any, fmt: str = "{:.4g}") -> str:
    try:
        return fmt.format(float(v)) if v is not None else "-"
    except (TypeError, ValueError):
        return "?"


def frame(title: str, view: str, events: str, body: str) -> bytes:
    """A whole page: `body` (already escaped markup) inside the element `live.js` refreshes from
    `events` (a same-origin server-sent event stream)."""
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="referrer" content="no-referrer">\n'
        f"<title>fleetdeck: {html.escape(title)}</title>\n"
        '<link rel="stylesheet" href="/static/web.css">\n'
        '<script src="/static/live.js" defer></script>\n'
        f'<noscript><meta http-equiv="refresh" content="{NOSCRIPT_REFRESH}"></noscript>\n'
        f'</head><body data-view="{view}">\n'
        f'<div id="live" data-events="{html.escape(events, quote=True)}">\n{body}</div>\n'
        "</body></html>\n"
    ).encode()


def nav(seen: Seen, view: str) -> str:
    firing = sum(1 for a in seen.alerts if a.state == "firing")
    stray = sum(1 for h in _hosts(seen) for s in h.schedules if s.stray)
    counts = {"alerts": firing, "schedules": stray}
    items = []
    for key, href, name in VIEWS:
        n = counts.get(key)
        badge = f' <span class="count">{n}</span>' if n else ""
        here = ' aria-current="page"' if key == view else ""
        items.append(f'<a href="{href}"{here}>{name}{badge}</a>')
    return (
        f'<nav>{"".join(items)}<span class="when" id="polled" data-version="{seen.version}">'
        f"polled {clock(seen.time)}</span></nav>\n"
    )


def _hosts(seen: Seen) -> tuple[HostSnapshot, ...]:
    return seen.snap.hosts if seen.snap is not None else ()


def fleet_body(seen: Seen) -> str:
    """The Fleet page's live part."""
    out = [nav(seen, "fleet")]
    if seen.snap is None:
        return out[0] + '<p class="empty">waiting for the first poll</p>\n'
    for h in seen.snap.hosts:
        out.append(_host(h, seen))
    return "".join(out)


def _host(h: HostSnapshot, seen: Seen) -> str:
    name = esc(h.name)
    if not h.reachable:
        return (
            f'<section class="host down"><h2>{name} <span class="badge bad">down</span></h2>'
            f'<p class="error">{esc(h.error_code or "unreachable")}: {esc(h.error)}</p></section>\n'
        )
    lat = f"{h.latency_ms:.0f} ms" if isinstance(h.latency_ms, int | float) else "?"
    mem = f"{size_short(h.memory_used_bytes)} of {size_short(h.memory_total_bytes)} memory"
    parts = [
        f'<section class="host up"><h2>{name} <span class="badge ok">up {lat}</span></h2>',
        f'<p class="facts">{mem}</p>',
    ]
    if h.gpus:
        parts.append(_gpus(h))
    live = [r for r in ordered_runs(h.runs) if r.state in (*LIVE, "queued")]
    parts.append(_runs(live, h))
    rest = [r for r in ordered_runs(h.runs) if r not in live]
    if rest:
        rows = "".join(
            f'<li><a href="{link("/run", host=r.host, path=r.path)}">{esc(r.name)}</a> '
            f'<span class="state {esc(r.state)}">{esc(r.state)}</span></li>'
            for r in rest
        )
        parts.append(
            f"<details><summary>{len(rest)} other run(s)</summary><ul>{rows}</ul></details>"
        )
    if h.disks:
        parts.append(_disks(h))
    parts.append("</section>\n")
    return "".join(parts)


def _gpus(h: HostSnapshot) -> str:
    rows = []
    for g in h.gpus:
        if g.lost is not None:
            rows.append(
                f"<tr><td>{g.index}</td><td>{esc(g.name)}</td>"
                f'<td colspan="3" class="bad">lost: {esc(g.lost)}</td></tr>'
            )
            continue
        used, total = g.memory_used_mib, g.memory_total_mib
        meter = (
            f'<meter min="0" max="{total:.0f}" value="{used:.0f}"></meter>'
            if isinstance(used, int | float) and isinstance(total, int | float) and total > 0
            else ""
        )
        memory = f"{size_short((used or 0) * MIB)} / {size_short(total * MIB if total else None)}"
        health = _health(g)
        rows.append(
            f"<tr><td>{g.index}</td><td>{esc(g.name)}</td><td>{meter} {memory}</td>"
            f"<td>{num(g.utilization_pct, '{:.0f}%')}</td><td>{health}</td></tr>"
        )
    return (
        '<table class="gpus"><thead><tr><th>GPU</th><th>name</th><th>memory</th><th>util</th>'
        f"<th>health</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _health(g: Any) -> str:
    said = []
    if g.temperature_c is not None:
        said.append(f"{num(g.temperature_c, '{:.0f}')}°C")
    mark = throttle_mark(g)
    if mark:
        said.append(f'<span class="warn">{esc(reason_words((mark,)))}</span>')
    if g.ecc.uncorrected:
        said.append(f'<span class="bad">ECC {num(g.ecc.uncorrected, "{:.0f}")} uncorrected</span>')
    if g.xid:
        said.append(f'<span class="bad">Xid {esc(g.xid[-1].code)}</span>')
    return " ".join(said) or "ok"


def _runs(live: list[Run], h: HostSnapshot) -> str:
    if not live:
        return '<p class="empty">no live run</p>'
    rows = "".join(
        f'<tr class="run"><td><a href="{link("/run", host=r.host, path=r.path)}">{esc(r.name)}</a></td>'
        f'<td><span class="state {esc(r.state)}">{esc(r.state)}</span></td>'
        f'<td class="step">{_step(r)}</td><td>{num(r.loss)}</td>'
        f"<td>{duration_short(r.eta_seconds, '-')}</td></tr>"
        for r in live
    )
    return (
        '<table class="runs"><thead><tr><th>run</th><th>state</th><th>step</th><th>loss</th>'
        f"<th>ETA</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _step(r: Run) -> str:
    if r.step is None:
        return "-"
    return f"{r.step}/{r.max_steps}" if r.max_steps else f"{r.step}"


def _disks(h: HostSnapshot) -> str:
    rows = []
    for d in h.disks:
        if d.error:
            rows.append(
                f'<tr><td>{esc(d.path)}</td><td colspan="2" class="bad">{esc(d.error)}</td></tr>'
            )
            continue
        meter = (
            f'<meter min="0" max="{d.total_bytes}" value="{d.used_bytes}" high="{d.total_bytes * 0.9:.0f}"></meter>'
            if d.total_bytes > 0
            else ""
        )
        rows.append(
            f"<tr><td>{esc(d.path)}</td><td>{meter} {size_short(d.free_bytes)} free of "
            f"{size_short(d.total_bytes)}</td><td>{esc(d.mount)}</td></tr>"
        )
    return (
        '<table class="disks"><thead><tr><th>runs root</th><th>space</th><th>mount</th></tr>'
        f"</thead><tbody>{''.join(rows)}</tbody></table>"
    )


def find_run(seen: Seen, host: str, path: str) -> Run | None:
    for h in _hosts(seen):
        if h.name == host:
            return next((r for r in h.runs if r.path == path), None)
    return None


def run_body(seen: Seen, host: str, path: str) -> str:
    """One run's live part: its figures and its series as a chart."""
    out = [nav(seen, "run")]
    r = find_run(seen, host, path)
    if r is None:
        out.append(f'<p class="empty">no run {esc(path)} on {esc(host)} in the last poll</p>')
        return "".join(out)
    facts = [
        ("host", esc(r.host)),
        ("path", esc(r.path)),
        ("state", f'<span class="state {esc(r.state)}">{esc(r.state)}</span>'),
        ("why", esc(r.reason or "-")),
        ("step", _step(r)),
        ("loss", num(r.loss)),
        ("eval loss", num(r.eval_loss)),
        ("s/step", num(r.seconds_per_step, "{:.3g}")),
        ("ETA", duration_short(r.eta_seconds, "-")),
        ("checkpoints", str(len(r.checkpoints))),
        ("final adapter", esc(r.adapter or "none")),
    ]
    dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)
    out.append(f'<h1 class="run-name">{esc(r.name)}</h1><dl class="facts">{dl}</dl>')
    svg = loss_chart(r.losses, r.eval_losses, f"loss of {esc(r.name)}")
    out.append(
        f'<figure>{svg}<figcaption><span class="key loss">loss</span> '
        f'<span class="key eval">eval loss</span></figcaption></figure>'
        if svg
        else '<p class="empty">no loss logged yet</p>'
    )
    return "".join(out)


__all__ = [
    "NOSCRIPT_REFRESH",
    "VIEWS",
    "clock",
    "esc",
    "find_run",
    "fleet_body",
    "frame",
    "link",
    "nav",
    "num",
    "run_body",
    "url",
]
