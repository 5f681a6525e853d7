"""mirror and verify over real loopback sshd hosts: real files, real names, real failures."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from fleetdeck.backend.actions.audit import read_audit
from fleetdeck.backend.actions.mirror.main import mirror, parse_endpoint
from fleetdeck.backend.actions.mirror.verify import verify
from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.cli.main import main

from support.trees import make_tree, read_tree

pytestmark = pytest.mark.sshd


def leftovers(parent: Path) -> list[str]:
    """Partial folders still lying in a destination's parent."""
    return [n for n in os.listdir(parent) if "fleetdeck-partial" in n] if parent.exists() else []


@pytest.fixture
def fleet(fleet_file):
    return load_fleet(str(fleet_file))


@pytest.fixture
async def links(fleet):
    made = {n: HostLink(fleet.host(n)) for n in ("h1", "h2")}
    yield made
    for link in made.values():
        await link.close()


@pytest.fixture
def dirs(sshd_fleet):
    """A fresh source folder on h1 (filled) and a destination path on h2 (absent)."""
    tag = uuid.uuid4().hex[:8]
    src = sshd_fleet.hosts["h1"].root / f"m-{tag}" / "run 1 $(x)" / "adapter"
    src.mkdir(parents=True)
    files = make_tree(src)
    dst = sshd_fleet.hosts["h2"].root / f"m-{tag}" / "run-1" / "adapter"
    yield src, dst, files
    shutil.rmtree(src.parent.parent, ignore_errors=True)
    shutil.rmtree(dst.parent.parent, ignore_errors=True)


def test_parse_endpoint():
    assert parse_endpoint("h1:/p") == ("h1", "/p")
    assert parse_endpoint("gx-10.a_b:~/runs/x:y z") == ("gx-10.a_b", "~/runs/x:y z")
    assert parse_endpoint("h:-rf\n") == ("h", "-rf\n")
    for bad in ("h1", "h1:", "bad host:/p", ":/p", "h$1:/p"):
        with pytest.raises(ValueError):
            parse_endpoint(bad)


async def test_clean_mirror_is_verified_and_rerun_is_a_noop(links, dirs):
    src, dst, files = dirs
    seen = []
    rep = await mirror(
        links["h1"], str(src), links["h2"], str(dst), progress=lambda d, t: seen.append((d, t))
    )
    assert rep.result == "copied", rep.error
    assert rep.verified and rep.ok
    assert read_tree(dst) == files
    assert (dst / "empty-dir").is_dir()
    assert rep.bytes_src == rep.bytes_dst == sum(len(v) for v in files.values())
    assert {f.path for f in rep.files} == set(files)
    for f in rep.files:
        assert f.status == "copied" and f.sha256_src == f.sha256_dst and f.sha256_src
    assert seen and seen[-1][0] == seen[-1][1] == rep.bytes_src
    assert leftovers(dst.parent) == []
    assert not (src.parent / "pwned").exists() and not Path("pwned").exists()
    log = [r for r in read_audit() if r["action"] == "mirror"]
    assert [r["result"] for r in log] == ["started", "done"]
    assert log[-1]["bytes"] == rep.bytes_src and log[-1]["verified"] is True

    again = await mirror(links["h1"], str(src), links["h2"], str(dst))
    assert again.result == "identical" and again.verified and again.bytes_copied == 0
    assert all(f.status == "identical" for f in again.files)
    assert [r["result"] for r in read_audit() if r["action"] == "mirror"][-1] == "identical"
    ver = await verify(links["h1"], str(src), links["h2"], str(dst))
    assert ver.verified and ver.result == "identical"


async def test_flipped_byte_is_a_mismatch_and_mirror_refuses(links, dirs):
    src, dst, files = dirs
    assert (await mirror(links["h1"], str(src), links["h2"], str(dst))).verified
    target = dst / "adapter_model.safetensors"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    before = (read_tree(dst), target.stat().st_mtime_ns)
    ver = await verify(links["h1"], str(src), links["h2"], str(dst))
    assert not ver.verified and ver.result == "differs"
    status = {f.path: f.status for f in ver.files}
    assert status["adapter_model.safetensors"] == "mismatch"
    assert all(s == "identical" for p, s in status.items() if p != "adapter_model.safetensors")
    rep = await mirror(links["h1"], str(src), links["h2"], str(dst))
    assert rep.result == "refused" and rep.reason == "dst-differs" and not rep.ok
    assert (read_tree(dst), target.stat().st_mtime_ns) == before
    assert [r["result"] for r in read_audit() if r["action"] == "mirror"][-1] == "refused"


