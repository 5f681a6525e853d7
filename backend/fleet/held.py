"""What the controller holds of one host's probe answers, so that a delta answer can be taken.

The resident probe numbers its answers and, when a request says which one the controller holds
(`"held": N`), sends only the sections whose JSON changed since answer N, with the others named
in `same` (backend/host/probe/delta.py). `Held` keeps, per host, the number of the last answer
validated whole and each of its sections as validated (`validate.check_section`): a section
named in `same` is reused as it is, neither decoded nor checked again; a section sent is checked
as any answer's.

Every byte from a host stays hostile. A delta that names a section this controller does not know,
refers to an answer it does not hold (before any full answer, after a reconnect, or an old one),
names a section twice or also sends it, leaves a section out without naming it, or carries a
number that is not one is refused with `BadDelta`: nothing is held any more, so the next request
asks for a whole answer, and what was held is never shown as this answer's.
"""

from __future__ import annotations

import operator
from typing import Any

from fleetdeck.backend.fleet.validate import SECTIONS, Kept, Section, check_section
from fleetdeck.backend.fleet.validate_fields import described
from fleetdeck.backend.host.lib.text import shown

#: an answer's number is at most this (it travels back in the next request)
MAX_SEQ = 2**63 - 1
#: the sections whose items are checked again whenever they are sent, without looking for held
#: ones: a process's CPU and memory figures move at nearly every poll, so the look would cost
#: more than it saves
CHECKED_AFRESH = frozenset({"processes"})


class BadDelta(ValueError):
    """A delta answer that cannot be applied to what is held (code `bad-delta`)."""

    code = "bad-delta"


def _number(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_SEQ


class Held:
    """One host's last answer as validated: its number (None: nothing held, ask for a whole
    answer) and its sections."""

    def __init__(self) -> None:
        self.seq: int | None = None
        self.sections: dict[str, Section] = {}
        #: each held section's items as checked (`validate.Kept`): a section sent again checks
        #: only the items that are not the very ones held at their place
        self.items: dict[str, list[Kept]] = {}
        #: items checked and items taken as held, in the sections sent (for tests and benchmarks)
        self.checked = 0
        self.reused = 0
        #: answers taken whole and as deltas (for tests and benchmarks)
        self.whole = 0
        self.deltas = 0

    def forget(self) -> None:
        """Hold nothing: the next request asks for a whole answer."""
        self.seq = None
        self.sections = {}
        self.items = {}

    def request(self) -> dict[str, Any]:
        """What the next request adds: the number of the answer held, when one is."""
        return {} if self.seq is None else {"held": self.seq}

    def take(self, host: str, answer: dict[str, Any]) -> dict[str, Section]:
        """Every section of `answer` (a JSON object from host `host`) checked, those it names as
        unchanged taken from what is held; the answer is then what is held. BadDelta (and
        nothing held) when it is a delta that cannot be applied."""
        seq = answer.get("seq")
        if "base" not in answer and "same" not in answer:
            same: set[str] = set()
            self.whole += 1
        else:
            try:
                same = self._unchanged(answer)
            except BadDelta:
                self.forget()
                raise
            self.deltas += 1
        checked: dict[str, Section] = {}
        items: dict[str, list[Kept]] = {}
        for s in SECTIONS:
            if s in same:
                checked[s], items[s] = self.sections[s], self.items.get(s, [])
            else:
                checked[s], items[s] = self._check(host, s, answer.get(s))
        self.seq = seq if _number(seq) else None
        self.sections, self.items = checked, items
        return checked

    def _check(self, host: str, section: str, value: Any) -> tuple[Section, list[Kept]]:
        """A section sent, checked; the items at their place as held are taken as they were
        made, and when all of them are, the section held is taken whole (the same tuple: what
        judges it, the stray verdict among them, sees it unchanged)."""
        if section in CHECKED_AFRESH:
            self.checked += len(value) if isinstance(value, list) else 0
            return check_section(host, section, value), []
        last = self.items.get(section)
        keep: list[Kept] = []
        got = check_section(host, section, value, last, keep)
        held = self.sections.get(section)
        item = operator.itemgetter(1)
        reused = 0 if last is None else sum(map(operator.is_, map(item, keep), map(item, last)))
        self.checked += len(keep) - reused
        self.reused += reused
        if (
            held is not None
            and isinstance(got[0], tuple)
            and isinstance(held[0], tuple)
            and len(got[0]) == len(held[0])
            and all(map(operator.is_, got[0], held[0]))
            and got[1] == held[1]
        ):
            return held, keep
        return got, keep

    def _unchanged(self, answer: dict[str, Any]) -> set[str]:
        seq, base, same = answer.get("seq"), answer.get("base"), answer.get("same")
        if not _number(seq) or not _number(base):
            raise BadDelta(
                f"a delta answer numbered {shown(described(seq))} on base "
                f"{shown(described(base))}: not answer numbers"
            )
        if self.seq is None or base != self.seq:
            held = "no answer" if self.seq is None else f"answer {self.seq}"
            raise BadDelta(
                f"a delta answer refers to answer {base}, and the controller holds {held}"
            )
        if not isinstance(same, list) or not all(isinstance(s, str) for s in same):
            raise BadDelta(f"a delta answer's `same` is not a list of names ({described(same)})")
        unknown = [s for s in same if s not in SECTIONS]
        if unknown:
            raise BadDelta(
                f"a delta answer names an unknown section {shown(unknown[0])[:64]!r} "
                f"(known: {', '.join(SECTIONS)})"
            )
        if len(set(same)) != len(same):
            raise BadDelta("a delta answer names a section twice in `same`")
        sent = [s for s in same if s in answer]
        if sent:
            raise BadDelta(f"a delta answer both sends {sent[0]} and names it unchanged")
        missing = [s for s in SECTIONS if s not in same and s not in answer]
        if missing:
            raise BadDelta(f"a delta answer neither sends {missing[0]} nor names it unchanged")
        return set(same)
