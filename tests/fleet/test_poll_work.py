"""The work of one host-poll on the controller, counted (never timed): a reachable host's
snapshot is made once (its answer's figures read before it, the stray verdict's schedules put in
without going through its fields again); the answer is decoded by one shared strict decoder, not
a new one each time; and a section sent again checks only its items that are not, at their
place, the very JSON held (the rest are taken as they were made, and a section all of whose items
are held is the same tuple, so the stray verdict is kept), showing what a fresh check shows.
Real resident probes over real loopback sshd hosts, real answers' shapes through `Held`."""

from __future__ import annotations

import json
import random
import subprocess
import time

import pytest

from fleetdeck.backend.fleet import schedule_verdict, validate
from fleetdeck.backend.fleet.acks import Acks
from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.held import Held
from fleetdeck.backend.fleet.link.channel import NonFinite, loads
from fleetdeck.backend.fleet.models import HostSnapshot, Schedule
from fleetdeck.backend.fleet.poller import Poller
from fleetdeck.backend.fleet.schedule_verdict import StrayVerdict, mark_stray
from fleetdeck.backend.fleet.validate import host_from_probe

from support.counting import Counter

LOOP = "while :; do sleep 0.2; done # fleetdeck-poll-work-test"


@pytest.mark.sshd
async def test_a_host_poll_makes_one_snapshot_and_no_decoder(
    spare_fleet, tmp_path, children, monkeypatch
):
    # a shell loop: every host lists a schedule, so the stray verdict judges each host
    children.append(subprocess.Popen(["sh", "-c", LOOP]))
    time.sleep(0.5)
    for name in ("w1", "w2"):
        spare_fleet.add(name)
    fleet = load_fleet(str(spare_fleet.write_fleet(tmp_path / "hosts.toml")))
    async with Poller(fleet) as poller:
        await poller.poll()  # connected, probes started, whole answers held
        snapshots = Counter(monkeypatch, HostSnapshot, "__init__")
        decoders = Counter(monkeypatch, json.JSONDecoder, "__init__")
        for _ in range(3):
            snap = await poller.poll()
            assert all(h.reachable for h in snap.hosts), [h.error for h in snap.hosts]
            assert all(
                any("fleetdeck-poll-work-test" in s.command for s in h.schedules)
                for h in snap.hosts
            )
        deltas = sum(poller.held(h.name).deltas for h in fleet.hosts)
    assert deltas == 6  # every host-poll counted was a delta (the path a resident poll takes)
    # one snapshot a host-poll (three before: the answer's, its warnings', the verdict's) and
    # no decoder made for an answer (one a host-poll before)
    assert snapshots.take() == 6
    assert decoders.take() == 0


def test_the_shared_decoder_still_names_a_non_finite_field_and_reads_bytes_as_json_does():
    assert loads(b'{"a": [1, 2.5, "x"]}') == {"a": [1, 2.5, "x"]}
    assert loads('{"a": 1}'.encode("utf-16")) == {"a": 1}
    assert loads(b"\xef\xbb\xbf{}") == {}
    with pytest.raises(NonFinite, match=r"holds -Infinity at gpus\[0\]\.t"):
        loads(b'{"gpus": [{"t": -Infinity}]}')
    with pytest.raises(NonFinite, match="holds NaN at the top level"):
        loads(b"NaN")
    for bad in ("\ufeff{}", b'{"a":', b""):
        with pytest.raises(json.JSONDecodeError) as ours:
            loads(bad)
        with pytest.raises(json.JSONDecodeError) as theirs:
            json.loads(bad)
        assert str(ours.value) == str(theirs.value)


def _answer(seq: int, schedules: list[dict], processes: list[dict]) -> dict:
    return {
        "seq": seq,
        "gpus": [],
        "disks": [],
        "runs": [],
        "seats": None,
        "schedules": schedules,
        "processes": processes,
        "memory": {"total_bytes": 1, "used_bytes": 0},
        "load1": 0.1,
        "time": 1.0,
    }


def _schedule(i: int) -> dict:
    return {
        "id": f"c-{i}",
        "kind": "crontab",
        "user": "u",
        "spec": "@daily",
        "command": f"run {i}",
        "source": "crontab",
    }


def _process(pid: int, cpu: object) -> dict:
    return {
        "pid": pid,
        "start": 7,
        "ppid": 1,
        "user": "u",
        "cpu_pct": cpu,
        "rss_bytes": 1 << 20,
        "gpu_mib": None,
        "why": ["cpu"],
        "command": f"worker {pid}",
    }