async def test_missing_and_extra_files(links, dirs):
    src, dst, files = dirs
    assert (await mirror(links["h1"], str(src), links["h2"], str(dst))).verified
    (dst / "odd" / "-rf").unlink()
    (dst / "odd" / "stray\nfile").write_bytes(b"x")
    ver = await verify(links["h1"], str(src), links["h2"], str(dst))
    status = {f.path: f.status for f in ver.files}
    assert status["odd/-rf"] == "missing" and status["odd/stray\nfile"] == "extra"
    assert not ver.verified
    assert ver.bytes_src != ver.bytes_dst or len(ver.files) == len(files) + 1


async def test_into_an_existing_empty_folder_and_stale_partials_go(links, dirs):
    src, dst, files = dirs
    dst.mkdir(parents=True)
    stale = dst.parent / f".{dst.name}.fleetdeck-partial-999999999-deadbeef"
    (stale / "junk").mkdir(parents=True)
    rep = await mirror(links["h1"], str(src), links["h2"], str(dst))
    assert rep.result == "copied", rep.error
    assert read_tree(dst) == files
    assert leftovers(dst.parent) == []


async def test_dry_run_copies_nothing(links, dirs):
    src, dst, files = dirs
    rep = await mirror(links["h1"], str(src), links["h2"], str(dst), dry_run=True)
    assert rep.ok and rep.result == "would-copy" and not rep.verified
    assert {f.path for f in rep.files if f.kind == "file"} == set(files)
    assert {f.path for f in rep.files if f.kind == "dir"} == {
        "deep",
        "deep/a",
        "deep/a/b",
        "odd",
        "empty-dir",
    }
    assert not dst.exists() and not dst.parent.exists()
    assert [r for r in read_audit() if r["action"] == "mirror"] == []
    ver = await verify(links["h1"], str(src), links["h2"], str(dst))
    assert not ver.ok and ver.reason == "dst-not-found"
    assert {f.status for f in ver.files} == {"missing"}


async def test_symlink_in_source_refused_unless_followed(links, dirs):
    src, dst, files = dirs
    outside = src.parent / "outside.bin"
    outside.write_bytes(b"target\n")
    (src / "odd" / "link").symlink_to(outside)
    rep = await mirror(links["h1"], str(src), links["h2"], str(dst))
    assert rep.result == "refused" and rep.reason == "symlink"
    assert not dst.exists()
    rep = await mirror(links["h1"], str(src), links["h2"], str(dst), follow_symlinks=True)
    assert rep.result == "refused" and rep.reason == "symlink-outside"
    rep = await mirror(
        links["h1"], str(src), links["h2"], str(dst), follow_symlinks=True, allow_outside_links=True
    )
    assert rep.verified, rep.error
    assert (dst / "odd" / "link").read_bytes() == b"target\n"
    assert not (dst / "odd" / "link").is_symlink()


async def test_overlap_and_missing_source_refused(links, dirs):
    src, dst, files = dirs
    rep = await mirror(links["h1"], str(src), links["h1"], str(src / "inside"))
    assert rep.result == "refused" and rep.reason == "overlap"
    rep = await mirror(links["h1"], str(src) + "-nope", links["h2"], str(dst))
    assert rep.result == "refused" and rep.reason == "src-not-found"
    assert not dst.exists()


async def test_source_rewritten_mid_copy_fails(links, dirs):
    src, dst, files = dirs
    big = src / "adapter_model.safetensors"
    big.write_bytes(os.urandom(6 << 20))
    touched = []

    def progress(done, total):
        if not touched:
            touched.append(done)
            with open(big, "ab") as f:  # the trainer saving again while we copy
                f.write(b"more")

    rep = await mirror(links["h1"], str(src), links["h2"], str(dst), progress=progress)
    assert touched
    assert rep.result == "failed" and rep.reason == "source-changed", rep.error
    assert not dst.exists()
    assert leftovers(dst.parent) == []
    assert [r["result"] for r in read_audit() if r["action"] == "mirror"] == ["started", "failed"]


