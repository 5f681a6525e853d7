"""Symlinks and folders in mirror/verify, on real sshd hosts with real links.

`--follow-symlinks` applies to the source only: a symlink anywhere in the destination (the
destination itself included) is never followed, so "identical" needs real files there. Links
in the source that point outside it are refused unless allowed, then named. A folder present
on one side only (empty ones too) is a difference. DST's parent is written only as the real
folder it was opened as: a symlink there, before or during the copy, is refused."""

from __future__ import annotations

import json
import os
import shutil
import uuid

import pytest

from fleetdeck.backend.actions.audit import read_audit
from fleetdeck.backend.actions.mirror.main import mirror
from fleetdeck.backend.actions.mirror.verify import verify
from fleetdeck.cli.main import main

from support.trees import make_tree, read_tree

pytestmark = pytest.mark.sshd


@pytest.fixture
def dirs(sshd_fleet):
    tag = uuid.uuid4().hex[:8]
    src = sshd_fleet.hosts["h1"].root / f"ln-{tag}" / "adapter"
    src.mkdir(parents=True)
    files = make_tree(src, big=50_000)
    dst = sshd_fleet.hosts["h2"].root / f"ln-{tag}" / "adapter"
    yield src, dst, files
    shutil.rmtree(src.parent, ignore_errors=True)
    shutil.rmtree(dst.parent, ignore_errors=True)


async def _copied(links, src, dst):
    rep = await mirror(links["h1"], str(src), links["h2"], str(dst))
    assert rep.verified, rep.error
    return rep


def _status(rep):
    return {(f.path, f.kind): f.status for f in rep.files}


async def test_a_symlinked_file_in_the_destination_is_never_identical(links, dirs):
    src, dst, files = dirs
    await _copied(links, src, dst)
    real = dst.parent / "elsewhere.bin"
    os.replace(dst / "adapter_model.safetensors", real)  # same bytes, just not in DST
    (dst / "adapter_model.safetensors").symlink_to(real)
    for follow in (True, False):
        ver = await verify(links["h1"], str(src), links["h2"], str(dst), follow_symlinks=follow)
        assert not ver.verified and ver.result == "differs", ver
        st = _status(ver)
        assert st[("adapter_model.safetensors", "file")] == "missing"
        assert st[("adapter_model.safetensors", "symlink")] == "extra"
    # mirror onto it: refused, not "identical"; the link stays as it was
    rep = await mirror(links["h1"], str(src), links["h2"], str(dst), follow_symlinks=True)
    assert rep.result == "refused" and rep.reason == "dst-differs" and not rep.ok
    assert (dst / "adapter_model.safetensors").is_symlink()


async def test_the_destination_itself_as_a_symlink_is_refused(links, dirs):
    src, dst, files = dirs
    await _copied(links, src, dst)
    alias = dst.parent / "alias"
    alias.symlink_to(dst)
    for follow in (False, True):
        ver = await verify(links["h1"], str(src), links["h2"], str(alias), follow_symlinks=follow)
        assert ver.result == "refused" and ver.reason == "dst-symlink" and not ver.ok, ver
    rep = await mirror(links["h1"], str(src), links["h2"], str(alias), follow_symlinks=True)
    assert rep.result == "refused" and rep.reason == "dst-symlink"


async def test_a_symlinked_folder_in_the_destination_differs(links, dirs):
    src, dst, files = dirs
    await _copied(links, src, dst)
    moved = dst.parent / "deep-real"
    os.replace(dst / "deep", moved)
    (dst / "deep").symlink_to(moved)
    ver = await verify(links["h1"], str(src), links["h2"], str(dst), follow_symlinks=True)
    assert not ver.verified
    st = _status(ver)
    assert st[("deep", "symlink")] == "extra" and st[("deep", "dir")] == "missing"
    assert st[("deep/a/b/c.txt", "file")] == "missing"


