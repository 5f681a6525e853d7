"""The source changing under a copy, on real sshd hosts: whenever mirror exits 0, an immediate
verify agrees. A rewrite hidden by restoring the mtime (os.utime) is caught by ctime; a file
or folder that appears during the copy is caught by walking the source again."""

from __future__ import annotations

import os
import shutil
import uuid

import pytest

from fleetdeck.backend.actions.mirror.main import mirror
from fleetdeck.backend.actions.mirror.verify import verify

pytestmark = pytest.mark.sshd

CONFIG = b'{"r": 32, "alpha": 64}\n'


@pytest.fixture
def dirs(sshd_fleet):
    tag = uuid.uuid4().hex[:8]
    src = sshd_fleet.hosts["h1"].root / f"chg-{tag}" / "adapter"
    src.mkdir(parents=True)
    # sorted by name: the config streams first, then the big file gives time to act
    (src / "adapter_config.json").write_bytes(CONFIG)
    (src / "adapter_model.safetensors").write_bytes(os.urandom(12 << 20))
    (src / "sub").mkdir()
    (src / "sub" / "notes.txt").write_bytes(b"notes\n")
    dst = sshd_fleet.hosts["h2"].root / f"chg-{tag}" / "adapter"
    yield src, dst
    shutil.rmtree(src.parent, ignore_errors=True)
    shutil.rmtree(dst.parent, ignore_errors=True)


def once_past(nbytes, act):
    """A progress callback that runs `act` once, when more than `nbytes` were relayed (so the
    files before that point were read from the source's disk and sent)."""
    done = []

    def progress(d, total):
        if not done and d > nbytes:
            done.append(d)
            act()

    return progress, done


async def _mirror_then_verify(links, src, dst, progress):
    rep = await mirror(links["h1"], str(src), links["h2"], str(dst), progress=progress)
    ver = await verify(links["h1"], str(src), links["h2"], str(dst))
    if rep.ok:  # the invariant
        assert ver.verified, (rep, ver)
    return rep, ver


async def test_rewrite_with_restored_mtime_is_caught(links, dirs):
    src, dst = dirs
    cfg = src / "adapter_config.json"

    def rewrite():  # same size, other bytes, mtime put back: size/mtime/inode all look unchanged
        st = cfg.stat()
        with open(cfg, "r+b") as f:
            f.write(CONFIG.replace(b"32", b"64"))
        os.utime(cfg, ns=(st.st_atime_ns, st.st_mtime_ns))
        after = cfg.stat()
        assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
            st.st_size,
            st.st_mtime_ns,
            st.st_ino,
        )

    progress, done = once_past(len(CONFIG), rewrite)
    rep, ver = await _mirror_then_verify(links, src, dst, progress)
    assert done
    assert rep.result == "failed" and rep.reason == "source-changed", rep
    assert "adapter_config.json" in rep.error
    assert not dst.exists() and not ver.verified


async def test_a_file_or_folder_appearing_during_the_copy_is_caught(links, dirs):
    src, dst = dirs

    def add():
        (src / "sub" / "late.txt").write_bytes(b"late\n")
        (src / "late empty folder").mkdir()

    progress, done = once_past(len(CONFIG), add)
    rep, ver = await _mirror_then_verify(links, src, dst, progress)
    assert done
    assert rep.result == "failed" and rep.reason == "source-changed", rep
    assert not dst.exists()


async def test_a_folder_removed_during_the_copy_is_caught(links, dirs):
    src, dst = dirs
    (src / "gone").mkdir()
    progress, done = once_past(len(CONFIG), lambda: (src / "gone").rmdir())
    rep, ver = await _mirror_then_verify(links, src, dst, progress)
    assert done and rep.reason == "source-changed", rep


async def test_a_touch_that_keeps_the_bytes_is_hashed_again_and_accepted(links, dirs):
    """ctime moved but the bytes did not: hashed again on the source, the copy stands."""
    src, dst = dirs
    cfg = src / "adapter_config.json"

    def touch():
        st = cfg.stat()
        os.utime(cfg, ns=(st.st_atime_ns, st.st_mtime_ns))  # only ctime changes

    progress, done = once_past(len(CONFIG), touch)
    rep, ver = await _mirror_then_verify(links, src, dst, progress)
    assert done
    assert rep.result == "copied" and rep.ok, rep
    assert ver.verified


async def test_a_folder_swapped_for_a_link_outside_is_caught(links, dirs):
    """With --follow-symlinks, a folder swapped mid-copy for a link to an identical folder
    outside SRC: same bytes, but SRC now leaves itself, which it did not when planned."""
    src, dst = dirs
    elsewhere = src.parent / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "notes.txt").write_bytes(b"notes\n")

    def swap():
        os.replace(src / "sub", src.parent / "sub-old")
        (src / "sub").symlink_to(elsewhere)

    total = sum(p.stat().st_size for p in src.rglob("*") if p.is_file())
    progress, done = once_past(total - 1, swap)  # after the last byte: every file was read
    rep = await mirror(
        links["h1"], str(src), links["h2"], str(dst), follow_symlinks=True, progress=progress
    )
    assert done
    assert rep.result == "failed" and rep.reason == "source-changed", rep
    assert "outside" in rep.error and not dst.exists()
    ver = await verify(links["h1"], str(src), links["h2"], str(dst), follow_symlinks=True)
    assert not ver.verified
