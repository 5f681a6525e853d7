"""Purge over real loopback sshd hosts: the main flows, hostile names, symlinks, swaps between
check and execute, confirmations, the CLI's exit codes and JSON, and the audit log."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from fleetdeck.backend.actions.purge.confirm import confirmations_match
from fleetdeck.backend.actions.purge.main import execute_purge, gather_purge
from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.link.ssh import HostLink

from support.purge import HOST, _prompted_purge, cli, make_run, purge_audit, sha, uniq
from support.weights import safetensors

pytestmark = pytest.mark.sshd


CKPT_BYTES = len(safetensors(bytes(2048))) + 9 + 8192  # weights, adapter_config.json, optimizer.pt


@pytest.fixture
def h1(sshd_fleet, tmp_path):
    """(fleet file, host h1 of the shared loopback fleet); purge roots default to h1's runs."""
    return sshd_fleet.write_fleet(tmp_path / "hosts.toml", names=[HOST]), sshd_fleet.hosts[HOST]


def test_purge_deletes_and_verifies_keepers(h1, capsys):
    fleet, host = h1
    run = make_run(host.runs, uniq())
    p25, p50 = (str(run / "checkpoints" / f"checkpoint-{s}") for s in (25, 50))
    kept = run / "adapter" / "adapter_model.safetensors"
    before = sha(kept)
    rc, out, err = cli(
        capsys,
        "--hosts",
        str(fleet),
        "purge",
        HOST,
        p25,
        p50,
        "--confirm",
        p25,
        "--confirm",
        p50,
        "--json",
    )
    doc = json.loads(out)
    assert rc == 0, err
    assert doc["deleted"] is True and doc["dry_run"] is False and doc["host"] == HOST
    assert [p["path"] for p in doc["paths"]] == [p25, p50]
    assert all(
        p["deleted"] and p["refused"] == [] and p["bytes"] == CKPT_BYTES for p in doc["paths"]
    )
    assert not Path(p25).exists() and not Path(p50).exists()
    k = {x["path"]: x for x in doc["keepers"]}[str(kept)]
    assert k["sha256_before"] == k["sha256_after"] == before == sha(kept)
    assert isinstance(doc["free_bytes_before"], int) and isinstance(doc["free_bytes_after"], int)
    assert doc["expected_bytes"] >= 2 * CKPT_BYTES
    results = [r["result"] for r in purge_audit()]
    assert results == ["started", "done"]
    done = purge_audit()[-1]
    assert done["host"] == HOST and done["bytes"] == 2 * CKPT_BYTES
    assert done["confirmation"]["via"] == "--confirm"
    assert all(c["matched"] for c in done["confirmation"]["paths"])
    assert done["free_bytes_before"] is not None and done["free_bytes_after"] is not None
    assert [x["sha256_after"] for x in done["keepers"] if x["path"] == str(kept)] == [before]


HOSTILE = [
    "sp ace 'single' \"double\"",
    "x$(touch pwned-purge)y`touch pwned-purge2`",
    "-leading-dash",
    "new\nline",
    "semi;colon|pipe&amp *star ?q [b]",
    "tab\tand\x1bescape",
    os.fsdecode(b"not-utf8-\xff\xfe"),
    "back\\slash-n\\n",
]


def test_hostile_names_over_ssh(h1, capsys, tmp_path):
    fleet, host = h1
    base = host.runs / uniq("hostile")
    paths, kept = [], []
    for name in HOSTILE:
        run = make_run(base, name, steps=(25,))
        paths.append(str(run / "checkpoints" / "checkpoint-25"))
        kept.append(run / "adapter" / "adapter_model.safetensors")
    argv = ["--hosts", str(fleet), "purge", HOST, *paths, "--json"]
    for p in paths:
        argv.append(f"--confirm={p}")
    rc, out, err = cli(capsys, *argv)
    assert out, err
    doc = json.loads(out)
    assert rc == 0, err
    assert [p["path"] for p in doc["paths"]] == paths
    assert all(not Path(p).exists() for p in paths)
    assert all(k.exists() for k in kept)
    assert all(k["verified"] for k in doc["keepers"]) and len(doc["keepers"]) >= len(HOSTILE)
    for where in (Path.home(), Path.cwd(), host.root, tmp_path):
        assert not (where / "pwned-purge").exists() and not (where / "pwned-purge2").exists()
    # the audit log keeps every name exactly and `fleetdeck audit` shows each one escaped
    done = purge_audit()[-1]
    assert done["result"] == "done" and [p["path"] for p in done["paths"]] == paths
    rc, out, err = cli(capsys, "audit", "--details")
    assert rc == 0 and "Traceback" not in err
    assert "not-utf8-\\xff\\xfe" in out and "new\\nline" in out and "back\\\\slash-n\\\\n" in out
    # a path argument that itself starts with '-' is taken literally, and refused as relative
    rc, out, err = cli(
        capsys, "--hosts", str(fleet), "purge", HOST, "--json", "--confirm=-rf", "--", "-rf"
    )
    doc = json.loads(out)
    assert rc == 1 and doc["paths"][0]["refused"] == ["not-absolute"]


