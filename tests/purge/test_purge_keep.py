"""purge HOST RUN --keep-newest N over a real loopback sshd host: a run without a final adapter
frees its older checkpoints and keeps its newest N, hashed before and after; real processes
hold files open, a real writer changes a kept checkpoint between plan and execute, a hard link
ties a kept file to a purged one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetdeck.backend.actions.purge.main import execute_purge, gather_keep_newest
from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.link.ssh import HostLink

from support.purge import cli, make_run, purge_audit, sha, uniq
from support.weights import safetensors, write_sparse, write_torn

pytestmark = pytest.mark.sshd

HOST = "h1"
HOSTILE = "run -rf $(touch pwned) 'q' \"d\""


@pytest.fixture
def h1(sshd_fleet, tmp_path):
    return sshd_fleet.write_fleet(tmp_path / "hosts.toml", names=[HOST]), sshd_fleet.hosts[HOST]


def ck(run: Path, step: int) -> Path:
    return run / "checkpoints" / f"checkpoint-{step}"


def ckpts(run: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in (run / "checkpoints").iterdir())


def tree_hashes(run: Path, steps) -> dict[str, str]:
    out = {}
    for s in steps:
        for p in sorted((run / "checkpoints" / f"checkpoint-{s}").rglob("*")):
            if p.is_file():
                out[str(p)] = sha(p)
    return out


def test_keep_newest_frees_a_run_without_an_adapter(h1, capsys):
    fleet, host = h1
    run = make_run(host.runs, uniq(HOSTILE), steps=(25, 50, 75, 100), adapter=False)
    before = tree_hashes(run, (75, 100))
    # a plain purge is refused: no final adapter; the sentence names the way forward
    p25 = str(run / "checkpoints" / "checkpoint-25")
    rc, out, err = cli(
        capsys, "purge", "--hosts", str(fleet), HOST, p25, "--confirm", p25, "--json"
    )
    assert rc == 1 and json.loads(out)["paths"][0]["refused"] == ["no-keeper"]
    assert "--keep-newest" in json.loads(out)["paths"][0]["refusals"][0]["message"]

    rc, out, err = cli(
        capsys,
        "purge",
        "--hosts",
        str(fleet),
        HOST,
        str(run),
        "--keep-newest",
        "2",
        "--dry-run",
        "--json",
    )
    doc = json.loads(out)
    assert rc == 0 and doc["ok"] and ckpts(run) == [25, 50, 75, 100]
    assert [p["path"] for p in doc["paths"]] == [
        str(run / "checkpoints" / f"checkpoint-{s}") for s in (25, 50)
    ]
    assert doc["keep_newest"]["kept"] == [
        str(run / "checkpoints" / f"checkpoint-{s}") for s in (75, 100)
    ]
    assert {k["path"] for k in doc["keepers"]} == set(before)

    rc, out, err = cli(
        capsys,
        "purge",
        "--hosts",
        str(fleet),
        HOST,
        str(run),
        "--keep-newest",
        "2",
        "--confirm",
        str(run),
        "--json",
    )
    doc = json.loads(out)
    assert rc == 0, err
    assert doc["deleted"] and doc["verified"] and ckpts(run) == [75, 100]
    assert {k["path"]: k["sha256_after"] for k in doc["keepers"]} == before
    assert all(k["verified"] for k in doc["keepers"])
    assert tree_hashes(run, (75, 100)) == before
    assert not Path("pwned").exists() and not (run / "pwned").exists()
    rec = purge_audit()[-1]
    assert rec["result"] == "done" and rec["keep_newest"]["n"] == 2
    assert rec["confirmation"]["paths"] == [{"path": str(run), "typed": str(run), "matched": True}]


def test_keep_newest_needs_the_run_typed_back(h1, capsys):
    fleet, host = h1
    run = make_run(host.runs, uniq(HOSTILE), steps=(25, 50, 75), adapter=False)
    newest = str(run / "checkpoints" / "checkpoint-75")
    for confirm in ([], ["--confirm", newest], ["--confirm", str(run) + "/"], ["--confirm", "yes"]):
        rc, out, err = cli(
            capsys,
            "purge",
            "--hosts",
            str(fleet),
            HOST,
            str(run),
            "--keep-newest",
            "1",
            *confirm,
            "--json",
        )
        assert rc == 1 and ckpts(run) == [25, 50, 75], confirm
        assert {c for p in json.loads(out)["paths"] for c in p["refused"]} == {"not-confirmed"}
    assert [r["result"] for r in purge_audit()] == ["refused"] * 4
    assert "did not match" in err and "Traceback" not in err


def test_a_rule_that_frees_nothing_is_refused_with_a_sentence(h1, capsys):
    fleet, host = h1
    run = make_run(host.runs, uniq(), steps=(25, 50), adapter=False)
    rc, out, err = cli(
        capsys,
        "purge",
        "--hosts",
        str(fleet),
        HOST,
        str(run),
        "--keep-newest",
        "2",
        "--confirm",
        str(run),
        "--json",
    )
    doc = json.loads(out)
    assert (
        rc == 1
        and not doc["deleted"]
        and doc["keep_newest"]["refusal"]["code"] == "nothing-to-free"
    )
    assert "nothing-to-free" in err and "2 complete checkpoint(s)" in err and ckpts(run) == [25, 50]
    rc, _, err = cli(capsys, "purge", "--hosts", str(fleet), HOST, str(run), "--keep-newest", "0")
    assert rc == 2 and "1 or more" in err
    empty = host.runs / uniq()
    empty.mkdir()
    rc, out, err = cli(
        capsys,
        "purge",
        "--hosts",
        str(fleet),
        HOST,
        str(empty),
        "--keep-newest",
        "1",
        "--dry-run",
        "--json",
    )
    assert rc == 1 and json.loads(out)["keep_newest"]["refusal"]["code"] == "no-checkpoints"


def test_a_live_run_keeps_what_is_in_use_and_what_is_being_written(h1, capsys):
    """A process holding a file of an older checkpoint open refuses the purge (`in-use`); a
    newest checkpoint written between the plan and the execution stops it
    (`changed-since-check`): nothing is deleted in either case."""
    fleet, host = h1
    run = make_run(host.runs, uniq(HOSTILE), steps=(25, 50, 75), adapter=False)
    held = run / "checkpoints" / "checkpoint-25" / "optimizer.pt"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys,time; f=open(sys.argv[1],'rb'); print('ready', flush=True); time.sleep(60)",
            str(held),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout.readline().strip() == b"ready"
        rc, out, err = cli(
            capsys,
            "purge",
            "--hosts",
            str(fleet),
            HOST,
            str(run),
            "--keep-newest",
            "1",
            "--confirm",
            str(run),
            "--json",
        )
        doc = json.loads(out)
        assert rc == 1 and ckpts(run) == [25, 50, 75]
        assert doc["paths"][0]["refused"] == ["in-use"] and doc["paths"][1]["refused"] == []
    finally:
        proc.kill()
        proc.wait()

    async def go():
        cfg = load_fleet(str(fleet)).host(HOST)
        link = HostLink(cfg)
        try:
            plan = await gather_keep_newest(link, str(run), 1)
            assert plan.ok and len(plan.keepers) == 3  # weights, config, optimizer
            # the trainer saves into the newest checkpoint after the plan was made
            time.sleep(0.01)
            with open(run / "checkpoints" / "checkpoint-75" / "optimizer.pt", "ab") as f:
                f.write(b"more state")
            return await execute_purge(link, plan, {str(run): str(run)}, via="test")
        finally:
            await link.close()

    import asyncio

    rep = asyncio.run(go())
    assert not rep.deleted and ckpts(run) == [25, 50, 75]
    assert {c for p in rep.paths for c in p.refused} == {"changed-since-check"}


def test_a_kept_file_hard_linked_into_a_purged_checkpoint_is_no_keeper(h1, capsys):
    fleet, host = h1
    run = make_run(host.runs, uniq(), steps=(25, 50), adapter=False)
    os.link(
        run / "checkpoints" / "checkpoint-50" / "adapter_model.safetensors",
        run / "checkpoints" / "checkpoint-25" / "shared.safetensors",
    )
    rc, out, err = cli(
        capsys,
        "purge",
        "--hosts",
        str(fleet),
        HOST,
        str(run),
        "--keep-newest",
        "1",
        "--confirm",
        str(run),
        "--json",
    )
    doc = json.loads(out)
    assert rc == 1 and doc["paths"][0]["refused"] == ["no-keeper"] and ckpts(run) == [25, 50]
    assert "keeps its newest checkpoints" in doc["paths"][0]["refusals"][0]["message"]


def test_terminal_prompt_needs_the_run_typed_exactly(h1):
    from support.purge import _prompted_purge

    fleet, host = h1
    run = make_run(host.runs, uniq("prompt 'q' $(x)"), steps=(25, 50), adapter=False)
    rc, _ = _prompted_purge(fleet, str(run), b"yes\n", "--keep-newest", "1")
    assert rc == 1 and ckpts(run) == [25, 50]
    rc, out = _prompted_purge(fleet, str(run), str(run).encode() + b"\n", "--keep-newest", "1")
    assert rc == 0 and ckpts(run) == [50] and "verified" in out
    assert [r["confirmation"]["via"] for r in purge_audit()] == ["prompt", "prompt", "prompt"]


def test_the_run_is_typed_back_as_it_was_given(h1, capsys):
    """The confirmation is the run as the operator wrote it (here with a trailing slash), as a
    path is; the host's resolved form travels separately."""
    fleet, host = h1
    run = make_run(host.runs, uniq(HOSTILE), steps=(25, 50), adapter=False)
    given = str(run) + "/"
    rc, out, err = cli(
        capsys,
        "purge",
        "--hosts",
        str(fleet),
        HOST,
        given,
        "--keep-newest",
        "1",
        "--confirm",
        given,
        "--json",
    )
    doc = json.loads(out)
    assert rc == 0 and ckpts(run) == [50], err
    assert doc["keep_newest"]["run"] == given and doc["keep_newest"]["resolved"] == str(run)


