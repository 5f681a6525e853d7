"""The resident probe's answers by section: only the sections whose JSON changed travel.

Each answer is numbered (`seq`). A request that says which answer the controller holds
(`"held": N`, the last one it validated whole) is answered, when N is the answer this probe sent
last, with the sections whose bytes differ from answer N's, the names of the others in `same`
and `"base": N`; every other field (memory, load, warnings, time...) travels every time. A full
answer (no `base`) goes whenever the request holds nothing or another number, on `"fresh":
true`, and every FULL_EVERY answers whatever the request says, so a delta the controller lost
or refused can never leave it with a stale view for long.
"""
# Runs on the host's Python 3.8 or newer.

from fleetdeck.backend.host.lib import serve

#: the sections that may be left out of an answer when their bytes did not change
SECTIONS = ("gpus", "disks", "runs", "schedules", "processes", "seats")
#: one answer in this many is sent whole, whatever the request holds
FULL_EVERY = 30


class Answers:
    """What this probe last sent: its number and each section's JSON text."""

    def __init__(self) -> None:
        self.seq = 0
        self.texts = None  # type: dict | None
        self.since_full = 0

    def framed(self, reply: dict, held: object, fresh: bool = False) -> dict:
        """`reply` numbered, with the sections unchanged since answer `held` (when that is the
        last one sent) named in `same` instead of sent; the caller's dict is not changed."""
        self.seq += 1
        texts = {}  # type: dict[str, str | None]
        for name in SECTIONS:
            if name in reply:
                try:
                    texts[name] = serve.dumps(reply[name])
                except ValueError:  # a non-finite number: sent (and scrubbed) every time
                    texts[name] = None
        last, self.texts = self.texts, texts
        whole = (
            fresh
            or last is None
            or type(held) is not int
            or held != self.seq - 1
            or self.since_full + 1 >= FULL_EVERY
        )
        if whole:
            self.since_full = 0
            return dict(reply, seq=self.seq)
        self.since_full += 1
        same = [n for n in SECTIONS if texts.get(n) is not None and (last or {}).get(n) == texts[n]]
        out = dict((k, v) for k, v in reply.items() if k not in same)
        out.update(seq=self.seq, base=held, same=same)
        return out


ANSWERS = Answers()