def test_newline_path_is_shown_escaped(h1, capsys):
    fleet, host = h1
    run = make_run(host.runs, uniq("nl\nfake-line"), steps=(25,), adapter=False)
    p = str(run / "checkpoints" / "checkpoint-25")
    rc, out, err = cli(capsys, "--hosts", str(fleet), "purge", HOST, p, "--dry-run")
    assert rc == 1
    assert "nl\\nfake-line" in out.replace("\n", "") or "nl\\nfake-line" in out
    assert "nl\nfake-line" not in out
    assert Path(p).exists()


def test_path_that_is_a_symlink_is_refused(h1, capsys):
    fleet, host = h1
    run = make_run(host.runs, uniq())
    target = run / "checkpoints" / "checkpoint-25"
    link = run / "checkpoints" / "checkpoint-99"
    link.symlink_to(target)
    rc, out, _ = cli(
        capsys, "--hosts", str(fleet), "purge", HOST, str(link), "--confirm", str(link), "--json"
    )
    doc = json.loads(out)
    assert rc == 1 and doc["deleted"] is False
    assert doc["paths"][0]["refused"] == ["symlink"]
    assert "symlink" in doc["paths"][0]["refusals"][0]["message"]
    assert link.is_symlink() and (target / "optimizer.pt").exists()


def test_parent_that_is_a_symlink_is_refused(h1, capsys):
    fleet, host = h1
    run = make_run(host.runs, uniq())
    alias = host.runs / uniq("alias")
    alias.symlink_to(run)
    p = str(alias / "checkpoints" / "checkpoint-25")
    rc, out, _ = cli(capsys, "--hosts", str(fleet), "purge", HOST, p, "--confirm", p, "--json")
    doc = json.loads(out)
    assert rc == 1 and doc["paths"][0]["refused"] == ["symlink"]
    assert (run / "checkpoints" / "checkpoint-25" / "optimizer.pt").exists()


async def _gather(fleet: Path, paths: list[str]):
    host_cfg = load_fleet(str(fleet)).host(HOST)
    link = HostLink(host_cfg)
    return link, host_cfg, await gather_purge(link, paths)


@pytest.mark.parametrize("swap", ["symlink", "new-directory"])
async def test_swap_between_check_and_execute_deletes_nothing(h1, swap):
    fleet, host = h1
    run = make_run(host.runs, uniq())
    p25, p50 = (str(run / "checkpoints" / f"checkpoint-{s}") for s in (25, 50))
    link, host_cfg, plan = await _gather(fleet, [p25, p50])
    try:
        assert plan.ok, [r for p in plan.paths for r in p.refusals]
        moved = run / "elsewhere"
        os.rename(p25, moved)
        if swap == "symlink":
            os.symlink(moved, p25)
        else:
            os.mkdir(p25)
            (Path(p25) / "decoy").write_bytes(b"x")
        typed = {p25: p25, p50: p50}
        assert confirmations_match(plan, typed)
        report = await execute_purge(link, plan, typed, via="test")
    finally:
        await link.close()
    doc = report.to_json()
    assert report.deleted is False and not report.ok
    assert "changed-since-check" in doc["paths"][0]["refused"]
    assert all(not p["deleted"] for p in doc["paths"])
    assert (moved / "optimizer.pt").exists() and (Path(p50) / "optimizer.pt").exists()
    assert os.path.lexists(p25)
    assert [r["result"] for r in purge_audit()] == ["started", "refused"]