def _full_model_naming_its_config(c: Path) -> None:
    """A full-model checkpoint whose index names config.json as its only shard: no weight byte."""
    for p in c.iterdir():
        p.unlink()
    (c / "config.json").write_text("{}")
    (c / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": {"lm_head.weight": "config.json"}})
    )


def test_keep_newest_keeps_only_checkpoints_whole_by_their_bytes(h1, capsys):
    """A save torn in place, a preallocated one never written, and a full model whose index names
    its config: none is a keeper. Each is named in the plan with why, and left where it is; the
    whole ones are kept and only the older whole one goes."""
    fleet, host = h1
    run = make_run(host.runs, uniq(HOSTILE), steps=(25, 50, 75, 100, 125, 150), adapter=False)
    whole = write_torn(ck(run, 100) / "adapter_model.safetensors", 100)
    write_sparse(ck(run, 125) / "adapter_model.safetensors")
    _full_model_naming_its_config(ck(run, 150))
    rc, out, err = cli(
        capsys,
        "purge",
        "--hosts",
        str(fleet),
        HOST,
        str(run),
        "--keep-newest",
        "2",
        "--dry-run",
        "--json",
    )
    doc = json.loads(out)
    assert rc == 0, err
    assert doc["keep_newest"]["kept"] == [str(ck(run, 50)), str(ck(run, 75))]
    assert [p["path"] for p in doc["paths"]] == [str(ck(run, 25))]
    why = {i["path"]: i["why"] for i in doc["keep_newest"]["incomplete"]}
    assert (
        f"torn: adapter_model.safetensors ends at 100 of {whole:,} bytes" in why[str(ck(run, 100))]
    )
    assert "sparse: adapter_model.safetensors has a hole" in why[str(ck(run, 125))]
    assert "names config.json as a shard, which holds no weights" in why[str(ck(run, 150))]

    # executed: the torn, sparse and weightless ones are where they were, the whole ones kept
    run_s = str(run)
    rc, out, err = cli(
        capsys,
        "purge",
        "--hosts",
        str(fleet),
        HOST,
        run_s,
        "--keep-newest",
        "2",
        "--confirm",
        run_s,
    )
    assert rc == 0, err
    assert ckpts(run) == [50, 75, 100, 125, 150]


def test_two_checkpoints_of_one_step_are_refused_ambiguous_step(h1, capsys):
    fleet, host = h1
    run = make_run(host.runs, uniq(HOSTILE), steps=(100, 200, 300), adapter=False)
    twin = run / "checkpoint-300"
    twin.mkdir()
    (twin / "adapter_model.safetensors").write_bytes(safetensors(os.urandom(256)))
    (twin / "adapter_config.json").write_text("{}")
    rc, out, err = cli(
        capsys,
        "purge",
        "--hosts",
        str(fleet),
        HOST,
        str(run),
        "--keep-newest",
        "1",
        "--dry-run",
        "--json",
    )
    doc = json.loads(out)
    assert rc != 0
    k = doc["keep_newest"]
    assert k["refusal"]["code"] == "ambiguous-step"
    assert str(twin) in k["refusal"]["message"] and str(ck(run, 300)) in k["refusal"]["message"]
    assert k["ambiguous"] == [{"step": 300, "paths": sorted([str(ck(run, 300)), str(twin)])}]
    assert ckpts(run) == [100, 200, 300] and twin.is_dir()
