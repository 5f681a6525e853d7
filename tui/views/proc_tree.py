"""The Host view's process tree (`e`, as btop's; htop's F5, nvitop's t): each listed process under
its listed parent, children in the listing's order, drawn with tree glyphs before the command."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fleetdeck.backend.fleet.models import Process

#: tree levels drawn before a command; a deeper one draws `… ` and its nearest MAX_DRAWN levels,
#: so that the command stays on screen at 80 columns (the glyphs take at most 26)
MAX_DRAWN = 8


def parent_pid(p: Process) -> int | None:
    """The parent pid the probe sent with `p` (`Process.ppid`); None from a probe or a recorded
    snapshot without it, so that such a listing shows every process as a root."""
    v = getattr(p, "ppid", None)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def tree_order(
    procs: Sequence[Process], parent_of: Callable[[Process], int | None] = parent_pid
) -> list[tuple[Process, str]]:
    """The processes in tree order, each with the glyphs drawn before its command (`├─ `,
    `│  └─ `; a root has none). A process whose parent is not listed is a root, in the listing's
    order; a parent chain that loops (a host's answer may say anything) is cut where it closes:
    every process appears exactly once. Past MAX_DRAWN levels the glyphs are cut to the nearest
    ones after `… `."""
    listed = {p.pid for p in procs}
    kids: dict[int, list[Process]] = {}
    roots: list[Process] = []
    for p in procs:
        parent = parent_of(p)
        if parent is not None and parent != p.pid and parent in listed:
            kids.setdefault(parent, []).append(p)
        else:
            roots.append(p)
    out: list[tuple[Process, str]] = []
    seen: set[int] = set()
    drawn = 3 * MAX_DRAWN
    # a loop's members are reached from no root: the first of them starts its own tree
    for top in [*roots, *procs]:
        if id(top) in seen:
            continue
        stack: list[tuple[Process, str, str]] = [(top, "", "")]
        while stack:
            p, prefix, lead = stack.pop()
            if id(p) in seen:
                continue
            seen.add(id(p))
            # a chain deeper than MAX_DRAWN (a host may say any parents) keeps its nearest levels
            out.append((p, prefix if len(prefix) <= drawn else "… " + prefix[-drawn:]))
            below = [c for c in kids.get(p.pid, ()) if id(c) not in seen]
            for i in range(len(below) - 1, -1, -1):
                last = i == len(below) - 1
                stack.append(
                    (below[i], lead + ("└─ " if last else "├─ "), lead + ("   " if last else "│  "))
                )
    return out