async def test_bytes_damaged_on_the_destination_disk_are_caught(links, dirs):
    """What lands on DST's disk is hashed there: a byte changed under the writer fails the copy."""
    src, dst, files = dirs
    (src / "adapter_model.safetensors").write_bytes(os.urandom(24 << 20))
    damaged = []

    def progress(done, total):
        if not damaged and done >= 16 << 20:  # the writer is well past the file's start
            (partial,) = leftovers(dst.parent)
            with open(dst.parent / partial / "adapter_model.safetensors", "r+b") as f:
                first = f.read(1)
                f.seek(0)
                f.write(bytes([first[0] ^ 0xFF]))
            damaged.append(done)

    rep = await mirror(links["h1"], str(src), links["h2"], str(dst), progress=progress)
    assert damaged
    assert rep.result == "failed" and rep.reason == "mismatch", rep.error
    bad = [f for f in rep.files if f.status == "mismatch"]
    assert [f.path for f in bad] == ["adapter_model.safetensors"]
    assert bad[0].sha256_src != bad[0].sha256_dst
    assert not dst.exists() and leftovers(dst.parent) == []


def _mount_tmpfs(path: Path, size: str) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    path.mkdir(parents=True, exist_ok=True)
    return (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
        ).returncode
        == 0
    )


@pytest.mark.root
async def test_destination_fills_up_mid_copy(links, dirs):
    src, dst, files = dirs
    big = src / "adapter_model.safetensors"
    parent = dst.parent
    if not _mount_tmpfs(parent, "4m"):
        pytest.skip("needs root and tmpfs mounts")
    try:
        big.write_bytes(os.urandom(6 << 20))
        rep = await mirror(links["h1"], str(src), links["h2"], str(dst))
        assert rep.result == "refused" and rep.reason == "no-space", rep.error
        assert os.listdir(parent) == []

        big.write_bytes(os.urandom(3 << 20))
        filled = []

        def progress(done, total):
            if not filled:  # something else takes the space while we copy
                filled.append(done)
                (parent / "filler").write_bytes(b"\0" * (2 << 20))

        rep = await mirror(links["h1"], str(src), links["h2"], str(dst), progress=progress)
        assert filled
        assert rep.result == "failed" and rep.reason == "disk-full", rep.error
        assert not dst.exists()
        assert os.listdir(parent) == ["filler"]
        assert [r["result"] for r in read_audit() if r["action"] == "mirror"] == [
            "refused",
            "started",
            "failed",
        ]
    finally:
        subprocess.run(["umount", str(parent)], check=False)


async def test_connection_killed_mid_copy(spare_fleet, tmp_path):
    a, b = spare_fleet.add("mirror-src"), spare_fleet.add("mirror-dst")
    fleet = load_fleet(str(spare_fleet.write_fleet(tmp_path / "hosts.toml")))
    src = a.root / "adapter"
    src.mkdir()
    (src / "adapter_model.safetensors").write_bytes(os.urandom(8 << 20))
    dst = b.root / "copy" / "adapter"
    killed = []

    def progress(done, total):
        if not killed and done >= 1 << 20:
            spare_fleet.kill("mirror-dst")  # its sshd, the live session and the writer
            killed.append(done)

    sl, dl = HostLink(fleet.host("mirror-src")), HostLink(fleet.host("mirror-dst"))
    try:
        rep = await mirror(sl, str(src), dl, str(dst), progress=progress)
        assert killed
        assert rep.result == "failed" and not rep.verified
        assert rep.reason in ("disconnected", "unreachable", "timeout"), rep
        assert not dst.exists()
        # the writer killed with its host leaves its partial folder; on a busy machine it can also
        # see its input end before the kill reaches it, and remove the partial itself (as when the
        # source host dies): one partial at most, never the final name
        assert len(leftovers(dst.parent)) <= 1
        # the host comes back; the next run removes any partial a dead writer left, and copies
        spare_fleet.start("mirror-dst")
        dl2 = HostLink(fleet.host("mirror-dst"))
        try:
            rep = await mirror(sl, str(src), dl2, str(dst))
        finally:
            await dl2.close()
        assert rep.verified, rep.error
        assert leftovers(dst.parent) == []
    finally:
        await sl.close()
        await dl.close()


