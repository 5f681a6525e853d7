"""Deltas on the wire: the resident probe sends only the sections that changed, the controller
reuses what it validated for the others, and what `status --json` and /metrics show is the same
byte for byte as from whole answers. A delta that cannot be applied (a reference to an answer
not held, an unknown section, a delta before any whole answer) is refused, the whole answer is
asked for, and no held data is shown as fresh. Real resident probes and real sshd hosts."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from fleetdeck.backend.fleet.acks import Acks
from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.held import BadDelta, Held
from fleetdeck.backend.fleet.link.channel import loads
from fleetdeck.backend.fleet.models import FleetSnapshot
from fleetdeck.backend.fleet.poller import Poller
from fleetdeck.backend.fleet.schedule_verdict import StrayVerdict, mark_stray
from fleetdeck.backend.fleet.validate import host_from_probe
from fleetdeck.backend.host.lib import serve
from fleetdeck.backend.host.probe.delta import Answers
from fleetdeck.backend.monitor.metrics.export import FleetCollector

from support.probe import PROBE, write_progress

LOOP = "while :; do sleep 0.2; done # fleetdeck-delta-test"


class Resident:
    """The probe as a host runs it: `--resident`, a JSON line in and a JSON line out."""

    def __init__(self) -> None:
        self.p = subprocess.Popen(
            [sys.executable, str(PROBE), "--resident"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def ask(self, req: dict) -> dict:
        assert self.p.stdin and self.p.stdout
        self.p.stdin.write(json.dumps(req).encode() + b"\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def close(self) -> None:
        assert self.p.stdin
        self.p.stdin.close()
        self.p.wait(10)


def _record(tmp_path: Path, children: list) -> list[dict]:
    """Whole answers of a real resident probe over six polls, with what changes on a host
    between them: a run's step advances, a shell loop (a schedule and a listed process) appears
    and is stopped."""
    runs = tmp_path / "runs"
    run = runs / "alpha"
    run.mkdir(parents=True)
    write_progress(run, range(1, 11))
    req = {"op": "snapshot", "runs": [str(runs)], "disk_paths": [str(runs)], "stall_factor": 10}
    probe = Resident()
    answers = []
    try:
        for i in range(6):
            if i == 2:
                children.append(subprocess.Popen(["sh", "-c", LOOP]))
                time.sleep(0.5)
            if i == 3:
                write_progress(run, range(1, 21))
            if i == 4:
                children[-1].kill()
                children[-1].wait()
            answers.append(probe.ask(req))
    finally:
        probe.close()
    return answers


def _shown(hosts: list) -> tuple[str, str]:
    """What `status --json` prints (less the fleet file's name) and the /metrics text."""
    snap = FleetSnapshot(hosts=tuple(hosts), time=1.0)
    collector = FleetCollector()
    collector.update(snap, [], {})
    reg = CollectorRegistry()
    reg.register(collector)
    return json.dumps(snap.to_json(), indent=1), generate_latest(reg).decode()


def test_whole_and_delta_answers_show_the_same_status_and_metrics(tmp_path, children):
    answers = _record(tmp_path, children)
    loops = [[s for s in a["schedules"] if "fleetdeck-delta-test" in s["command"]] for a in answers]
    assert [bool(x) for x in loops] == [False, False, True, True, False, False], "the loop seen"
    steps = [{r["name"]: r["step"] for r in a["runs"]}["alpha"] for a in answers]
    assert steps == [10, 10, 10, 20, 20, 20]
    acks = Acks()
    encoder, held, verdict = Answers(), Held(), StrayVerdict()
    sames, sizes = [], []
    for i, whole in enumerate(answers):
        now = 1000.0 + i
        full = host_from_probe("h", loads(serve.dumps(whole)), 1.0, now)
        # the delta path: the probe's encoder on the same answer, the wire, what is held
        line = serve.dumps(encoder.framed(whole, held.seq))
        sent = loads(line)
        sames.append(sent.get("same"))
        delta = host_from_probe("h", sent, 1.0, now, held.take("h", sent))
        # the verdict as the poller keeps it, against the one-shot rule
        assert _shown(verdict([delta], acks)) == _shown(mark_stray([full], acks)), i
        sizes.append((len(line), len(serve.dumps(whole))))
    assert sames[0] is None and held.whole == 1 and held.deltas == 5
    # what changed travelled, what did not was named (other sections move with this machine)
    assert "runs" in sames[1] and "runs" in sames[5]
    assert sum(d for d, w in sizes[1:]) < sum(w for d, w in sizes[1:])
    assert "schedules" not in sames[2] and "schedules" not in sames[4]
    assert "runs" not in sames[3] and "runs" in sames[4]


def _scripted(bad: str) -> str:
    """A probe that answers a whole answer when nothing is held, and `bad` (a delta's fields)
    when the request holds one; its schedule's id names the answer, to tell fresh from held."""
    return f"""
import json, sys, time
n = 0
while True:
    line = sys.stdin.buffer.readline()
    if not line:
        break
    req = json.loads(line)
    n += 1
    held = req.get("held")
    sched = {{"id": "c-%d" % n, "kind": "crontab", "user": "u", "spec": "* * * * *",
              "command": "true # held=%r" % (held,), "source": "crontab"}}
    ans = {{"seq": n, "gpus": [], "disks": [], "runs": [], "processes": [], "seats": None,
           "schedules": [sched], "memory": {{"total_bytes": 1, "used_bytes": 0}},
           "load1": 0.1, "time": time.time()}}
    bad = {bad}
    if held is not None or bad.pop("always", False):
        for k in bad.pop("drop", []):
            ans.pop(k)
        if bad.pop("nan", False):
            ans["load1"] = float("nan")
        ans.update(bad)
    sys.stdout.write(json.dumps(ans) + "\\n")
    sys.stdout.flush()
"""


@pytest.fixture
def one_host(spare_fleet, tmp_path):
    spare_fleet.add("odd")
    return load_fleet(str(spare_fleet.write_fleet(tmp_path / "hosts.toml")))


@pytest.mark.sshd
@pytest.mark.parametrize(
    "bad,said",
    [
        (
            {"base": 99, "same": ["schedules"], "drop": ["schedules"]},
            "refers to answer 99, and the controller holds answer 1",
        ),
        (
            {"base": 1, "same": ["schedules", "secrets"], "drop": ["schedules"]},
            "names an unknown section 'secrets'",
        ),
        ({"base": 1, "same": "schedules", "drop": ["schedules"]}, "is not a list of names"),
        ({"base": 1, "same": ["gpus"]}, "both sends gpus and names it unchanged"),
        ({"base": 1, "same": [], "drop": ["runs"]}, "neither sends runs nor names it unchanged"),
    ],
)
async def test_a_delta_that_cannot_apply_is_refused_and_the_whole_answer_shown(one_host, bad, said):
    async with Poller(one_host, probe=_scripted(repr(bad))) as poller:
        first = (await poller.poll()).hosts[0]
        second = (await poller.poll()).hosts[0]
        third = (await poller.poll()).hosts[0]
    assert first.reachable and [s.id for s in first.schedules] == ["c-1"]
    # the delta (answer 2) was refused; answer 3, whole, is what is shown: never c-1 again
    assert second.reachable, second.error
    assert [s.id for s in second.schedules] == ["c-3"]
    assert any(said in w and "the whole answer asked for" in w for w in second.warnings), (
        second.warnings
    )
    assert [s.id for s in third.schedules] == ["c-5"]


@pytest.mark.sshd
async def test_a_delta_before_any_whole_answer_is_a_bad_delta_never_a_crash(one_host):
    bad = {"always": True, "base": 0, "same": ["schedules"], "drop": ["schedules"]}
    async with Poller(one_host, probe=_scripted(repr(bad))) as poller:
        for _ in range(2):
            snap = (await poller.poll()).hosts[0]
            assert not snap.reachable and snap.error_code == "bad-delta", snap.error
            assert "refers to answer 0, and the controller holds no answer" in snap.error
            assert not snap.schedules


@pytest.mark.sshd
async def test_after_an_answer_that_does_not_decode_the_next_request_asks_for_it_whole(one_host):
    async with Poller(one_host, probe=_scripted(repr({"nan": True}))) as poller:
        first = (await poller.poll()).hosts[0]
        bad = (await poller.poll()).hosts[0]
        third = (await poller.poll()).hosts[0]
    assert [s.command for s in first.schedules] == ["true # held=None"]
    assert not bad.reachable and bad.error_code == "bad-answer", bad.error
    # nothing held after it: answer 3 was asked for whole, and is shown whole
    assert [(s.id, s.command) for s in third.schedules] == [("c-3", "true # held=None")]


def test_held_refuses_what_it_cannot_apply_and_then_holds_nothing():
    held = Held()
    whole = {"seq": 4, "schedules": [], "gpus": [], "disks": [], "runs": [], "processes": []}
    held.take("h", whole)
    assert held.request() == {"held": 4}
    for bad in (
        {"seq": True, "base": 4, "same": []},
        {"seq": 5, "base": 4.0, "same": []},
        {"seq": 5, "base": 2**70, "same": []},
        {"seq": 5, "same": ["gpus"]},
    ):
        with pytest.raises(BadDelta):
            held.take("h", {**whole, **bad})
        assert held.request() == {}
        held.take("h", whole)


@pytest.mark.sshd
async def test_deltas_travel_over_ssh_and_a_change_shows_at_the_next_poll(spare_fleet, tmp_path):
    spare_fleet.add("d")
    fleet = load_fleet(str(spare_fleet.write_fleet(tmp_path / "hosts.toml")))
    run = Path(fleet.hosts[0].runs[0]).expanduser() / "beta"
    run.mkdir(parents=True)
    write_progress(run, range(1, 6))
    async with Poller(fleet) as poller:
        steps = []
        for i in range(4):
            if i == 2:
                write_progress(run, range(1, 9))
            snap = (await poller.poll()).hosts[0]
            assert snap.reachable, snap.error
            steps.append({r.name: r.step for r in snap.runs}["beta"])
        held = poller.held("d")
    assert steps == [5, 5, 8, 8]
    assert held.whole == 1 and held.deltas == 3


def test_the_kept_verdict_judges_again_when_acks_or_a_hosts_schedules_change():
    def host(name: str, *ids: str):
        scheds = [
            {"id": i, "kind": "crontab", "user": "u", "spec": "@daily", "command": "x  y"}
            for i in ids
        ]
        return host_from_probe(name, {"schedules": scheds}, 1.0, 1.0)

    a, b = host("a", "c-1"), host("b", "c-2")
    verdict = StrayVerdict()
    first = verdict([a, b], Acks())
    assert [s.reasons for h in first for s in h.schedules] == [("unacknowledged", "duplicate")] * 2
    assert verdict([a, b], Acks()) == first  # kept
    acked = verdict([a, b], Acks(everywhere=frozenset({"c-1"})))
    assert [s.stray for h in acked for s in h.schedules] == [False, True]
    alone = verdict([a, host("b", "c-3", "c-4")], Acks(everywhere=frozenset({"c-1"})))
    assert [s.reasons for s in alone[1].schedules] == [("unacknowledged", "duplicate")] * 2
    gone = verdict([a, host("b")], Acks())
    assert [s.reasons for s in gone[0].schedules] == [("unacknowledged",)]
    assert gone == mark_stray([a, host("b")], Acks())


def test_the_kept_verdict_is_mark_strays_over_random_polls_and_keeps_what_it_may():
    """300 polls of 5 hosts, each poll changing a few hosts' schedules (a command added, removed
    or made a twin of another host's) and now and then the acknowledged set: the kept verdict is
    mark_stray's every time, and a host whose schedules and twins did not change keeps the very
    tuple it was given last time."""
    rng = random.Random(50)
    commands = ["a", "b", "b  ", "c", "d"]

    def answer(name: str):
        scheds = [
            {
                "id": f"c-{name}-{i}",
                "kind": "crontab",
                "user": "u",
                "spec": "@daily",
                "command": rng.choice(commands),
                "active": rng.random() > 0.2,
                "system": rng.random() < 0.1,
            }
            for i in range(rng.randrange(4))
        ]
        return host_from_probe(name, {"schedules": scheds}, 1.0, 1.0)

    hosts = [answer(n) for n in "pqrst"]
    verdict, acks, kept = StrayVerdict(), Acks(), 0
    last = verdict(list(hosts), acks)
    for _ in range(300):
        for i in rng.sample(range(5), rng.randrange(3)):
            hosts[i] = answer("pqrst"[i])
        if rng.random() < 0.1:
            ids = [s.id for h in hosts for s in h.schedules]
            acks = Acks(everywhere=frozenset(rng.sample(ids, min(len(ids), 2))))
        got = verdict(list(hosts), acks)
        assert got == mark_stray(list(hosts), acks)
        kept += sum(
            1
            for g, was in zip(got, last, strict=True)
            if g.schedules and g.schedules is was.schedules
        )
        last = got
    assert kept > 300, kept  # most hosts' verdicts were kept, not judged again
