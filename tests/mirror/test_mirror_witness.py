"""A verdict names its witnesses, and a check over nothing is no pass: mirror and verify on
real sshd hosts. A witness is a regular file whose size and sha256, each computed on its own
host from its own disk, matched on both sides; `verified`, `identical`, `copied` and
`replaced` need at least one, and say how many. An empty source, or one holding only empty
folders, is refused `no-witness` (exit 1), never called identical."""

from __future__ import annotations

import json
import shutil
import uuid

import pytest

from fleetdeck.backend.actions.audit import read_audit
from fleetdeck.backend.actions.mirror.main import mirror
from fleetdeck.backend.actions.mirror.verify import verify
from fleetdeck.cli.main import main

from support.trees import make_tree

pytestmark = pytest.mark.sshd


@pytest.fixture
def places(sshd_fleet):
    tag = uuid.uuid4().hex[:8]
    src = sshd_fleet.hosts["h1"].root / f"wi-{tag}" / "adapter"
    dst = sshd_fleet.hosts["h2"].root / f"wi-{tag}" / "adapter"
    src.mkdir(parents=True)
    yield src, dst
    shutil.rmtree(src.parent, ignore_errors=True)
    shutil.rmtree(dst.parent, ignore_errors=True)


def _empty_folders(root):
    for rel in ("a", "a/b/c", "empty"):
        (root / rel).mkdir(parents=True, exist_ok=True)


@pytest.mark.parametrize("layout", ["empty", "only empty folders"])
async def test_mirror_of_nothing_is_refused_not_verified(links, places, layout):
    src, dst = places
    if layout != "empty":
        _empty_folders(src)
    for dry in (True, False):
        rep = await mirror(links["h1"], str(src), links["h2"], str(dst), dry_run=dry)
        assert rep.result == "refused" and rep.reason == "no-witness", rep
        assert not rep.verified and not rep.ok and rep.witnesses == 0 and rep.verified_by is None
        assert "holds no file" in rep.error and "nothing was changed" in rep.error, rep.error
        assert not dst.exists() and not any(dst.parent.glob("*partial*"))
    log = [r for r in read_audit() if r["action"] == "mirror"]
    assert [r["result"] for r in log] == ["refused"]  # nothing started
    assert log[-1]["reason"] == "no-witness" and log[-1]["verified"] is False
    assert log[-1]["witnesses"] == 0
    # a destination that already holds the same empty folders is no "identical" either
    dst.mkdir(parents=True)
    if layout != "empty":
        _empty_folders(dst)
    rep = await mirror(links["h1"], str(src), links["h2"], str(dst))
    assert rep.result == "refused" and rep.reason == "no-witness" and not rep.ok, rep


@pytest.mark.parametrize("layout", ["empty", "only empty folders"])
async def test_verify_of_nothing_is_refused_not_identical(links, places, layout):
    src, dst = places
    dst.mkdir(parents=True)
    if layout != "empty":
        _empty_folders(src)
        _empty_folders(dst)
    rep = await verify(links["h1"], str(src), links["h2"], str(dst))
    assert rep.result == "refused" and rep.reason == "no-witness", rep
    assert not rep.verified and not rep.ok and rep.witnesses == 0
    assert "identical over nothing proves nothing" in rep.error, rep.error
    # against a destination that holds something, an empty source is a real difference
    (dst / "stray.bin").write_bytes(b"x")
    rep = await verify(links["h1"], str(src), links["h2"], str(dst))
    assert rep.result == "differs" and rep.reason == "differs" and not rep.ok, rep


def test_cli_no_witness_exits_1_with_the_witness_count(places, fleet_file, capsys):
    src, dst = places
    _empty_folders(src)
    shutil.copytree(src, dst)
    for cmd in ("mirror", "verify"):
        assert main([cmd, "--hosts", str(fleet_file), f"h1:{src}", f"h2:{dst}", "--json"]) == 1
        doc = json.loads(capsys.readouterr().out)
        assert doc["reason"] == "no-witness" and doc["verified"] is False
        assert doc["witnesses"] == 0 and doc["verified_by"] is None
        assert main([cmd, "--hosts", str(fleet_file), f"h1:{src}", f"h2:{dst}"]) == 1
        out, err = capsys.readouterr()
        assert "identical" not in out and "verified" not in out, out
        assert err.count("\n") == 1 and "holds no file, only 4 empty folders" in err, err


async def test_verdicts_name_their_witnesses(links, places):
    """copied, identical (mirror and verify) and replaced each give the count of files matched
    by sha256 on both hosts, in the report, its JSON and the audit record; differs gives none."""
    src, dst = places
    n = len(make_tree(src, big=1000))
    rep = await mirror(links["h1"], str(src), links["h2"], str(dst))
    assert rep.result == "copied" and rep.ok and rep.witnesses == n, rep
    assert rep.verified_by.startswith(f"{n} files, ") and "sha256 on both hosts" in rep.verified_by
    assert rep.to_json()["witnesses"] == n and rep.to_json()["verified_by"] == rep.verified_by
    assert [r for r in read_audit() if r["action"] == "mirror"][-1]["witnesses"] == n
    for again in (mirror, verify):
        rep = await again(links["h1"], str(src), links["h2"], str(dst))
        assert rep.result == "identical" and rep.ok and rep.witnesses == n, rep
    (dst / "adapter_config.json").write_bytes(b"{}")
    rep = await verify(links["h1"], str(src), links["h2"], str(dst))
    assert rep.result == "differs" and rep.witnesses == 0 and rep.verified_by is None
    rep = await mirror(links["h1"], str(src), links["h2"], str(dst), replace=True)
    assert rep.result == "replaced" and rep.witnesses == n, rep
    shutil.rmtree(rep.kept_as)


def test_cli_verdicts_name_their_witnesses(places, fleet_file, capsys):
    src, dst = places
    n = len(make_tree(src, big=1000))
    said = {}
    for name, cmd in (("copied", "mirror"), ("identical", "mirror"), ("verify", "verify")):
        assert main([cmd, "--hosts", str(fleet_file), f"h1:{src}", f"h2:{dst}"]) == 0
        said[name] = " ".join(capsys.readouterr().out.split())
    assert f"copied and verified: {n} files, " in said["copied"], said
    assert f"verified identical: {n} files, " in said["identical"], said
    assert f"verified identical: {n} files, " in said["verify"], said
    assert "each hashed by sha256 on both hosts and matched" in said["verify"]


async def test_a_source_of_one_empty_file_has_one_witness(links, places):
    """A zero-byte file is a witness: its name, its size and its (empty) sha256 are compared."""
    src, dst = places
    (src / "empty").write_bytes(b"")
    rep = await mirror(links["h1"], str(src), links["h2"], str(dst))
    assert rep.result == "copied" and rep.ok and rep.witnesses == 1, rep
    assert rep.verified_by == "1 file, 0 B, each hashed by sha256 on both hosts and matched"
    ver = await verify(links["h1"], str(src), links["h2"], str(dst))
    assert ver.result == "identical" and ver.witnesses == 1