async def test_source_host_killed_mid_copy(spare_fleet, tmp_path):
    """The writer outlives the loss: its input ends and it removes its own partial folder."""
    a, b = spare_fleet.add("mirror-src2"), spare_fleet.add("mirror-dst2")
    fleet = load_fleet(str(spare_fleet.write_fleet(tmp_path / "hosts.toml")))
    src = a.root / "adapter"
    src.mkdir()
    (src / "adapter_model.safetensors").write_bytes(os.urandom(8 << 20))
    dst = b.root / "copy" / "adapter"
    killed = []

    def progress(done, total):
        if not killed and done >= 1 << 20:
            spare_fleet.kill("mirror-src2")
            killed.append(done)

    sl, dl = HostLink(fleet.host("mirror-src2")), HostLink(fleet.host("mirror-dst2"))
    try:
        rep = await mirror(sl, str(src), dl, str(dst), progress=progress)
    finally:
        await sl.close()
        await dl.close()
    assert killed
    assert rep.result == "failed" and rep.reason == "disconnected", rep
    assert "mirror-src2" in rep.error
    assert not dst.exists() and leftovers(dst.parent) == []


def test_cli_exit_codes_and_json(fleet_file, dirs, capsys):
    src, dst, files = dirs
    s, d = f"h1:{src}", f"h2:{dst}"
    assert main(["mirror", "--hosts", str(fleet_file), s, d, "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["dry_run"] is True and not dst.exists()
    assert main(["mirror", "--hosts", str(fleet_file), s, d, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verified"] is True and doc["src"] == s and doc["dst"] == d
    assert doc["bytes_src"] == doc["bytes_dst"] == sum(len(v) for v in files.values())
    assert {f["status"] for f in doc["files"]} == {"copied"}
    assert set(doc["files"][0]) >= {"path", "bytes", "sha256_src", "sha256_dst", "status"}
    assert main(["verify", "--hosts", str(fleet_file), s, d]) == 0
    (dst / "adapter_config.json").write_bytes(b'{"r": 64}\n')
    capsys.readouterr()
    assert main(["verify", "--hosts", str(fleet_file), s, d, "--json"]) == 1
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["verified"] is False
    assert {f["path"]: f["status"] for f in doc["files"]}["adapter_config.json"] == "mismatch"
    assert "Traceback" not in out.err and out.err.count("\n") == 1
    assert main(["mirror", "--hosts", str(fleet_file), s, d]) == 1
    err = capsys.readouterr().err
    assert "refused" in err and "Traceback" not in err
    assert main(["mirror", "--hosts", str(fleet_file), "h1", d]) == 2
    assert main(["verify", "--hosts", str(fleet_file), "nohost:/x", d]) == 2


def test_local_host_end(fleet_file, dirs):
    """The built-in kind of host (local = true, no SSH) works at either end."""
    src, dst, files = dirs
    path = fleet_file
    path.write_text(path.read_text() + "\n[hosts.here]\nlocal = true\n")
    assert main(["mirror", "--hosts", str(path), f"here:{src}", f"h2:{dst}"]) == 0
    assert read_tree(dst) == files
    assert main(["verify", "--hosts", str(path), f"h2:{dst}", f"here:{src}"]) == 0


def _python38() -> str | None:
    for cand in (os.path.expanduser("~/.pyenv/versions/3.8.18/bin/python"), "python3.8"):
        path = shutil.which(cand)
        if path is None:
            continue
        # a pyenv shim exists whether or not it can run that version: ask the interpreter
        res = subprocess.run(
            [path, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
        )
        if res.returncode == 0 and res.stdout.strip() == "(3, 8)":
            return path
    return None


def test_helper_runs_on_python38(tmp_path, dirs):
    """Hosts may have only Python 3.8: list, read, write and verify there too."""
    py38 = _python38()
    if py38 is None:
        pytest.skip("no Python 3.8 interpreter here")
    src, dst, files = dirs
    path = tmp_path / "hosts.toml"
    path.write_text(
        f'[defaults]\npython = "{py38}"\n[hosts.old1]\nlocal = true\n[hosts.old2]\nlocal = true\n'
    )
    assert main(["mirror", "--hosts", str(path), f"old1:{src}", f"old2:{dst}"]) == 0
    assert read_tree(dst) == files
    assert main(["verify", "--hosts", str(path), f"old1:{src}", f"old2:{dst}"]) == 0
