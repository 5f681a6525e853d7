"""The work of one host-poll on the controller, counted (never timed): a reachable host's
snapshot is made once (its answer's figures read before it, the stray verdict's schedules put in
without going through its fields again), and the answer is decoded by one shared strict decoder,
not a new one each time. Real resident probes over real loopback sshd hosts."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.link.channel import NonFinite, loads
from fleetdeck.backend.fleet.models import HostSnapshot
from fleetdeck.backend.fleet.poller import Poller

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