def test_a_section_sent_again_checks_only_the_items_that_changed_and_keeps_the_verdict(
    monkeypatch,
):
    schedules = [_schedule(i) for i in range(50)]
    procs = [_process(100 + i, 1.5) for i in range(10)]
    held, verdict = Held(), StrayVerdict()
    first = host_from_probe(
        "h", _answer(1, schedules, procs), 1.0, 1.0, held.take("h", _answer(1, schedules, procs))
    )
    judged = verdict([first], Acks())
    parsed = Counter(monkeypatch, validate, "_schedule")
    judging = Counter(monkeypatch, schedule_verdict, "_judged")
    # every section sent again (a whole answer), one process's CPU moved
    procs2 = [*procs[:3], _process(103, 2.5), *procs[4:]]
    checked = held.take("h", _answer(2, schedules, procs2))
    snap = host_from_probe("h", _answer(2, schedules, procs2), 1.0, 1.0, checked)
    assert parsed.take() == 0  # 50 before
    # the schedules taken as held; the processes (their figures move at nearly every poll)
    # checked again whenever they are sent
    assert held.checked - 60 == 10 and held.reused == 50
    assert snap.schedules is first.schedules  # the same tuple: the verdict is kept
    again = verdict([snap], Acks())
    assert judging.take() == 0  # judged again before (new schedule objects)
    assert again[0].schedules == judged[0].schedules
    assert [p.cpu_pct for p in snap.processes][3] == 2.5


def test_an_item_that_reads_equal_but_is_not_the_same_json_is_checked_again():
    # 1.5 and 2 are numbers; true == 1 in Python, and 0.0 == -0.0, but neither is the same text
    held = Held()
    for seq, cpu in enumerate([1, True, 1, 0.0, -0.0, 1.0], 1):
        whole = _answer(seq, [], [_process(100, cpu)])
        ours = host_from_probe("h", whole, 1.0, 1.0, held.take("h", whole))
        fresh = host_from_probe("h", whole, 1.0, 1.0)
        assert ours.to_json() == fresh.to_json(), cpu
        assert ours.warnings == fresh.warnings
        assert str(ours.processes[0].cpu_pct) == str(fresh.processes[0].cpu_pct)
    assert held.reused == 0  # each answer's item differs from the last one's text
    assert any(
        "cpu_pct" in w
        for w in host_from_probe("h", _answer(9, [], [_process(1, True)]), 1.0, 1.0).warnings
    )


def test_sections_sent_again_show_what_fresh_checks_show_over_random_answers():
    """200 answers, each sent whole through one `Held`: items added, removed, moved, changed, made
    hostile (a bool, a string, a control character, a float for a count) and made good again;
    every snapshot is the one a fresh check of the same answer makes, warnings included."""
    rng = random.Random(50)
    schedules = [_schedule(i) for i in range(8)]
    procs = [_process(100 + i, 1.0) for i in range(8)]
    held = Held()
    bad = [True, "x", None, 1e300, -0.0, 3, "\x1b[31m"]
    for seq in range(1, 201):
        for _ in range(rng.randrange(4)):
            pick = rng.randrange(6)
            if pick == 0 and procs:
                procs.pop(rng.randrange(len(procs)))
            elif pick == 1:
                procs.insert(rng.randrange(len(procs) + 1), _process(rng.randrange(1000), 0.5))
            elif pick == 2 and procs:
                p = dict(rng.choice(procs))
                p[rng.choice(["cpu_pct", "rss_bytes", "user", "pid", "why"])] = rng.choice(bad)
                procs[rng.randrange(len(procs))] = p
            elif pick == 3 and schedules:
                s = dict(rng.choice(schedules))
                s[rng.choice(["command", "spec", "kind", "id"])] = rng.choice(bad)
                schedules[rng.randrange(len(schedules))] = s
            elif pick == 4:
                schedules.insert(rng.randrange(len(schedules) + 1), _schedule(rng.randrange(99)))
            elif pick == 5 and len(schedules) > 1:
                i, j = rng.randrange(len(schedules)), rng.randrange(len(schedules))
                schedules[i], schedules[j] = schedules[j], schedules[i]
        whole = json.loads(json.dumps(_answer(seq, schedules, procs)))
        ours = host_from_probe("h", whole, 1.0, 1.0, held.take("h", whole))
        fresh = host_from_probe("h", json.loads(json.dumps(whole)), 1.0, 1.0)
        assert json.dumps(ours.to_json()) == json.dumps(fresh.to_json()), seq
        assert ours == fresh, seq
    assert held.reused > held.checked  # most items were taken as held


def test_the_verdict_judging_a_host_again_makes_no_schedule_through_its_fields(monkeypatch):
    def host(name: str, *ids: int):
        return host_from_probe(name, _answer(1, [_schedule(i) for i in ids], []), 1.0, 1.0)

    hosts = [host("a", *range(30)), host("b", 0, 1), host("c", 30)]
    made = Counter(monkeypatch, Schedule, "__init__")
    judged = StrayVerdict()(hosts, Acks(everywhere=frozenset({"c-1"})))
    # 33 schedules judged, none made through its fields (33 before, one per `replace`)
    assert made.take() == 0
    assert judged == mark_stray(hosts, Acks(everywhere=frozenset({"c-1"})))
    assert [s.reasons for s in judged[1].schedules] == [("unacknowledged", "duplicate"), ()]
    assert [s.stray for s in judged[2].schedules] == [True]