async def test_missing_or_extra_empty_folders_are_differences(links, dirs):
    src, dst, files = dirs
    await _copied(links, src, dst)
    (dst / "empty-dir").rmdir()
    ver = await verify(links["h1"], str(src), links["h2"], str(dst))
    assert not ver.verified and _status(ver)[("empty-dir", "dir")] == "missing"
    (dst / "empty-dir").mkdir()
    (dst / "new empty\nfolder").mkdir()
    ver = await verify(links["h1"], str(src), links["h2"], str(dst))
    assert not ver.verified and _status(ver)[("new empty\nfolder", "dir")] == "extra"
    rep = await mirror(links["h1"], str(src), links["h2"], str(dst))
    assert rep.result == "refused" and rep.reason == "dst-differs"
    (dst / "new empty\nfolder").rmdir()
    assert (await verify(links["h1"], str(src), links["h2"], str(dst))).verified


async def test_links_outside_the_source_are_refused_unless_allowed(links, dirs):
    src, dst, files = dirs
    outside = src.parent / "outside.bin"
    outside.write_bytes(b"outside\n")
    (src / "odd" / "out link").symlink_to(outside)
    (src / "inside link").symlink_to("adapter_config.json")  # relative, inside SRC
    rep = await mirror(links["h1"], str(src), links["h2"], str(dst), follow_symlinks=True)
    assert rep.result == "refused" and rep.reason == "symlink-outside", rep
    assert "out link" in rep.error and not dst.exists()
    ver = await verify(links["h1"], str(src), links["h2"], str(dst), follow_symlinks=True)
    assert ver.reason == "symlink-outside"

    rep = await mirror(
        links["h1"], str(src), links["h2"], str(dst), follow_symlinks=True, allow_outside_links=True
    )
    assert rep.verified, rep.error
    assert rep.outside_links == (("odd/out link", str(outside)),)
    assert (dst / "odd" / "out link").read_bytes() == b"outside\n"
    assert not (dst / "odd" / "out link").is_symlink()
    assert (dst / "inside link").read_bytes() == files["adapter_config.json"]
    assert rep.to_json()["outside_links"] == [["odd/out link", str(outside)]]
    assert read_tree(dst)["odd/out link"] == b"outside\n"


