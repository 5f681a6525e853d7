"""Proposals in the state folder and `fleetdeck proposals`: kept mode 600 in a 700 folder,
bounded, expiring, a corrupt or hostile file reported and never acted on, a bad id refused
before it reaches the filesystem; confirming one judges it again on the host (a fact that moved
refuses it) and then goes through the action's own typed confirmation, audited with origin."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import signal
import stat
import subprocess
import sys
import threading
import time

import pytest

from fleetdeck.backend.actions import audit, proposals
from fleetdeck.backend.actions.proposal_plans import make_plan
from fleetdeck.backend.actions.proposals import ProposalError, ProposalStore, proposals_dir
from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.cli.mcp_propose import ProposalTools

from support.cli import local_fleet
from support.fullfs import full_tmpfs
from support.launch import base_values, write_corpus, write_run_toml
from support.purge import cli, make_run

ORIGIN = {"via": "mcp", "client": "test-agent", "client_version": "1"}


def _propose(hosts: str, paths: list[str], store: ProposalStore | None = None):
    planned = asyncio.run(make_plan(load_fleet(hosts), "purge", {"host": "local", "paths": paths}))
    assert planned.ok, planned.refused
    return (store or ProposalStore()).add(
        "purge",
        "local",
        {"host": "local", "paths": paths},
        "free the disk",
        ORIGIN,
        ok=True,
        plan=planned.plan,
        facts=planned.facts,
        summary=planned.summary,
    )


def _records(pid: str) -> list[dict]:
    return [r for r in audit.read_audit() if r.get("proposal") == pid]


@pytest.fixture
def fleet(tmp_path):
    hosts = local_fleet(tmp_path)
    run = make_run(tmp_path / "runs", "run-1")
    return hosts, run


def test_a_proposal_is_kept_private_and_whole(fleet):
    hosts, run = fleet
    p = _propose(hosts, [str(run / "checkpoints" / "checkpoint-25")])
    d = proposals_dir()
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    f = d / f"{p.id}.json"
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    assert [x.name for x in d.iterdir()] == [f.name]  # no temporary file left beside it
    assert ProposalStore().get(p.id) == p
    rec = _records(p.id)
    assert [r["result"] for r in rec] == ["proposed"] and rec[0]["origin"] == ORIGIN
    assert rec[0]["reason"] == "free the disk"


def test_confirm_through_the_cli_deletes_only_with_the_typed_path_and_audits_origin(fleet, capsys):
    hosts, run = fleet
    ck = run / "checkpoints" / "checkpoint-25"
    p = _propose(hosts, [str(ck)])
    # no terminal and nothing typed, or the path mistyped: nothing runs, and it still waits
    for wrong in ([], [f"--confirm={ck}/"], [f"--confirm={run}"]):
        rc, _, err = cli(capsys, "--hosts", hosts, "proposals", "confirm", p.id, *wrong)
        assert rc == 1 and ck.is_dir() and "[not-confirmed]" in err, err
        assert ProposalStore().get(p.id).state == "pending"
    assert not [r for r in audit.read_audit() if r["action"] == "purge"]
    q = p
    rc, out, err = cli(capsys, "--hosts", hosts, "proposals", "confirm", q.id, f"--confirm={ck}")
    assert rc == 0, err
    assert not ck.exists() and (run / "adapter").is_dir()
    assert ProposalStore().get(q.id).state == "done"
    rec = _records(q.id)
    assert [r["result"] for r in rec] == [
        "proposed",
        "not-confirmed",
        "not-confirmed",
        "not-confirmed",
        "confirmed",
        "done",
    ]
    assert all(r["origin"] == ORIGIN for r in rec)
    purged = [r for r in audit.read_audit() if r["action"] == "purge" and r["result"] == "done"]
    assert purged and purged[-1]["paths"][0]["path"] == str(ck)
    # the purge's own records name the proposal they carried out, and its origin
    assert purged[-1]["for_proposal"] == {"id": q.id, "origin": ORIGIN}
    # done is done: it cannot be carried out twice
    rc, _, err = cli(capsys, "--hosts", hosts, "proposals", "confirm", q.id, f"--confirm={ck}")
    assert rc == 1 and "[settled]" in err


def test_facts_that_moved_refuse_the_proposal(fleet, capsys):
    hosts, run = fleet
    ck = run / "checkpoints" / "checkpoint-25"
    p = _propose(hosts, [str(ck)])
    # the kept adapter changed after the proposal was made (same size, new bytes)
    w = run / "adapter" / "adapter_model.safetensors"
    w.write_bytes(w.read_bytes()[:-1] + b"\x01")
    rc, out, err = cli(
        capsys, "--hosts", hosts, "proposals", "confirm", p.id, f"--confirm={ck}", "--json"
    )
    assert rc == 1 and ck.is_dir()
    doc = json.loads(out)
    assert doc["code"] == "facts-changed" and "kept adapter file" in doc["message"]
    got = ProposalStore().get(p.id)
    assert got.state == "refused" and got.outcome["code"] == "facts-changed"
    assert [r["result"] for r in _records(p.id)] == ["proposed", "refused"]
    assert not [r for r in audit.read_audit() if r["action"] == "purge"]


def test_a_newer_checkpoint_refuses_the_proposal(fleet, capsys):
    hosts, run = fleet
    ck = run / "checkpoints" / "checkpoint-25"
    p = _propose(hosts, [str(ck)])
    newer = run / "checkpoints" / "checkpoint-75"
    newer.mkdir()
    (newer / "adapter_config.json").write_text("{}")
    rc, _, err = cli(capsys, "--hosts", hosts, "proposals", "confirm", p.id, f"--confirm={ck}")
    assert rc == 1 and ck.is_dir() and "[facts-changed]" in err, err


def test_reject_and_list(fleet, capsys):
    hosts, run = fleet
    p = _propose(hosts, [str(run / "checkpoints" / "checkpoint-25")])
    rc, out, _ = cli(capsys, "proposals", "--json")
    doc = json.loads(out)
    assert rc == 0 and [x["id"] for x in doc["proposals"]] == [p.id] and not doc["problems"]
    assert doc["proposals"][0]["state"] == "pending" and "plan" not in doc["proposals"][0]
    rc, out, _ = cli(capsys, "proposals", "reject", p.id)
    assert rc == 0 and ProposalStore().get(p.id).state == "rejected"
    rc, _, err = cli(capsys, "--hosts", hosts, "proposals", "confirm", p.id)
    assert rc == 1 and "rejected" in err
    assert (run / "checkpoints" / "checkpoint-25").is_dir()
    rc, out, _ = cli(capsys, "proposals", "show", p.id, "--json")
    assert rc == 0 and json.loads(out)["outcome"]["code"] == "rejected"


def test_two_people_cannot_both_move_one_proposal(fleet):
    hosts, run = fleet
    p = _propose(hosts, [str(run / "checkpoints" / "checkpoint-25")])
    ProposalStore().settle(p, "confirmed", "alice", code="confirmed", message="m")
    with pytest.raises(ProposalError) as e:  # bob's copy still says pending
        ProposalStore().settle(p, "rejected", "bob", code="rejected", message="m")
    assert e.value.code == "settled" and ProposalStore().get(p.id).state == "confirmed"
    assert [r["result"] for r in _records(p.id)] == ["proposed", "confirmed"]


CLAIM = """
import sys
from fleetdeck.backend.actions.proposals import ProposalStore
store = ProposalStore()
store.settle(store.get(sys.argv[1]), "confirmed", "alice", code="confirmed", message="m")
print("claimed", flush=True)
sys.stdin.read()
"""


def test_a_claim_whose_process_is_gone_reads_abandoned_and_is_never_carried_out(fleet, capsys):
    hosts, run = fleet
    ck = run / "checkpoints" / "checkpoint-25"
    p = _propose(hosts, [str(ck)])
    child = subprocess.Popen(
        [sys.executable, "-c", CLAIM, p.id], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert child.stdout.readline() == b"claimed\n"
        claimed = ProposalStore().get(p.id)
        assert claimed.outcome["claimant"]["pid"] == child.pid
        assert claimed.state_at(time.time()) == "confirmed"  # its claimant lives
    finally:
        child.kill()
        child.wait()
    assert ProposalStore().get(p.id).state_at(time.time()) == "abandoned"
    rc, out, _ = cli(capsys, "proposals", "--json")
    assert json.loads(out)["proposals"][0]["state"] == "abandoned"
    rc, _, err = cli(capsys, "--hosts", hosts, "proposals", "confirm", p.id, f"--confirm={ck}")
    assert rc == 1 and "[settled]" in err and "abandoned" in err and ck.is_dir()
    path = proposals_dir() / f"{p.id}.json"
    doc = json.loads(path.read_text())
    # a claim made on another machine cannot be judged from here: it stays confirmed
    doc["outcome"]["claimant"]["host"] = "elsewhere"
    path.write_text(json.dumps(doc))
    assert ProposalStore().get(p.id).state_at(time.time()) == "confirmed"
    # this machine, a live pid (this one) with its own start time, but an earlier boot: gone
    doc["outcome"]["claimant"].update(proposals.claimant(), boot="0" * 36)
    path.write_text(json.dumps(doc))
    assert ProposalStore().get(p.id).state_at(time.time()) == "abandoned"
    doc["outcome"]["claimant"] = proposals.claimant()  # this very process: alive
    path.write_text(json.dumps(doc))
    assert ProposalStore().get(p.id).state_at(time.time()) == "confirmed"
    for hostile in ("x", {"host": doc["outcome"]["claimant"]["host"], "pid": True, "start": 1}):
        doc["outcome"]["claimant"] = hostile  # nothing that names no process is taken as gone
        path.write_text(json.dumps(doc))
        assert ProposalStore().get(p.id).state_at(time.time()) == "confirmed"


def test_an_expired_proposal_is_never_claimed(fleet):
    hosts, run = fleet
    past = ProposalStore(clock=lambda: time.time() - proposals.TTL_S - 60)
    p = _propose(hosts, [str(run / "checkpoints" / "checkpoint-25")], past)
    with pytest.raises(ProposalError) as e:
        ProposalStore().settle(p, "confirmed", "alice", code="confirmed", message="m")
    assert e.value.code == "settled" and ProposalStore().get(p.id).state == "pending"


@pytest.mark.root
def test_a_full_disk_records_nothing_and_carries_nothing_out(fleet, tmp_path, monkeypatch, capsys):
    hosts, run = fleet
    ck = run / "checkpoints" / "checkpoint-25"
    made = []

    def prepare(mnt):
        monkeypatch.setenv("XDG_STATE_HOME", str(mnt))
        made.append(_propose(hosts, [str(ck)]))

    with full_tmpfs(tmp_path / "state-fs", prepare):
        (p,) = made
        before = sorted(os.listdir(proposals_dir()))
        doc = json.loads(
            asyncio.run(ProposalTools(load_fleet(hosts)).propose_purge("local", [str(ck)], "r"))
        )
        assert doc["proposal"] is None and doc["error"]["code"] == "unwritable", doc
        assert "No space left" in doc["error"]["message"], doc
        rc, _, err = cli(capsys, "--hosts", hosts, "proposals", "confirm", p.id, f"--confirm={ck}")
        assert rc == 1 and ck.is_dir() and (ck / "optimizer.pt").is_file(), err
        rc, _, err = cli(capsys, "proposals", "reject", p.id)
        assert rc == 1 and err.strip(), err
        # nothing half-written is left, and the proposal still waits as it was
        assert sorted(set(os.listdir(proposals_dir())) - {".lock"}) == before
        assert ProposalStore().get(p.id).state == "pending"
        # and the audit log says only what happened: no record of a change that was not saved
        assert [r["result"] for r in _records(p.id)] == ["proposed"]


def test_an_expired_proposal_is_refused(fleet, capsys):
    hosts, run = fleet
    ck = run / "checkpoints" / "checkpoint-25"
    past = ProposalStore(clock=lambda: time.time() - proposals.TTL_S - 60)
    p = _propose(hosts, [str(ck)], past)
    rc, out, _ = cli(capsys, "proposals", "--json")
    assert json.loads(out)["proposals"][0]["state"] == "expired"
    rc, _, err = cli(capsys, "--hosts", hosts, "proposals", "confirm", p.id, f"--confirm={ck}")
    assert rc == 1 and "[expired]" in err and ck.is_dir()
    assert ProposalStore().get(p.id).state == "expired"


def test_pending_proposals_are_bounded(fleet, monkeypatch):
    hosts, run = fleet
    monkeypatch.setattr(proposals, "MAX_PENDING", 2)
    ck = str(run / "checkpoints" / "checkpoint-25")
    _propose(hosts, [ck])
    _propose(hosts, [ck])
    with pytest.raises(ProposalError) as e:
        _propose(hosts, [ck])
    assert e.value.code == "too-many-proposals"
    assert len(ProposalStore().load()) == 2


def test_corrupt_and_hostile_files_are_reported_never_used(fleet, capsys):
    hosts, run = fleet
    ck = run / "checkpoints" / "checkpoint-25"
    good = _propose(hosts, [str(ck)])
    d = proposals_dir()
    bad = {
        "0123456789ab": b"{not json",
        "111111111111": json.dumps({"id": "111111111111", "kind": "purge"}).encode(),
        "222222222222": b"\xff\xfe\x00",
        "333333333333": json.dumps(
            {**json.loads((d / f"{good.id}.json").read_text()), "id": "333333333333", "kind": "rm"}
        ).encode(),
    }
    for pid, data in bad.items():
        (d / f"{pid}.json").write_bytes(data)
    os.mkfifo(d / "444444444444.json")  # a FIFO never hangs a reader
    (d / "555555555555.json").symlink_to(d / f"{good.id}.json")  # another id's file
    (d / "notes.txt").write_text("hello")
    rc, out, _ = cli(capsys, "proposals", "--json")
    doc = json.loads(out)
    assert rc == 0 and [p["id"] for p in doc["proposals"]] == [good.id]
    assert len(doc["problems"]) == 7, doc["problems"]
    for pid in [*bad, "444444444444", "555555555555"]:
        rc, out, err = cli(
            capsys, "--hosts", hosts, "proposals", "confirm", pid, f"--confirm={ck}", "--json"
        )
        assert rc == 1 and json.loads(out)["code"] == "corrupt", (pid, err)
    rc, _, err = cli(capsys, "proposals", "show", "../../etc/passwd")
    assert rc == 2 and "[bad-id]" in err
    rc, _, err = cli(capsys, "proposals", "show", "ffffffffffff")
    assert rc == 1 and "[not-found]" in err
    assert ck.is_dir()
    rc, out, _ = cli(capsys, "proposals")
    assert rc == 0 and "unreadable" in out


def _agent_proposes(hosts: str, tool: str, **kw) -> dict:
    doc = json.loads(asyncio.run(getattr(ProposalTools(load_fleet(hosts)), tool)(**kw)))
    assert doc["ok"] and doc["proposal"], doc.get("refused") or doc.get("error")
    return doc["proposal"]


def test_a_mirror_proposal_is_carried_out_with_its_id_typed(fleet, tmp_path, capsys):
    hosts, run = fleet
    dst = tmp_path / "copies" / "run-1-adapter"
    p = _agent_proposes(
        hosts, "propose_mirror", src=f"local:{run / 'adapter'}", dst=f"local:{dst}", reason="copy"
    )
    assert not dst.exists()  # proposing copied nothing
    rc, _, err = cli(capsys, "--hosts", hosts, "proposals", "confirm", p["id"], "--confirm=nope")
    assert rc == 1 and "[not-confirmed]" in err and not dst.exists()
    rc, out, err = cli(
        capsys, "--hosts", hosts, "proposals", "confirm", p["id"], f"--confirm={p['id']}", "--json"
    )
    assert rc == 0, err
    assert json.loads(out)["verified"] is True
    assert (dst / "adapter_model.safetensors").read_bytes() == (
        run / "adapter" / "adapter_model.safetensors"
    ).read_bytes()
    assert ProposalStore().get(p["id"]).state == "done"


def test_a_launch_proposal_whose_run_file_changed_is_refused(tmp_path, capsys):
    hosts = local_fleet(tmp_path)
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    toml = write_run_toml(
        tmp_path / "RUN.toml", **base_values(tmp_path / "runs", corpus, "run-new")
    )
    p = _agent_proposes(hosts, "propose_launch", host="local", run_toml=str(toml), reason="go")
    write_run_toml(toml, **base_values(tmp_path / "runs", corpus, "run-new", max_steps=4))
    rc, out, err = cli(
        capsys, "--hosts", hosts, "proposals", "confirm", p["id"], f"--confirm={p['id']}", "--json"
    )
    assert rc == 1 and json.loads(out)["code"] == "facts-changed", err
    assert "the RUN.toml file" in json.loads(out)["message"]
    assert not (tmp_path / "runs" / "run-new").exists()
    assert not [r for r in audit.read_audit() if r["action"] == "launch"]


def test_a_schedule_removal_proposal_stops_the_loop_once_its_id_is_typed(fleet, tmp_path, capsys):
    hosts, _ = fleet
    token = f"fdprop{os.getpid()}x"
    loop = subprocess.Popen(
        ["bash", "-c", f"while true; do sleep 1; done # {token}"],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
    )
    try:
        rc, out, _ = cli(capsys, "--hosts", hosts, "schedules", "--json")
        (sid,) = [s["id"] for s in json.loads(out)["schedules"] if token in s["command"]]
        p = _agent_proposes(
            hosts, "propose_schedule_removal", host="local", schedule_id=sid, reason="stray"
        )
        assert loop.poll() is None  # proposing stopped nothing
        rc, _, err = cli(capsys, "--hosts", hosts, "proposals", "confirm", p["id"], "--confirm=x")
        assert rc == 1 and "[not-confirmed]" in err and loop.poll() is None
        rc, _, err = cli(
            capsys, "--hosts", hosts, "proposals", "confirm", p["id"], f"--confirm={sid}"
        )
        assert rc == 0, err
        loop.wait(timeout=60)
        assert ProposalStore().get(p["id"]).state == "done"
    finally:
        if loop.poll() is None:
            os.killpg(loop.pid, signal.SIGKILL)
            loop.wait(timeout=30)


def _read_all(fd: int, sink: list[bytes]) -> None:
    while True:
        try:
            b = os.read(fd, 4096)
        except OSError:
            return
        if not b:
            return
        sink.append(b)


def test_on_a_terminal_the_plan_is_shown_and_the_path_typed(fleet, tmp_path):
    hosts, run = fleet
    ck = run / "checkpoints" / "checkpoint-25"
    p = _propose(hosts, [str(ck)])
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetdeck.cli.main", "--hosts", hosts, "proposals", "confirm"]
        + [p.id],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=slave,
    )
    os.close(slave)
    said: list[bytes] = []
    reader = threading.Thread(target=_read_all, args=(master, said), daemon=True)
    reader.start()
    os.write(master, f"{ck}\n".encode())
    out, _ = proc.communicate(timeout=120)
    reader.join(timeout=30)
    os.close(master)
    terminal = b"".join(said).decode(errors="replace")
    assert proc.returncode == 0, terminal
    assert "purge plan on local" in terminal and "free the disk" in terminal
    assert terminal.index("purge plan on local") < terminal.index("Type the path to delete")
    assert not ck.exists() and ProposalStore().get(p.id).state == "done"
