"""`fleetdeck watch`: the monitor (`backend/monitor/service.py`) without a screen, for a controller that
runs unattended, as a service (`docs/fleetdeck-watch.service`).

It takes the state folder's lock first (a second `watch` on the same state exits 1 naming the
running one), then runs the monitor in its delivering role: each cycle polls, checks seats,
writes history, judges the rules, queues each transition for the `[alerts]` hooks and saves the
alert state with the outbox; deliveries run beside the cycles. Each transition is printed as
one line and each warning as `warning: ...`. SIGTERM or SIGINT ends it at once, from any
state (the cycle or delivery in flight is cancelled), with the alert state and the outbox
saved: what was not delivered yet is delivered by the next start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any, TextIO

from fleetdeck.backend.fleet.config import Fleet, load_fleet
from fleetdeck.backend.monitor.delivery.watch_lock import AlreadyRunning, StateLock
from fleetdeck.backend.monitor.history.store import History
from fleetdeck.backend.monitor.metrics.export import FleetCollector, parse_listen, serve_metrics
from fleetdeck.backend.monitor.service import Monitor
from fleetdeck.backend.web.access import (
    TokenRefused,
    ensure_token,
    is_loopback,
    new_token,
    parse_web_listen,
    token_path,
)
from fleetdeck.backend.web.server import serve_web
from fleetdeck.backend.web.view_state import Both, ViewState
from fleetdeck.cli.args import add_hosts_option, at_least_one, seconds_type
from fleetdeck.show.fmt import said

#: seconds from SIGTERM / SIGINT to the process's end, whatever it was doing
STOP_WITHIN = 2.0
#: what watch says when its stop did not finish in time and it ended the process itself
FORCED_STOP = "the stop did not finish within {s:g}s; ending the process now"


def register(sub: argparse._SubParsersAction) -> None:
    """Add `watch [--prometheus ADDR:PORT] [--count N]`."""
    p = sub.add_parser(
        "watch",
        help="poll headless: history, alerts and hooks (and Prometheus)",
        description="Poll the fleet every poll_interval without a screen, keep history, "
        "judge the alert rules and deliver each transition once to the [alerts] hooks.",
    )
    add_hosts_option(p)
    p.add_argument(
        "--prometheus", metavar="ADDR:PORT", help="serve /metrics here (e.g. 127.0.0.1:9464)"
    )
    p.add_argument(
        "--web",
        metavar="ADDR:PORT",
        help="serve the read-only web view here (PORT alone: on 127.0.0.1; docs/web.md)",
    )
    p.add_argument(
        "--rotate-web-token",
        action="store_true",
        help="make a new web token and print it once (a running watch takes it at once)",
    )
    p.add_argument(
        "--count",
        type=at_least_one,
        metavar="N",
        help="stop after N polls (default: run until stopped)",
    )
    p.add_argument(
        "--interval",
        type=seconds_type("above 0", lambda v: v > 0),
        metavar="SECONDS",
        help="seconds between polls (default: the fleet file's poll_interval)",
    )
    p.set_defaults(func=cmd_watch)


class Watcher(Monitor):
    """The monitor printing to `out`: a transition as one line, a warning as `warning: ...`.
    `readonly` judges only (what `fleetdeck alerts` does): no history, hook or saved state."""

    def __init__(
        self,
        fleet: Fleet,
        *,
        history: History | None = None,
        engine: Any = None,
        collector: Any = None,
        out: TextIO | None = None,
        readonly: bool = False,
        **kw: Any,
    ) -> None:
        self.out = out or sys.stdout
        super().__init__(
            fleet,
            role="judge" if readonly else "deliver",
            history=history,
            engine=engine,
            collector=collector,
            report=self._print,
            **kw,
        )

    def _print(self, kind: str, line: str) -> None:
        self.say(line if kind == "transition" else f"warning: {line}")

    def say(self, line: str) -> None:
        """One line, whatever the terminal's or journal's encoding (never an encoding error)."""
        enc = getattr(self.out, "encoding", None) or "utf-8"
        try:
            # a host's text in a warning is escaped here once more: no control byte reaches a
            # terminal or the journal (a transition's host parts were escaped when it was made)
            text = said(line).encode(enc, "backslashreplace").decode(enc)
            print(text, file=self.out, flush=True)
        except (OSError, ValueError):  # a closed or full stdout must not stop the watch
            pass

    async def run(
        self,
        count: int | None = None,
        interval: float | None = None,
        stop: asyncio.Event | None = None,
    ) -> None:
        """Cycle until `count` cycles are done, or `stop` is set, or `stop()` is called."""
        waiter = None
        if stop is not None:

            async def watch_stop() -> None:
                await stop.wait()
                self.stop()

            waiter = asyncio.ensure_future(watch_stop())
        try:
            await super().run(count, interval)
        finally:
            if waiter is not None:
                waiter.cancel()


def cmd_watch(args: argparse.Namespace) -> int:
    """Run the headless poller until stopped (or for --count polls)."""
    if args.rotate_web_token and not args.web:
        print(f"web token (shown once; kept in {token_path()}): {new_token()}")
        return 0
    # until the loop's own handler is in place, SIGTERM ends the start-up (nothing is judged yet)
    signal.signal(signal.SIGTERM, _exit_now)
    fleet = load_fleet(args.hosts)
    try:
        lock = StateLock()
        lock.acquire()
    except AlreadyRunning as e:
        print(f"fleetdeck: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(
            f"fleetdeck: cannot take the watch lock in the state folder: {e.strerror or e}",
            file=sys.stderr,
        )
        return 1
    try:
        return _watch(args, fleet)
    finally:
        lock.release()


def stop_on_signal(loop: asyncio.AbstractEventLoop, stop: Any) -> None:
    """SIGTERM and SIGINT call `stop` in the loop and end the process within STOP_WITHIN,
    whatever it is doing. The signal is noticed by a thread reading the interpreter's wakeup
    fd, which the C-level handler writes at once: a handler of the loop, or a Python-level one,
    runs only when the main thread next gets to it, and a main thread held by a slow disk
    would hold the stop with it."""
    r, w = socket.socketpair()
    w.setblocking(False)
    signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)

    def watchdog() -> None:
        assert w.fileno() >= 0  # `w` lives as long as this thread: the wakeup fd stays open
        while r.recv(1)[:1] not in (bytes([signal.SIGTERM]), bytes([signal.SIGINT])):
            pass
        with contextlib.suppress(RuntimeError):  # the loop already closed: we are ending anyway
            loop.call_soon_threadsafe(stop)
        time.sleep(STOP_WITHIN - 0.4)  # the state is saved by every cycle and on the way out
        # still here: something did not finish stopping (a bug: every await on a host is
        # bounded and cancellable); said, so that it is seen, then ended all the same
        with contextlib.suppress(Exception):
            print(
                f"warning: {FORCED_STOP.format(s=STOP_WITHIN - 0.4)}", file=sys.stderr, flush=True
            )
        _exit_now()

    threading.Thread(target=watchdog, name="stop-on-signal", daemon=True).start()


def _exit_now(*_: object) -> None:
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(0)


def _watch(args: argparse.Namespace, fleet: Fleet) -> int:
    collector: FleetCollector | Both | None = None
    if args.prometheus:
        try:
            addr, port = parse_listen(args.prometheus)
        except ValueError as e:
            print(f"fleetdeck: {e}", file=sys.stderr)
            return 2
        collector = FleetCollector()
        try:
            _server, bound = serve_metrics(addr, port, collector)
        except OSError as e:
            print(
                f"fleetdeck: cannot serve metrics on {args.prometheus}: {e.strerror or e}",
                file=sys.stderr,
            )
            return 1
        print(f"metrics on http://{addr}:{bound}/metrics", flush=True)

    view = None
    if args.web:
        view, code = _start_web(args)
        if view is None:
            return code
        collector = Both(collector, view)

    async def main() -> None:
        watcher = Watcher(fleet, collector=collector)
        if view is not None:
            view.alerts = watcher.alerts

            def held() -> list[tuple[Mapping[str, Any], float]]:
                # what a silence holds back now, for the web view's page
                return [*watcher.deliverer.held()] if watcher.deliverer is not None else []

            view.held = held
        loop = asyncio.get_running_loop()
        stop_on_signal(loop, watcher.stop)
        where = watcher.history.path if watcher.history is not None else "-"
        watcher.say(f"watching {len(fleet.hosts)} host(s) from {fleet.source}; history in {where}")
        await watcher.run(args.count, args.interval)

    asyncio.run(main())
    return 0


def _start_web(args: argparse.Namespace) -> tuple[ViewState | None, int]:
    """The web view served as `--web` says, its address and token said once; (its state, 0),
    or (None, the exit status) with the reason on stderr."""
    try:
        addr, port = parse_web_listen(args.web)
    except ValueError as e:
        print(f"fleetdeck: {e}", file=sys.stderr)
        return None, 2
    try:
        token, fresh = (new_token(), True) if args.rotate_web_token else ensure_token()
    except TokenRefused as e:
        print(f"fleetdeck: {e.code}: {e.message}", file=sys.stderr)
        return None, 1
    except OSError as e:
        print(f"fleetdeck: the web token cannot be made: {e.strerror or e}", file=sys.stderr)
        return None, 1
    view = ViewState()
    try:
        server = serve_web(addr, port, view)
    except OSError as e:
        print(
            f"fleetdeck: cannot serve the web view on {args.web}: {e.strerror or e}",
            file=sys.stderr,
        )
        return None, 1
    where = f"http://{f'[{addr}]' if ':' in addr else addr}:{server.server_address[1]}/"
    print(f"web view on {where}", flush=True)
    if fresh:
        print(f"web token (shown once; kept in {token_path()}): {where}?token={token}", flush=True)
    else:
        print(
            f"web token in {token_path()} (rotate: fleetdeck watch --rotate-web-token)", flush=True
        )
    if not is_loopback(addr):
        print(
            f"warning: the web view answers the network on {addr}; put TLS in front of it (docs/web.md)",
            flush=True,
        )
    return view, 0