def test_cli_names_links_followed_outside(dirs, fleet_file, capsys):
    src, dst, files = dirs
    outside = src.parent / "outside.bin"
    outside.write_bytes(b"outside\n")
    (src / "out link").symlink_to(outside)
    args = ["mirror", "--hosts", str(fleet_file), f"h1:{src}", f"h2:{dst}", "--follow-symlinks"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "symlink" in err and "out link" in err and err.count("\n") == 1
    assert main([*args, "--allow-outside-links", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["outside_links"] == [["out link", str(outside)]] and doc["verified"]
    assert (
        main(
            [
                "verify",
                "--hosts",
                str(fleet_file),
                f"h1:{src}",
                f"h2:{dst}",
                "--follow-symlinks",
                "--allow-outside-links",
            ]
        )
        == 0
    )
    assert "followed outside SRC" in capsys.readouterr().out


# -- the destination's folder: written only through real folders, opened once --------------
@pytest.fixture
def swap_dirs(sshd_fleet):
    """A source with a 6 MiB file and files after it (h1); a destination whose parent (on h2)
    the test swaps for a symlink; the folders a swap moves things to are cleaned up too."""
    tag = uuid.uuid4().hex[:8]
    src = sshd_fleet.hosts["h1"].root / f"sw-{tag}" / "adapter"
    src.mkdir(parents=True)
    files = make_tree(src, big=6 << 20)
    top = sshd_fleet.hosts["h2"].root / f"sw-{tag}"
    top.mkdir()
    yield src, top / "parent" / "adapter", files
    shutil.rmtree(src.parent, ignore_errors=True)
    shutil.rmtree(top, ignore_errors=True)


def _partials(folder):
    return [n for n in os.listdir(folder) if "fleetdeck-partial" in n] if folder.is_dir() else []


def _swap_when_copying(parent, aside, target):
    """A progress callback that, once 1 MiB has moved, renames DST's parent to `aside` and
    puts a symlink to `target` in its place (the writer is mid-file, more files to come)."""
    done_once = []

    def progress(done, total):
        if not done_once and done >= 1 << 20:
            os.rename(parent, aside)
            if not target.exists():
                target.mkdir()
            os.symlink(target, parent)
            done_once.append(done)

    return progress, done_once


@pytest.mark.parametrize("leads_to", ["the moved folder", "another folder"])
async def test_a_parent_swapped_for_a_symlink_during_the_copy_is_never_written_through(
    links, swap_dirs, leads_to
):
    """DST's parent is renamed away mid-copy and a symlink put at its name, leading back to
    the moved folder itself (so every path still resolves) or elsewhere. The writer opened the
    parent once, by descriptor and without following a link, and works below it only: the copy
    is refused `symlink`, nothing is written through the link, the partial folder is removed
    from where it really is, and nothing is left under the final name on either side."""
    src, dst, files = swap_dirs
    parent = dst.parent
    parent.mkdir()
    (parent / "neighbour.txt").write_bytes(b"stays\n")
    aside = parent.with_name("parent-moved")
    target = aside if leads_to == "the moved folder" else parent.with_name("elsewhere")
    progress, swapped = _swap_when_copying(parent, aside, target)
    rep = await mirror(links["h1"], str(src), links["h2"], str(dst), progress=progress)
    assert swapped, "the swap happened during the copy"
    assert rep.result == "failed" and rep.reason == "symlink" and not rep.ok and not rep.verified, (
        rep
    )
    assert "symlink" in rep.error and "nothing was written through it" in rep.error, rep.error
    assert "partial folder was removed" in rep.error, rep.error
    assert rep.verified_by is None and rep.to_json()["witnesses"] == 0
    for folder in (aside, target):
        assert not (folder / "adapter").exists() and _partials(folder) == [], os.listdir(folder)
    assert sorted(os.listdir(aside)) == ["neighbour.txt"]
    log = [r for r in read_audit() if r["action"] == "mirror"]
    assert (
        log[-1]["result"] == "failed" and log[-1]["reason"] == "symlink" and not log[-1]["verified"]
    )


async def test_a_parent_swapped_for_a_symlink_during_a_replace_keeps_the_original(links, swap_dirs):
    """The same swap while --replace copies beside a DST that differs: refused `symlink`
    before either rename, the original untouched under its own name in the moved folder, no
    kept copy made, no partial folder left."""
    src, dst, files = swap_dirs
    assert (await mirror(links["h1"], str(src), links["h2"], str(dst))).verified
    (dst / "adapter_config.json").write_bytes(b'{"r": 8}\n')  # DST now differs
    before = read_tree(dst)
    parent = dst.parent
    aside = parent.with_name("parent-moved")
    progress, swapped = _swap_when_copying(parent, aside, aside)
    rep = await mirror(
        links["h1"], str(src), links["h2"], str(dst), progress=progress, replace=True
    )
    assert swapped
    assert rep.result == "failed" and rep.reason == "symlink" and not rep.ok, rep
    assert read_tree(aside / "adapter") == before
    assert sorted(os.listdir(aside)) == ["adapter"], os.listdir(aside)  # no kept copy, no partial


async def test_a_destination_reached_through_a_symlink_is_refused_before_copying(links, swap_dirs):
    """A link already in DST's path (its parent, or a folder above a parent still to be made)
    refuses `symlink` at the plan, dry run included: nothing is created where it leads."""
    src, dst, files = swap_dirs
    real = dst.parent.with_name("real")
    real.mkdir()
    dst.parent.symlink_to(real)
    for path in (dst, dst.parent / "new" / "adapter"):
        for dry in (True, False):
            rep = await mirror(links["h1"], str(src), links["h2"], str(path), dry_run=dry)
            assert rep.result == "refused" and rep.reason == "symlink" and not rep.ok, rep
            assert "is a symlink" in rep.error and str(dst.parent) in rep.error, rep.error
            assert os.listdir(real) == []
