"""Polling the fleet: every host at once, one resident probe per host, failures kept per host."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

from fleetdeck.backend.fleet.acks import load_acks
from fleetdeck.backend.fleet.config import Fleet, HostConfig
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.held import BadDelta, Held
from fleetdeck.backend.fleet.link import own
from fleetdeck.backend.fleet.link.bundle import bundle
from fleetdeck.backend.fleet.link.channel import (
    AnswerTooLarge,
    NonFinite,
    ShellOutputError,
    TooDeep,
)
from fleetdeck.backend.fleet.link.helper_errors import sudo_error
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot
from fleetdeck.backend.fleet.probe_seam import OpenProbe, ResidentProbe
from fleetdeck.backend.fleet.schedule_verdict import StrayVerdict
from fleetdeck.backend.fleet.validate import Section, host_from_probe
from fleetdeck.backend.host.lib.text import shown

PROBE_MODULE = "fleetdeck.backend.host.probe.main"
#: `Poller.close` waits at most about this long for requests, probes and connections to end
CLOSE_WITHIN = 1.5


class PollerClosed(RuntimeError):
    """A poll asked of a poller that was closed."""


def _kind(v: object) -> str:
    """A JSON value's kind in words (`a list`, `a number`)."""
    return {
        list: "a list",
        str: "a string",
        int: "a number",
        float: "a number",
        bool: "true or false",
        type(None): "null",
    }.get(type(v), type(v).__name__)


def probe_source() -> str:
    """The probe's payload (the probe's modules with the host library), as every host gets it."""
    return bundle(PROBE_MODULE)


#: at most this many runs' workers are handed back to a probe
WORKERS_LIMIT = 4096


def probe_request(host: HostConfig, workers: dict | None = None) -> dict:
    """What one poll asks a host's probe for. `workers`: what the host's last probe remembered
    of the process working in each run (`probe.run_state`), handed to a new probe after a
    restart so that a trainer that died meanwhile is still `failed`, not `unknown`."""
    return {
        "workers": workers or {},
        "op": "snapshot",
        "runs": list(host.runs),
        "disk_paths": host.all_roots,
        "stall_factor": 10,
        # helpers of this controller on connections of their own (a mirror's): ours too
        "ours": own.known(host.name),
    }