def test_one_bad_path_among_good_ones_deletes_nothing(h1, capsys):
    fleet, host = h1
    run = make_run(host.runs, uniq())
    good = [str(run / "checkpoints" / f"checkpoint-{s}") for s in (25, 50)]
    bad = str(run / "checkpoints" / "checkpoint-75")
    argv = ["--hosts", str(fleet), "purge", HOST, good[0], bad, good[1], "--json"]
    for p in (*good, bad):
        argv += ["--confirm", p]
    rc, out, err = cli(capsys, *argv)
    doc = json.loads(out)
    assert rc == 1 and doc["deleted"] is False
    assert [p["refused"] for p in doc["paths"]] == [[], ["not-found"], []]
    assert all(Path(p).is_dir() for p in good)
    assert "nothing was deleted" in err and err.count("\n") == 1
    assert [r["result"] for r in purge_audit()] == ["refused"]


def test_wrong_or_missing_confirmation_deletes_nothing(h1, capsys):
    fleet, host = h1
    run = make_run(host.runs, uniq())
    p = str(run / "checkpoints" / "checkpoint-25")
    for confirm in ([p + "/"], [p.upper()], []):
        argv = ["--hosts", str(fleet), "purge", HOST, p, "--json"] + [
            f"--confirm={c}" for c in confirm
        ]
        rc, out, _ = cli(capsys, *argv)
        doc = json.loads(out)
        assert rc == 1 and doc["paths"][0]["refused"] == ["not-confirmed"]
        assert doc["paths"][0]["refusals"][0]["message"]
        assert Path(p).is_dir()
    records = purge_audit()
    assert [r["result"] for r in records] == ["refused"] * 3
    assert records[0]["confirmation"]["paths"][0]["matched"] is False


def test_dry_run_and_exit_codes(h1, capsys):
    fleet, host = h1
    run = make_run(host.runs, uniq())
    p = str(run / "checkpoints" / "checkpoint-25")
    rc, out, _ = cli(capsys, "--hosts", str(fleet), "purge", HOST, p, "--dry-run", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["dry_run"] is True and doc["deleted"] is False
    assert doc["paths"][0]["refused"] == [] and doc["paths"][0]["bytes"] == CKPT_BYTES
    assert doc["keepers"][0]["sha256_before"] and doc["keepers"][0]["sha256_after"] is None
    assert Path(p).is_dir()
    rc, out, _ = cli(capsys, "--hosts", str(fleet), "purge", HOST, str(run), "--dry-run", "--json")
    assert rc == 1 and "holds-final-adapter" in json.loads(out)["paths"][0]["refused"]
    rc, out, err = cli(capsys, "--hosts", str(fleet), "purge", "nosuchhost", p)
    assert rc == 2 and out == "" and "nosuchhost" in err and "Traceback" not in err
    rc, out, _ = cli(capsys, "--hosts", str(fleet), "purge", HOST, p, "--dry-run")
    assert rc == 0 and "checkpoint-25" in out and "dry run" in out
    assert [r["result"] for r in purge_audit()] == ["dry-run", "dry-run", "dry-run"]


def test_terminal_prompt_needs_the_path_typed_exactly(h1):
    fleet, host = h1
    run = make_run(host.runs, uniq("prompt 'q'"))
    p = str(run / "checkpoints" / "checkpoint-25")
    rc, _ = _prompted_purge(fleet, p, b"yes\n")
    assert rc == 1 and Path(p).is_dir()
    rc, out = _prompted_purge(fleet, p, p.encode() + b"\n")
    assert rc == 0 and not Path(p).exists() and "verified" in out
    assert [r["confirmation"]["via"] for r in purge_audit()] == ["prompt", "prompt", "prompt"]


def test_unreachable_host_is_one_sentence(spare_fleet, tmp_path, capsys):
    dead = f"dead-{uuid.uuid4().hex[:8]}"
    spare_fleet.add(dead)
    fleet = spare_fleet.write_fleet(tmp_path / "hosts.toml")
    spare_fleet.kill(dead)
    rc, out, err = cli(capsys, "--hosts", str(fleet), "purge", dead, "/x/y", "--confirm", "/x/y")
    assert rc == 1 and out == "" and err.startswith(f"fleetdeck: purge on {dead} failed")
    assert "Traceback" not in err


async def test_plan_pins_every_component_and_lists_keepers(h1):
    fleet, host = h1
    run = make_run(host.runs, uniq())
    paths = [str(run / "checkpoints" / f"checkpoint-{s}") for s in (25, 50)]
    link, _, plan = await _gather(fleet, paths)
    await link.close()
    assert plan.ok and [p.path for p in plan.paths] == paths
    assert all(len(p.pins) == len(Path(p.path).parts) for p in plan.paths)
    assert {k.path for k in plan.keepers} == {
        str(run / "adapter" / n) for n in ("adapter_model.safetensors", "adapter_config.json")
    }
