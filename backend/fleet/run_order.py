"""The one order runs are listed in: live runs first, then by host (in fleet-file order), then by
name in natural order (`run-3` before `run-10`), then by path."""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleetdeck.backend.fleet.models import Run

#: the states of a run whose trainer is at work (stalled: at work and silent)
LIVE = ("running", "stalled")
_DIGITS = re.compile(r"([0-9]+)")


@functools.lru_cache(maxsize=1 << 16)
def natural_key(text: str) -> tuple:
    """A sort key for `text` in which a run of digits compares as the number it is (`run-3`
    before `run-10`, however many digits: compared by length, never converted), letters
    without regard to case, and exact text last, so that no two different texts tie. Kept for
    the texts seen last (a poll lists the same hosts, names and paths again: the dashboard
    sorted 3,000 runs a poll by working each key out afresh)."""
    parts = _DIGITS.split(text)
    key: list = []
    for i, part in enumerate(parts):
        if i % 2:
            n = part.lstrip("0")
            key.append((len(n), n))
        else:
            key.append(part.casefold())
    return tuple(key), text


def ordered_runs(runs: Iterable[Run], hosts: Sequence[str] = ()) -> list[Run]:
    """`runs` live first, then by host (its place in `hosts`, the fleet file's order; a host not
    named there after the others, by name), then by name and path in natural order."""
    rank = {h: i for i, h in enumerate(hosts)}

    def key(r: Run) -> tuple:
        return (
            r.state not in LIVE,
            rank.get(r.host, len(rank)),
            natural_key(r.host),
            natural_key(r.name),
            natural_key(r.path),
        )

    return sorted(runs, key=key)


class RunOrder:
    """`ordered_runs` over the runs of many hosts, kept from one call to the next: each host's
    runs are put in order again only when their hosts, names, paths or states changed (a poll
    brings new `Run` objects, mostly for the same runs), and the hosts' orders are merged by
    the rule's first two keys (live first, then the host's place). The same list
    `ordered_runs` gives, which it falls back to when a run's host is not its group's."""

    def __init__(self) -> None:
        #: host name -> (what its order was made from, its live runs' and its other runs'
        #: places in its list, each in order)
        self._hosts: dict[str, tuple[list, list[int], list[int]]] = {}
        #: counts the calls whose listing (which runs, in which order, under which host and
        #: name) differed from the call before: the same number, the same listing
        self.version = 0
        self._rank: dict[str, int] = {}

    def order(self, groups: Sequence[tuple[str, Sequence[Run]]], hosts: Sequence[str]) -> list[Run]:
        """The runs of `groups` ((host name, its runs) in any order) as `ordered_runs(runs,
        hosts)` orders them."""
        rank = {h: i for i, h in enumerate(hosts)}
        kept, self._hosts = self._hosts, {}
        live: list[tuple[int, list[Run]]] = []
        rest: list[tuple[int, list[Run]]] = []
        changed = len(kept) != len(groups) or rank != self._rank
        self._rank = rank
        for name, runs in groups:
            made_from = list(map(_MADE_FROM, runs))
            hit = kept.get(name)
            if hit is None or hit[0] != made_from:
                changed = True
                if name not in rank or any(r.host != name for r in runs):
                    self._hosts, self.version = {}, self.version + 1
                    return ordered_runs((r for _n, rs in groups for r in rs), hosts)
                idx = sorted(
                    range(len(runs)),
                    key=lambda i: (natural_key(runs[i].name), natural_key(runs[i].path)),
                )
                hit = (
                    made_from,
                    [i for i in idx if runs[i].state in LIVE],
                    [i for i in idx if runs[i].state not in LIVE],
                )
            self._hosts[name] = hit
            live.append((rank[name], [runs[i] for i in hit[1]]))
            rest.append((rank[name], [runs[i] for i in hit[2]]))
        self.version += changed
        return [r for part in (live, rest) for _rank, rs in sorted(part, key=_RANK) for r in rs]


#: what a run's place in the order is made from
_MADE_FROM = operator.attrgetter("host", "name", "path", "state")

#: a host's runs by its place in the fleet file
_RANK = operator.itemgetter(0)