class Poller:
    """Keeps one link and one resident probe per host; `poll()` asks them all concurrently.

    The fleet's connection pool: the dashboard and the CLI commands take their links from
    `link(name)`, so an action reuses the connection the poll already made. An async context
    manager (`async with Poller(fleet) as poller:` closes every probe and connection).

    A host that fails becomes `HostSnapshot(reachable=False, error=..., error_code=...)`; it
    never delays or breaks the others beyond its own connect / command timeout. A probe that
    does not answer in time is closed, and with its channel it dies on the host (boot.WATCHDOG).
    """

    def __init__(
        self,
        fleet: Fleet,
        probe: str | None = None,
        deadline: float | None = None,
        open_probe: OpenProbe | None = None,
    ) -> None:
        """`probe`: another probe source (tests hang one on purpose); `open_probe`: where a
        host's resident probe comes from (`probe_seam.OpenProbe`; by default the probe's source
        started over the host's link, as `--resident`)."""
        self.fleet = fleet
        #: `poll()` returns after this many seconds at most (None: when every host has answered
        #: or failed); a host still asking then is shown as it last was and answers later
        self.deadline = deadline
        self._inflight: dict[str, asyncio.Task[HostSnapshot]] = {}
        self._links = {h.name: HostLink(h) for h in fleet.hosts}
        self._probes: dict[str, ResidentProbe] = {}
        self._last_good: dict[str, HostSnapshot] = {}
        #: host -> {run path: worker} from its probe's last answer (see probe_request)
        self._workers: dict[str, dict[str, Any]] = {}
        self._last_shown: dict[str, HostSnapshot] = {}
        #: host -> its probe's last answer as validated, for the next delta (fleet/held.py)
        self._held = {h.name: Held() for h in fleet.hosts}
        #: the stray verdict, judged again only when some host's schedules changed
        self._verdict = StrayVerdict()
        self._source = probe if probe is not None else probe_source()
        self._open_probe = open_probe or self._start_probe
        self._closed = False

    async def __aenter__(self) -> Poller:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _start_probe(self, host: HostConfig) -> ResidentProbe:
        """The real resident probe on `host`, started over its link (the default `open_probe`)."""
        return await self._links[host.name].start_helper(self._source, ["--resident"], what="probe")

    def link(self, name: str) -> HostLink:
        """The (shared, persistent) link to host `name`."""
        if name not in self._links:
            self.fleet.host(name)  # raises ConfigError naming the known hosts
        return self._links[name]

    def held(self, name: str) -> Held:
        """What is held of host `name`'s probe answers (its counts of whole and delta answers)."""
        return self._held[name]

    def last_good(self, name: str) -> HostSnapshot | None:
        """The last snapshot in which `name` answered."""
        return self._last_good.get(name)

    async def poll(
        self, hosts: list[str] | None = None, deadline: float | None = None
    ) -> FleetSnapshot:
        """One poll of the fleet (or of the named hosts), hosts in fleet-file order.

        Each host is asked on its own deadline (its connect and command timeouts). With a poll
        `deadline` (or the poller's), this returns once it has passed even if a host is still
        asking: that host keeps its own request running, appears as it last was (a host never
        seen yet as not answered, code `pending`), and its answer or its `timeout` is taken by
        a later poll. So one silent host never holds back the refresh of the others.
        """
        if self._closed:
            raise PollerClosed("the poller is closed: nothing is asked of the hosts any more")
        deadline = self.deadline if deadline is None else deadline
        targets = [self.fleet.host(n) for n in hosts] if hosts else list(self.fleet.hosts)
        tasks: dict[str, asyncio.Task[HostSnapshot]] = {}
        for h in targets:
            t = self._inflight.get(h.name)
            if t is None:
                t = asyncio.ensure_future(self._poll_host(h))
                self._inflight[h.name] = t
            tasks[h.name] = t
        if not tasks:
            pass
        elif deadline is None:
            await asyncio.wait(tasks.values())
        else:
            pending = [t for t in tasks.values() if not t.done()]
            if pending:
                await asyncio.wait(pending, timeout=deadline)
            # a host never heard from yet is waited for up to its connect timeout (a cold
            # start shows hosts as they answer, not a column of "still asking")
            first = [
                h for h in targets if h.name not in self._last_shown and not tasks[h.name].done()
            ]
            if first:
                await asyncio.wait(
                    [tasks[h.name] for h in first],
                    timeout=max(0.0, min(h.connect_timeout for h in first) - deadline),
                )
        snaps: list[HostSnapshot] = []
        fresh: set[str] = set()
        now = time.time()
        for h in targets:
            t = tasks[h.name]
            if not t.done():
                snaps.append(
                    self._last_shown.get(h.name)
                    or HostSnapshot(
                        name=h.name,
                        reachable=False,
                        error="no answer yet (still asking)",
                        error_code="pending",
                        time=now,
                    )
                )
                continue
            del self._inflight[h.name]
            if t.cancelled():
                raise asyncio.CancelledError()
            e = t.exception()
            r = (
                t.result()
                if e is None
                else HostSnapshot(
                    name=h.name, reachable=False, error=f"{type(e).__name__}: {e}", time=now
                )
            )
            snaps.append(r)
            fresh.add(h.name)
            if r.reachable:
                self._last_good[h.name] = r
        judged = self._verdict(snaps, load_acks())
        for snap in judged:
            if snap.name in fresh:
                self._last_shown[snap.name] = snap
        return FleetSnapshot(hosts=tuple(judged), time=now)

    async def _poll_host(self, host: HostConfig) -> HostSnapshot:
        try:
            return await self._ask(host, retry=True)
        except HostError as e:
            return HostSnapshot(
                name=host.name,
                reachable=False,
                error=e.message,
                error_code=e.code,
                time=time.time(),
            )

    async def _ask(self, host: HostConfig, retry: bool) -> HostSnapshot:
        probe = self._probes.get(host.name)
        fresh = probe is None
        if probe is None:
            # bounded (connect, channel, source sent): past it HostError `timeout`, and the link
            # is dropped (the connection is open but the host does not answer on it: a
            # stopped sshd, a dead link the keepalive has not noticed yet)
            probe = await self._open_probe(host)
            self._probes[host.name] = probe
        t0 = time.perf_counter()
        try:
            # asyncio.timeout, not wait_for: in Python 3.11 wait_for loses a cancellation that
            # comes as the answer does, and this task would go on after the poller closed
            async with asyncio.timeout(host.command_timeout):
                answer, checked, note = await self._exchange(host, probe)
        except TimeoutError:
            self._forget(host.name, drop_link=False)
            raise HostError(
                host.name, f"probe did not answer within {host.command_timeout:g}s", "timeout"
            ) from None
        except AnswerTooLarge as e:
            # the rest of that line is still on its way: the probe goes, its channel with it
            self._forget(host.name, drop_link=False)
            raise HostError(host.name, str(e), "answer-too-large") from None
        except ShellOutputError as e:
            # the shell's startup files print: every new probe would meet the same text
            self._forget(host.name, drop_link=False)
            raise HostError(host.name, str(e), "shell-output") from None
        except HostError:
            raise
        except TooDeep as e:
            # refused before parsing; the probe stays (its next answer may be fine)
            self._held[host.name].forget()
            raise HostError(host.name, str(e), TooDeep.code) from None
        except NonFinite as e:
            # a number that is not one (NaN, Infinity): the answer is bad, the probe stays
            self._held[host.name].forget()
            raise HostError(host.name, str(e), NonFinite.code) from None
        except (EOFError, ConnectionError, OSError, ValueError) as e:
            # a channel that closed under the probe (end of file, "Channel not open for
            # sending"): what it said on stderr as it ended is the cause, not the pipe
            ended = isinstance(e, (EOFError, BrokenPipeError))
            why = await probe.read_stderr() if ended else str(e)
            refused = sudo_error(host, why)
            if refused is not None:
                self._forget(host.name, drop_link=False)
                raise refused from None
            why = why or ("" if isinstance(e, EOFError) else str(e))
            self._forget(host.name, drop_link=True)
            # A resident probe that died with its connection is normal after a host restart:
            # try once more on a fresh one, which also tells "down" from "probe broke".
            if retry and not fresh:
                return await self._ask(host, retry=False)
            # all of it (bounded): the cause of a traceback is at its top, not in its last line
            raise HostError(
                host.name, f"probe failed: {why.strip() or 'connection closed'}", "probe"
            ) from None
        except Exception as e:  # asyncssh errors surface as their own types
            self._forget(host.name, drop_link=True)
            if retry and not fresh:
                return await self._ask(host, retry=False)
            raise HostError(host.name, f"connection lost: {e}", "disconnected") from None
        latency_ms = (time.perf_counter() - t0) * 1000
        if "runs" in answer:  # else unchanged since the answer held
            runs = answer.get("runs")
            self._workers[host.name] = {
                r["path"]: r["worker"]
                for r in (runs if isinstance(runs, list) else [])[:WORKERS_LIMIT]
                if isinstance(r, dict)
                and isinstance(r.get("path"), str)
                and isinstance(r.get("worker"), list)
            }
        snap = host_from_probe(host.name, answer, latency_ms, time.time(), checked)
        if note:
            snap = replace(snap, warnings=(*snap.warnings, note))
        return snap

    async def _exchange(
        self, host: HostConfig, probe: ResidentProbe
    ) -> tuple[dict[str, Any], dict[str, Section], str | None]:
        """One request and its answer: (the answer, its sections checked, why a delta was
        refused). A delta that cannot be applied is asked for again whole, once, on the same
        probe; past that HostError `bad-delta`."""
        held = self._held[host.name]
        answer = await self._request(host, probe)
        try:
            return answer, held.take(host.name, answer), None
        except BadDelta as e:  # nothing is held now: the request below asks for all of it
            refused = f"{e}: refused, and the whole answer asked for"
        answer = await self._request(host, probe)
        try:
            return answer, held.take(host.name, answer), refused
        except BadDelta as e:
            raise HostError(host.name, f"{refused}; it answered {e}", e.code) from None

    async def _request(self, host: HostConfig, probe: ResidentProbe) -> dict[str, Any]:
        """The probe's answer to one snapshot request (naming the answer held, if any);
        HostError `bad-answer` or `probe` for an answer that is no snapshot."""
        held = self._held[host.name]
        request = probe_request(host, self._workers.get(host.name))
        await probe.send_json({**request, **held.request()})
        answer = await probe.recv_json()
        if not isinstance(answer, dict):
            held.forget()
            raise HostError(
                host.name,
                f"the probe answered {_kind(answer)}, not a JSON object: "
                f"{shown(str(answer))[:200]}",
                "bad-answer",
            )
        if "error" in answer and "gpus" not in answer and "base" not in answer:
            held.forget()
            raise HostError(host.name, f"probe error: {answer.get('error')}", "probe")
        return answer

    def _forget(self, name: str, drop_link: bool) -> None:
        self._held[name].forget()
        probe = self._probes.pop(name, None)
        if probe is not None:
            probe.close()
        if drop_link:
            self._links[name].drop()

    async def close(self) -> None:
        """Stop every probe and close every connection, within about CLOSE_WITHIN seconds
        whatever the hosts do; for good (a poll after it raises PollerClosed).

        What ends them is done first, without waiting: each request in flight cancelled, each
        probe stopped (killed locally, its channel closed), each connection closed. Only then
        is their end awaited, bounded: a host that accepted the connection and went silent
        never answers a close, and is not waited for."""
        self._closed = True
        inflight = list(self._inflight.values())
        self._inflight.clear()
        for t in inflight:
            t.cancel()
        probes = list(self._probes.values())
        for name in list(self._probes):
            self._forget(name, drop_link=False)
        closing = [asyncio.ensure_future(link.close()) for link in self._links.values()]
        # reap them while the loop still runs, so no transport is torn down after it closed
        reaping = [asyncio.ensure_future(p.wait(CLOSE_WITHIN)) for p in probes]
        waited: list[asyncio.Future[Any]] = [*inflight, *closing, *reaping]
        try:
            if waited:
                await asyncio.wait(waited, timeout=CLOSE_WITHIN)
        finally:
            # also when this close is itself cancelled (its caller's own bound)
            for fut in waited:
                if not fut.done():
                    fut.cancel()
                elif not fut.cancelled():
                    fut.exception()  # retrieved: an error while closing is no news
            for link in self._links.values():
                link.drop()  # whatever is still open now is aborted


async def poll_fleet(fleet: Fleet, hosts: list[str] | None = None) -> FleetSnapshot:
    """One poll of the fleet with fresh links, closed afterwards (what the CLI uses)."""
    poller = Poller(fleet)
    try:
        return await poller.poll(hosts)
    finally:
        await poller.close()
